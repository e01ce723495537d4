package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/redlimit/redlimit"
)

// algorithmCase is what the cases that hold for every algorithm need to
// know of one: an algorithm added to redlimit.Algorithms gets one in
// algorithmCases (TestEveryAlgorithmHasACase says so).
type algorithmCase struct {
	// limit is rate permits per interval with room for room at once where
	// the algorithm has a parameter for it (a token bucket's burst, a
	// leaky bucket's capacity); the windows take rate at once.
	limit func(rate int64, interval time.Duration, room int64) redlimit.Config
	// every is the config of EveryAlgorithm and WaitersInOrder (3 permits,
	// or 1 a second with room for 3); burst is how many single permits it
	// grants at once from fresh.
	every redlimit.Config
	burst int
	// queues: waiters take room (a leaky bucket's capacity is its queue).
	queues bool
	// foreign are configs that carry another algorithm's parameters, or
	// bounds this one cannot keep: each is ErrInvalidArgument.
	foreign []redlimit.Config
}

// windowLimit is limit for the algorithms without a room parameter.
func windowLimit(a redlimit.Algorithm) func(int64, time.Duration, int64) redlimit.Config {
	return func(rate int64, interval time.Duration, _ int64) redlimit.Config {
		return redlimit.PerInterval(rate, interval).WithAlgorithm(a)
	}
}

var algorithmCases = map[redlimit.Algorithm]algorithmCase{
	redlimit.SlidingLog: {
		limit: windowLimit(redlimit.SlidingLog),
		every: redlimit.PerInterval(3, 10*time.Second), burst: 3,
		foreign: []redlimit.Config{
			{Rate: 1, Interval: time.Second, Burst: 5},
			{Algorithm: redlimit.SlidingLog, Rate: 1, Interval: time.Second, Capacity: 5},
		},
	},
	redlimit.FixedWindow: {
		limit: windowLimit(redlimit.FixedWindow),
		every: redlimit.PerInterval(3, 10*time.Second).WithAlgorithm(redlimit.FixedWindow), burst: 3,
		foreign: []redlimit.Config{
			{Algorithm: redlimit.FixedWindow, Rate: 1, Interval: time.Second, Burst: 5},
			{Algorithm: redlimit.FixedWindow, Rate: 1, Interval: time.Second, Capacity: 5},
		},
	},
	redlimit.SlidingCounter: {
		limit: windowLimit(redlimit.SlidingCounter),
		every: redlimit.PerInterval(3, 10*time.Second).WithAlgorithm(redlimit.SlidingCounter), burst: 3,
		foreign: []redlimit.Config{
			{Algorithm: redlimit.SlidingCounter, Rate: 1 << 40, Interval: 24 * time.Hour},
		},
	},
	redlimit.TokenBucket: {
		limit: redlimit.TokenBucketConfig,
		every: redlimit.TokenBucketConfig(1, time.Second, 3), burst: 3,
		foreign: []redlimit.Config{
			{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: time.Second, Capacity: 5},
			{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: time.Second, Burst: -1},
			{Algorithm: redlimit.TokenBucket, Rate: 1, Interval: 48 * time.Hour},
		},
	},
	redlimit.LeakyBucket: {
		limit: redlimit.LeakyBucketConfig,
		every: redlimit.LeakyBucketConfig(1, time.Second, 3), burst: 1, // no bursts: one at a time
		queues: true,
		foreign: []redlimit.Config{
			{Algorithm: redlimit.LeakyBucket, Rate: 1, Interval: time.Second, Burst: 5},
		},
	},
}

// algorithmCase returns algorithm a's case.
func (e *env) algorithmCase(a redlimit.Algorithm) algorithmCase {
	e.t.Helper()
	ac, ok := algorithmCases[a]
	if !ok {
		e.t.Fatalf("storetest has no case for algorithm %q: add one to algorithmCases", a)
	}
	return ac
}

// testEveryAlgorithm: the whole API works the same way under every
// algorithm: config round trip, grants, exact retry-after, typed errors and
// per-client limits (waiting: testWaitersInOrder).
func testEveryAlgorithm(e *env, a redlimit.Algorithm) {
	ac := e.algorithmCase(a)
	cfg, burst := ac.every, ac.burst
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
	cfg := e.algorithmCase(a).every
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

// testForeignParameters: parameters of another algorithm, and bounds the
// algorithm cannot keep, are typed errors, not ignored (an algorithm's
// name misspelt: testBadInput).
func testForeignParameters(e *env, a redlimit.Algorithm) {
	l := e.limiter("alg-bad")
	for _, c := range e.algorithmCase(a).foreign {
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
