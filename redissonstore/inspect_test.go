package redissonstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestInspectAll: a PER_CLIENT limiter is read with every client that has
// state, found by scanning; an OVERALL one with its Overall state alone; a
// missing one is not Found.
func TestInspectAll(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(t0)
	s, err := New(redistest.Start(t).Client(t), WithTimeSource(fake))
	if err != nil {
		t.Fatal(err)
	}
	limiter := func(name, client string) *redlimit.Limiter {
		t.Helper()
		l, err := redlimit.New(s, name, redlimit.WithClock(fake), redlimit.WithClientID(client))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	acquire := func(l *redlimit.Limiter, n int64) {
		t.Helper()
		if r, err := l.TryAcquire(ctx, n); err != nil || !r.Allowed {
			t.Fatalf("TryAcquire(%d): %+v, %v", n, r, err)
		}
	}

	// PER_CLIENT, no client has acquired yet: no client state, and it says so.
	a := limiter("pc", "a")
	if err := a.SetRate(ctx, redlimit.PerInterval(3, time.Minute).WithMode(redlimit.PerClient)); err != nil {
		t.Fatal(err)
	}
	in, err := s.InspectAll(ctx, "pc")
	if err != nil || !in.Found() || !in.PerClient() || !in.ClientsScanned || len(in.States) != 1 {
		t.Fatalf("InspectAll before any acquire: %+v, %v", in, err)
	}
	if text := in.String(); !strings.Contains(text, "overall (not used: the limiter is PER_CLIENT)") || !strings.Contains(text, "no client has state") {
		t.Errorf("String() before any acquire:\n%s", text)
	}

	acquire(a, 2)
	acquire(limiter("pc", "b"), 3)
	in, err = s.InspectAll(ctx, "pc")
	if err != nil || len(in.States) != 3 {
		t.Fatalf("InspectAll: %+v, %v", in, err)
	}
	for i, want := range []struct {
		client      string
		left, inUse int64
	}{{"", 3, 0}, {"a", 1, 2}, {"b", 0, 3}} {
		if st := in.States[i]; st.Client != want.client || st.Left != want.left || st.InUse != want.inUse {
			t.Errorf("state %d: client %q, %d left, %d in use; want %q, %d, %d", i, st.Client, st.Left, st.InUse, want.client, want.left, want.inUse)
		}
	}
	text := in.String()
	for _, want := range []string{"client a: 1 left, 2 in use, counter 1", "client b: 0 left, 3 in use, counter 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("String() lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "no client has state") {
		t.Errorf("String() says no client has state:\n%s", text)
	}

	// Inspect without clients does not scan, and says what to do.
	in, err = s.Inspect(ctx, "pc")
	if err != nil || in.ClientsScanned || !strings.Contains(in.String(), "name client ids to see their states") {
		t.Errorf("Inspect without clients: %+v, %v:\n%s", in, err, in.String())
	}

	// OVERALL: the Overall state alone, no scan.
	o := limiter("all", "x")
	if err := o.SetRate(ctx, redlimit.PerInterval(2, time.Minute)); err != nil {
		t.Fatal(err)
	}
	acquire(o, 1)
	in, err = s.InspectAll(ctx, "all")
	if err != nil || in.PerClient() || in.ClientsScanned || len(in.States) != 1 || in.States[0].InUse != 1 {
		t.Fatalf("InspectAll of an OVERALL limiter: %+v, %v", in, err)
	}

	// Missing: nothing found, nothing initialized.
	in, err = s.InspectAll(ctx, "missing")
	if err != nil || in.Found() || in.Initialized || len(in.States) != 1 {
		t.Fatalf("InspectAll of a missing limiter: %+v, %v", in, err)
	}
}
