package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
)

// cancelOrders are the orders in which a queue's waiters give up.
var cancelOrders = []string{"in order", "reversed", "random"}

// testCancelStorm: under algorithm a, a queue of waiters forms on a drained
// limiter and every one of them gives up while asleep, in the order they
// asked, in the reverse order, and in a random order (the clock moving on
// halfway, before any reservation is due), each order a subtest. Each
// gets context.Canceled, and afterwards the limiter is exactly as a twin
// that saw the same traffic and no waiters: the same AvailablePermits at
// once and a second later, a TryAcquire granted, and as many permits taken
// from each.
func testCancelStorm(e *env, a redlimit.Algorithm) {
	const waiters = 300
	// 10 permits per second, with room for the waiters where they take it.
	ac := e.algorithmCase(a)
	room := int64(10)
	if ac.queues {
		room += waiters
	}
	cfg := ac.limit(10, time.Second, room)
	rng := rand.New(rand.NewPCG(3, 4))
	// Off a second's start: a sliding counter drained as its window opens
	// weighs all of it a second later and grants nothing then.
	e.clock.Advance(100 * time.Millisecond)
	for _, order := range cancelOrders {
		e.t.Run(order, func(t *testing.T) {
			sub := *e
			sub.t = t
			sub.cancelStorm(cfg, waiters, order, rng)
		})
	}
}

// testCancelStormLarge: 2,000 waiters on a token bucket of 10 per second
// give up in a random order (they had booked 200 s ahead).
func testCancelStormLarge(e *env) {
	e.cancelStorm(redlimit.TokenBucketConfig(10, time.Second, 10), 2000, "random", rand.New(rand.NewPCG(5, 6)))
}

func (e *env) cancelStorm(cfg redlimit.Config, waiters int, order string, rng *rand.Rand) {
	e.t.Helper()
	name := fmt.Sprintf("storm-%s-%d-%s", cfg.Algorithm, waiters, order)
	l := e.configured(name, cfg)
	twin := e.configured(name+"-twin", cfg)
	for _, x := range []*redlimit.Limiter{l, twin} {
		for e.try(x, 1).Allowed {
		}
	}
	before := e.available(l)
	timers := e.clock.Timers()
	cancels := make([]context.CancelFunc, waiters)
	errs := make([]chan error, waiters)
	for i := range waiters {
		ctx, cancel := context.WithCancel(e.ctx)
		cancels[i], errs[i] = cancel, make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, 1)
			errs[i] <- err
		}()
		// Waiter i has its reservation before the next one asks.
		e.waitTimers(timers + i + 1)
	}
	idx := make([]int, waiters)
	for i := range idx {
		idx[i] = i
	}
	switch order {
	case "reversed":
		for i, j := 0, waiters-1; i < j; i, j = i+1, j-1 {
			idx[i], idx[j] = idx[j], idx[i]
		}
	case "random":
		rng.Shuffle(waiters, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	for k, i := range idx {
		if order == "random" && k == waiters/2 {
			// Time moves on, short of the first reservation (100 ms).
			e.clock.Advance(50 * time.Millisecond)
		}
		cancels[i]()
		if err := <-errs[i]; !errors.Is(err, context.Canceled) {
			e.t.Fatalf("%s: waiter %d: %v; want context.Canceled", name, i, err)
		}
	}
	if n := e.clock.Timers(); n != timers {
		e.t.Fatalf("%s: %d callers still asleep", name, n-timers)
	}
	after, want := e.available(l), e.available(twin)
	retry, wantRetry := e.retryAfter(l), e.retryAfter(twin)
	if after != want || retry != wantRetry {
		e.t.Fatalf("%s: after %d waiters gave up %s AvailablePermits = %d, retry-after %v; with no waiters %d, %v", name, waiters, order, after, retry, want, wantRetry)
	}
	e.clock.Advance(time.Second)
	later, wantLater := e.available(l), e.available(twin)
	if later != wantLater || later < 1 {
		e.t.Fatalf("%s: a second later AvailablePermits = %d; with no waiters %d", name, later, wantLater)
	}
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("%s: TryAcquire a second later: %+v", name, r)
	}
	e.try(twin, 1)
	var got, gotTwin int
	for e.try(l, 1).Allowed {
		got++
	}
	for e.try(twin, 1).Allowed {
		gotTwin++
	}
	if got != gotTwin {
		e.t.Fatalf("%s: %d more granted; with no waiters %d", name, got, gotTwin)
	}
	e.t.Logf("%s: %d waiters cancelled asleep, %s: handed back by the callers %d, by the store 0; then AvailablePermits %d (%d before they asked, %d with no waiters) and retry-after %v (as with no waiters), %d a second later (as with no waiters), TryAcquire granted",
		cfg, waiters, order, waiters, after, before, want, retry, later)
	// Leave the clock past every grant of this case.
	e.clock.Advance(time.Second)
}

// testMaxWaitBoundsQueue: WithMaxWait bounds the queue whatever the context
// allows: on a drained token bucket of 10 per second with a 500 ms bound,
// five waiters (due in 100..500 ms) queue and the sixth is refused at once,
// without reserving, its retry-after 600 ms away (with a deadline far off
// too: ErrRefused, not ErrWouldExceedDeadline).
func testMaxWaitBoundsQueue(e *env) {
	cfg := redlimit.TokenBucketConfig(10, time.Second, 10)
	l := e.configured("max-wait", cfg, redlimit.WithMaxWait(500*time.Millisecond))
	for e.try(l, 1).Allowed {
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	timers := e.clock.Timers()
	errs := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := l.Acquire(ctx, 1)
			errs <- err
		}()
		e.waitTimers(timers + i + 1)
	}
	r, err := l.Acquire(ctx, 1)
	if r.Allowed || r.RetryAfter != 600*time.Millisecond || errors.Is(err, context.Canceled) {
		e.t.Fatalf("sixth waiter with a 500ms bound: %+v, %v; want refused, retry after 600ms", r, err)
	}
	// With a deadline far off, the bound refused it, not the deadline.
	dctx, dcancel := context.WithTimeout(e.ctx, time.Hour)
	defer dcancel()
	if _, err := l.Acquire(dctx, 1); !errors.Is(err, redlimit.ErrRefused) || errors.Is(err, redlimit.ErrWouldExceedDeadline) {
		e.t.Fatalf("sixth waiter with a 500ms bound and an hour's deadline: %v; want ErrRefused, not ErrWouldExceedDeadline", err)
	}
	if n := e.clock.Timers(); n != timers+5 {
		e.t.Fatalf("%d waiters asleep, want 5", n-timers)
	}
	if _, err := redlimit.New(e.store, "max-wait", redlimit.WithMaxWait(-time.Second)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Fatalf("WithMaxWait(-1s): %v; want ErrInvalidArgument", err)
	}
	cancel()
	for range 5 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			e.t.Fatalf("waiter: %v; want context.Canceled", err)
		}
	}
	e.clock.Advance(time.Second)
}

// retryAfter is how long a TryAcquire of l waits for a permit, or 0 when
// one is available (only asked when none is: a refusal changes nothing).
func (e *env) retryAfter(l *redlimit.Limiter) time.Duration {
	e.t.Helper()
	if e.available(l) > 0 {
		return 0
	}
	r := e.try(l, 1)
	if r.Allowed {
		e.t.Fatalf("TryAcquire granted with none available: %+v", r)
	}
	return r.RetryAfter
}
