package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/redlimit/redlimit"
)

// algorithmCase is the config of algorithm a the per-algorithm cases use
// (3 permits, or 1 a second with room for 3) and how many single permits
// it grants at once from fresh.
func (e *env) algorithmCase(a redlimit.Algorithm) (cfg redlimit.Config, burst int) {
	e.t.Helper()
	switch a {
	case redlimit.SlidingLog, redlimit.FixedWindow, redlimit.SlidingCounter:
		return redlimit.PerInterval(3, 10*time.Second).WithAlgorithm(a), 3
	case redlimit.TokenBucket:
		return redlimit.TokenBucketConfig(1, time.Second, 3), 3
	case redlimit.LeakyBucket:
		return redlimit.LeakyBucketConfig(1, time.Second, 3), 1 // no bursts: one at a time
	}
	e.t.Fatalf("storetest has no config for algorithm %q: add one to algorithmCase", a)
	return redlimit.Config{}, 0
}

// testEveryAlgorithm: the whole API works the same way under every
// algorithm: config round trip, grants, exact retry-after, typed errors and
// per-client limits (waiting: testWaitersInOrder).
func testEveryAlgorithm(e *env, a redlimit.Algorithm) {
	cfg, burst := e.algorithmCase(a)
	name := "alg-" + string(a)
	l := e.limiter(name)
	if set, err := l.TrySetRate(e.ctx, cfg); !set || err != nil {
		e.t.Fatalf("%s: TrySetRate = %v, %v", name, set, err)
	}
	if got, err := l.Config(e.ctx); err != nil || !got.SameLimit(cfg) {
		e.t.Fatalf("%s: Config = %v, %v; want %v", name, got, err, cfg)
	}
	if n := e.available(l); n < 1 {
		e.t.Fatalf("%s: fresh limiter has %d available", name, n)
	}
	granted := 0
	var refused redlimit.Result
	for i := 0; i < 10; i++ {
		r := e.try(l, 1)
		if !r.Allowed {
			refused = r
			break
		}
		granted++
	}
	if granted != burst {
		e.t.Fatalf("%s: %d granted at once from fresh, want %d", name, granted, burst)
	}
	if refused.RetryAfter <= 0 || refused.Remaining != 0 {
		e.t.Fatalf("%s: refusal %+v; want a retry-after and 0 left", name, refused)
	}
	// The retry-after is exact: a millisecond early is still too early.
	e.clock.Advance(refused.RetryAfter - time.Millisecond)
	if r := e.try(l, 1); r.Allowed || r.RetryAfter != time.Millisecond {
		e.t.Fatalf("%s: 1ms before the retry-after: %+v", name, r)
	}
	e.clock.Advance(time.Millisecond)
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("%s: at the retry-after: %+v", name, r)
	}
	// Too many permits at once is a typed error under every algorithm.
	if _, err := l.TryAcquire(e.ctx, cfg.MaxPermits()+4); !errors.Is(err, redlimit.ErrPermitsExceedRate) {
		e.t.Fatalf("%s: too many permits: %v", name, err)
	}
	// PerClient: each client its own limit.
	pc := cfg.WithMode(redlimit.PerClient)
	ca := e.configured(name+"-pc", pc, redlimit.WithClientID("a"))
	cb := e.limiter(name+"-pc", redlimit.WithClientID("b"))
	for i := 0; i < burst; i++ {
		e.try(ca, 1)
	}
	if r := e.try(cb, 1); !r.Allowed {
		e.t.Fatalf("%s: client b refused after client a used its own limit: %+v", name, r)
	}
}

// testWaitersInOrder: under every algorithm, waiters on a drained limiter
// are served in arrival order, and one that gives up hands back its turn.
func testWaitersInOrder(e *env, a redlimit.Algorithm) {
	cfg, _ := e.algorithmCase(a)
	name := "alg-" + string(a)
	l := e.configured(name, cfg)
	for e.try(l, 1).Allowed {
	}
	firstc := make(chan redlimit.Result, 1)
	go func() {
		r, err := e.limiter(name).Acquire(e.ctx, 1)
		if err != nil {
			e.t.Errorf("%s: first waiter: %v", name, err)
		}
		firstc <- r
	}()
	e.waitTimers(1)
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := e.limiter(name).Acquire(ctx, 1)
		errc <- err
	}()
	e.waitTimers(2)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("%s: cancelled waiter: %v", name, err)
	}
	thirdc := make(chan redlimit.Result, 1)
	go func() {
		r, err := e.limiter(name).TryAcquireWait(e.ctx, 1, time.Hour)
		if err != nil {
			e.t.Errorf("%s: third waiter: %v", name, err)
		}
		thirdc <- r
	}()
	e.waitTimers(2)
	e.clock.Advance(time.Hour)
	first, third := <-firstc, <-thirdc
	if !first.Allowed || !third.Allowed || third.At.Before(first.At) {
		e.t.Fatalf("%s: first waiter %+v, a later one %+v: served out of order", name, first, third)
	}
}

// foreignParameters are, per algorithm, configs that carry another
// algorithm's parameters or bounds this one cannot keep.
var foreignParameters = map[redlimit.Algorithm][]redlimit.Config{
	redlimit.SlidingLog: {
		{Rate: 1, Interval: time.Second, Burst: 5},
		{Algorithm: redlimit.SlidingLog, Rate: 1, Interval: time.Second, Capacity: 5},
	},
	redlimit.FixedWindow: {
		{Algorithm: redlimit.FixedWindow, Rate: 1, Interval: time.Second, Burst: 5},
		{Algorithm: redlimit.FixedWindow, Rate: 1, Interval: time.Second, Capacity: 5},
	},
	redlimit.SlidingCounter: {
		{Algorithm: redlimit.SlidingCounter, Rate: 1 << 40, Interval: 24 * time.Hour},
	},
	redlimit.TokenBucket: {
		{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: time.Second, Capacity: 5},
		{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: time.Second, Burst: -1},
		{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: 48 * time.Hour},
	},
	redlimit.LeakyBucket: {
		{Algorithm: redlimit.LeakyBucket, Rate: 1, Interval: time.Second, Burst: 5},
	},
}

// testForeignParameters: parameters of another algorithm, and bounds the
// algorithm cannot keep, are typed errors, not ignored (an algorithm's
// name misspelt: testBadInput).
func testForeignParameters(e *env, a redlimit.Algorithm) {
	bad, ok := foreignParameters[a]
	if !ok {
		e.t.Fatalf("storetest lists no foreign parameters for algorithm %q: add them to foreignParameters", a)
	}
	l := e.limiter("alg-bad")
	for _, c := range bad {
		if err := l.SetRate(e.ctx, c); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("SetRate(%+v) = %v; want ErrInvalidArgument", c, err)
		}
	}
}

// testAlgorithmChange: switching algorithms starts the new one afresh (the
// old state means nothing to it); keeping the algorithm keeps the state.
func testAlgorithmChange(e *env) {
	l := e.configured("switch", redlimit.PerInterval(2, time.Minute))
	e.try(l, 2)
	if err := l.SetRate(e.ctx, redlimit.TokenBucketConfig(2, time.Minute, 2)); err != nil {
		e.t.Fatal(err)
	}
	if n := e.available(l); n != 2 {
		e.t.Fatalf("after switching to token-bucket: %d available, want 2 (a fresh bucket)", n)
	}
	e.try(l, 2)
	if err := l.SetRate(e.ctx, redlimit.TokenBucketConfig(2, time.Minute, 4)); err != nil {
		e.t.Fatal(err)
	}
	// The tokens carry over (none): the bigger bucket refills, as with
	// x/time/rate's SetBurstAt.
	if n := e.available(l); n != 0 {
		e.t.Fatalf("after raising the burst 2 -> 4 with 2 taken: %d available, want 0", n)
	}
}
