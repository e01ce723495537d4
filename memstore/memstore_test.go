package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		return memstore.New(memstore.WithTimeSource(clk))
	}, storetest.Full())
}

// TestExpireTakesOverallState: when a limiter's TTL passes its config and
// Overall state go, as in Redis (one hash holds both): a client that still
// knows the config restores it afresh.
func TestExpireTakesOverallState(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l, _ := redlimit.New(memstore.New(memstore.WithTimeSource(clk)), "ttl", redlimit.WithClock(clk))
	if err := l.SetRate(ctx, redlimit.PerInterval(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("first grant: %+v, %v", r, err)
	}
	if ok, err := l.Expire(ctx, 20*time.Millisecond); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	if r, err := l.TryAcquire(ctx, 1); err != nil || r.Allowed {
		t.Fatalf("before the TTL: %+v, %v; want a refusal", r, err)
	}
	clk.Advance(20 * time.Millisecond)
	if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("after the TTL: %+v, %v; want a grant from a fresh state", r, err)
	}
}

// TestConfigAsGiven: configs passed as a caller wrote them (not
// normalized), alternating between names, are each answered under their
// own normalized form, however the store remembers the last ones.
func TestConfigAsGiven(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithTimeSource(clock.NewFake(time.Unix(1_700_000_000, 0))))
	given := []redlimit.Config{
		{Algorithm: redlimit.TokenBucket, Rate: 10, Interval: time.Second},
		{Algorithm: redlimit.TokenBucket, Rate: 20, Interval: time.Second},
		{Rate: 5, Interval: time.Second},
	}
	for round := range 3 {
		for i, c := range given {
			want, err := c.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			key := redlimit.Key{Name: "given-" + string(rune('a'+i))}
			d, err := s.Acquire(ctx, key, c, 1, 0)
			if err != nil || !d.Granted {
				t.Fatalf("round %d, config %d: %+v, %v", round, i, d, err)
			}
			got := d.Config
			got.Epoch = 0
			if got != want || d.Remaining != want.Rate-int64(round)-1 {
				t.Fatalf("round %d, config %d: answered under %+v with %d left; want %+v with %d", round, i, d.Config, d.Remaining, want, want.Rate-int64(round)-1)
			}
		}
	}
}
