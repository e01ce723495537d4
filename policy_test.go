package redlimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// One policy of two limits for many users: 2 per second and 3 per minute,
// each user with their own. A refusal names the limit that refused.
func ExamplePolicy() {
	ctx := context.Background()
	store := memstore.New() // or a redisstore.Store, shared by every instance
	p, err := redlimit.NewPolicy(store, "api", []redlimit.Config{
		redlimit.PerSecond(2),
		redlimit.PerMinute(3),
	})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		r, err := p.Key("alice").TryAcquire(ctx, 1)
		if err != nil {
			panic(err)
		}
		by, _ := r.RefusedBy()
		fmt.Printf("alice %d: allowed=%v remaining=%d refused by %q\n", i, r.Allowed, r.Remaining, by.Name)
	}
	r, _ := p.Key("bob").TryAcquire(ctx, 1)
	fmt.Printf("bob: allowed=%v, %s: %d left, %s: %d left\n", r.Allowed,
		r.Limits[0].Name, r.Limits[0].Remaining, r.Limits[1].Name, r.Limits[1].Remaining)
	// Output:
	// alice 1: allowed=true remaining=1 refused by ""
	// alice 2: allowed=true remaining=0 refused by ""
	// alice 3: allowed=false remaining=0 refused by "2/1s"
	// bob: allowed=true, 2/1s: 1 left, 3/1m: 2 left
}

func TestPolicyMultiLimit(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.WithTimeSource(clk))
	p, err := redlimit.NewPolicy(store, "api", []redlimit.Config{redlimit.PerSecond(2), redlimit.PerMinute(3)}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	k := p.Key("u")
	for i, want := range []bool{true, true, false} {
		r, err := k.TryAcquire(ctx, 1)
		if err != nil || r.Allowed != want {
			t.Fatalf("call %d: %+v, %v; want allowed %v", i, r, err, want)
		}
	}
	clk.Advance(time.Second)
	if r, _ := k.TryAcquire(ctx, 1); !r.Allowed {
		t.Fatalf("after a second: %+v", r)
	}
	// The minute limit is spent now: refused by it, with its retry-after.
	clk.Advance(time.Second)
	r, err := k.TryAcquire(ctx, 1)
	if err != nil || r.Allowed {
		t.Fatalf("fourth in a minute: %+v, %v", r, err)
	}
	by, ok := r.RefusedBy()
	if !ok || by.Config.Interval != time.Minute || r.RetryAfter != 58*time.Second {
		t.Fatalf("refused by %+v (retry after %v), want the minute limit, 58s", by, r.RetryAfter)
	}
	// A refusal charged nothing: the second limit still has its two.
	if r.Limits[0].Remaining != 2 {
		t.Fatalf("per-second limit after a refusal: %+v", r.Limits[0])
	}
	// Whole again when its newest grant (a second later) leaves the window.
	if r.ResetAfter != 59*time.Second {
		t.Fatalf("reset after %v, want 59s", r.ResetAfter)
	}
	// Another key has its own limits.
	if r, _ := p.Key("v").TryAcquire(ctx, 1); !r.Allowed {
		t.Fatalf("another key: %+v", r)
	}
}

func TestPolicyBadInput(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	if _, err := redlimit.NewPolicy(store, "p", []redlimit.Config{}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("no limits: %v", err)
	}
	if _, err := redlimit.NewPolicy(store, "p", []redlimit.Config{redlimit.PerSecond(1).WithMode(redlimit.PerClient)}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("a per-client limit: %v", err)
	}
	if _, err := redlimit.NewPolicy(store, "p", nil, redlimit.WithClientID("x")); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("WithClientID: %v", err)
	}
	p, err := redlimit.NewPolicy(store, "p", []redlimit.Config{redlimit.PerSecond(2)})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", string(make([]byte, 1025))} {
		if _, err := p.Key(key).TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Fatalf("key of %d bytes: %v", len(key), err)
		}
	}
	if _, err := p.Key("k").TryAcquire(ctx, 3); !errors.Is(err, redlimit.ErrPermitsExceedRate) {
		t.Fatalf("3 permits of 2: %v", err)
	}
	if _, err := p.Key("k").TryAcquire(ctx, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("0 permits: %v", err)
	}
	// Any bytes are a key.
	if r, err := p.Key("\x00{}\xff").TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("binary key: %+v, %v", r, err)
	}
	q, _ := redlimit.NewPolicy(store, "unset", nil)
	if _, err := q.Key("k").TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("no policy: %v", err)
	}
}

// SetLimits reaches a client that knew other limits.
func TestPolicySetLimits(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a, _ := redlimit.NewPolicy(store, "p", []redlimit.Config{redlimit.PerMinute(1)})
	b, _ := redlimit.NewPolicy(store, "p", nil)
	if r, _ := a.Key("k").TryAcquire(ctx, 1); !r.Allowed {
		t.Fatal("first call refused")
	}
	if ok, err := b.TrySetLimits(ctx, []redlimit.Config{redlimit.PerMinute(5)}); ok || !errors.Is(err, redlimit.ErrConfigMismatch) {
		t.Fatalf("TrySetLimits over another: %v, %v", ok, err)
	}
	if err := b.SetLimits(ctx, []redlimit.Config{redlimit.PerMinute(3)}); err != nil {
		t.Fatal(err)
	}
	r, err := a.Key("k").TryAcquire(ctx, 1)
	if err != nil || !r.Allowed || r.Limits[0].Config.Rate != 3 || r.Remaining != 1 {
		t.Fatalf("after SetLimits (keeping state): %+v, %v", r, err)
	}
	lims, err := a.Limits(ctx)
	if err != nil || len(lims) != 1 || lims[0].Rate != 3 {
		t.Fatalf("Limits: %v, %v", lims, err)
	}
}

// A waiting call on a multi-limit policy reserves at the latest limit's
// instant and is granted then; a deadline sooner than that is refused at
// once, charging nothing.
func TestPolicyWaitMultiLimit(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := memstore.New(memstore.WithTimeSource(clk))
	p, _ := redlimit.NewPolicy(store, "p", []redlimit.Config{redlimit.PerSecond(1), redlimit.PerInterval(2, 10*time.Second)}, redlimit.WithClock(clk))
	k := p.Key("k")
	ctx := context.Background()
	k.TryAcquire(ctx, 1)
	done := make(chan redlimit.Result)
	go func() {
		r, err := k.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	clk.WaitForTimers(1, nil)
	start := clk.Now()
	clk.Advance(time.Second)
	if r := <-done; !r.Allowed || r.Waited != time.Second || !r.At.Equal(start.Add(time.Second)) {
		t.Fatalf("after waiting: %+v; want granted after a reservation of 1s", r)
	}
	// Both of the 10 s limit are spent: a deadline sooner than that is refused at once.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	clk.Advance(time.Second)
	if _, err := k.Acquire(dctx, 1); !errors.Is(err, redlimit.ErrWouldExceedDeadline) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	if st, err := k.Status(ctx); err != nil || st.Limits[0].Remaining != 1 || st.Limits[1].Remaining != 0 {
		t.Fatalf("status after the refusal: %+v, %v; want the per-second limit untouched", st, err)
	}
}

// TestPolicyResultsKeepTheirLimits: every Result owns its Limits, whatever
// the calls made after it (Results share allocations): a later decision
// never shows through an earlier Result, and appending to one never
// writes another's.
func TestPolicyResultsKeepTheirLimits(t *testing.T) {
	ctx := context.Background()
	for _, limits := range [][]redlimit.Config{
		{redlimit.TokenBucketConfig(100, time.Minute, 100)},
		{redlimit.TokenBucketConfig(100, time.Minute, 100), redlimit.PerMinute(200)},
	} {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), "api", limits, redlimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var rs []redlimit.Result
		for i := range 100 { // several slabs' worth
			r, err := p.Key("k").TryAcquire(ctx, 1)
			if err != nil || !r.Allowed {
				t.Fatalf("call %d: %+v, %v", i, r, err)
			}
			rs = append(rs, r)
		}
		for i, r := range rs {
			if len(r.Limits) != len(limits) || cap(r.Limits) != len(limits) {
				t.Fatalf("call %d: %d limits (cap %d), want %d", i, len(r.Limits), cap(r.Limits), len(limits))
			}
			if want := int64(99 - i); r.Limits[0].Remaining != want || r.Remaining != want {
				t.Fatalf("call %d: %d left (%d on the first limit), want %d", i, r.Remaining, r.Limits[0].Remaining, want)
			}
			if r.Limits[0].Name != redlimit.LimitName(limits[0]) {
				t.Fatalf("call %d: limit named %q", i, r.Limits[0].Name)
			}
		}
		_ = append(rs[0].Limits, redlimit.LimitStatus{Remaining: -1})
		if got := rs[1].Limits[0].Remaining; got != 98 {
			t.Fatalf("appending to a Result's Limits changed the next one's: %d left", got)
		}
	}
}

// TestPolicyKeyValidateBounds: a policy's name and key are 1..1024 bytes.
func TestPolicyKeyValidateBounds(t *testing.T) {
	long, longer := string(make([]byte, 1024)), string(make([]byte, 1025))
	for _, k := range []redlimit.PolicyKey{{Policy: "p", Key: "k"}, {Policy: long, Key: long}} {
		if err := k.Validate(); err != nil {
			t.Errorf("%d-byte name, %d-byte key: %v", len(k.Policy), len(k.Key), err)
		}
	}
	for _, k := range []redlimit.PolicyKey{{Key: "k"}, {Policy: "p"}, {Policy: longer, Key: "k"}, {Policy: "p", Key: longer}} {
		if err := k.Validate(); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%d-byte name, %d-byte key: %v, want ErrInvalidArgument", len(k.Policy), len(k.Key), err)
		}
	}
}

// TestPolicyResultNamesFollowLimits: a Result names the limits it was
// decided under, through changes of them made by another client of the
// store (the same limits stored again, other limits, deleted and
// restored).
func TestPolicyResultNamesFollowLimits(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	one, two := []redlimit.Config{redlimit.PerMinute(100)}, []redlimit.Config{redlimit.PerSecond(50), redlimit.PerMinute(200)}
	p, err := redlimit.NewPolicy(store, "p", one)
	if err != nil {
		t.Fatal(err)
	}
	other, err := redlimit.NewPolicy(store, "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want []redlimit.Config) {
		t.Helper()
		for range 3 {
			r, err := p.Key("k").TryAcquire(ctx, 1)
			if err != nil || len(r.Limits) != len(want) {
				t.Fatalf("%s: %+v, %v", step, r, err)
			}
			for i, l := range r.Limits {
				if l.Name != redlimit.LimitName(want[i]) {
					t.Fatalf("%s: limit %d named %q, want %q", step, i, l.Name, redlimit.LimitName(want[i]))
				}
			}
		}
	}
	check("first", one)
	steps := []struct {
		name string
		do   func() error
		want []redlimit.Config
	}{
		{"the same limits stored again", func() error { return other.SetLimits(ctx, one) }, one},
		{"other limits", func() error { return other.SetLimits(ctx, two) }, two},
		{"the first ones again", func() error { return other.SetLimits(ctx, one) }, one},
		{"deleted, restored from the caller's", func() error { _, err := other.Delete(ctx); return err }, one},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name, s.want)
	}
}
