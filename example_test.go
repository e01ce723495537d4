package redlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// A limiter of 3 permits per 10 seconds: the first three calls are
// granted, the fourth is told when to come back.
func Example() {
	ctx := context.Background()
	store := memstore.New() // or redisstore.New(redisClient) to share the limit
	l, err := redlimit.New(store, "api")
	if err != nil {
		panic(err)
	}
	if _, err := l.TrySetRate(ctx, redlimit.PerInterval(3, 10*time.Second)); err != nil {
		panic(err)
	}
	for i := 1; i <= 4; i++ {
		r, err := l.TryAcquire(ctx, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: allowed=%v remaining=%d retry in ~%ds\n", i, r.Allowed, r.Remaining, r.RetryAfter.Round(time.Second)/time.Second)
	}
	// Output:
	// call 1: allowed=true remaining=2 retry in ~0s
	// call 2: allowed=true remaining=1 retry in ~0s
	// call 3: allowed=true remaining=0 retry in ~0s
	// call 4: allowed=false remaining=0 retry in ~10s
}

// TrySetRate never changes a stored config silently: a different one is an
// error that names both.
func ExampleLimiter_TrySetRate() {
	ctx := context.Background()
	l, _ := redlimit.New(memstore.New(), "orders")
	set, err := l.TrySetRate(ctx, redlimit.PerSecond(10))
	fmt.Println(set, err)
	set, err = l.TrySetRate(ctx, redlimit.PerSecond(20))
	fmt.Println(set, errors.Is(err, redlimit.ErrConfigMismatch))
	fmt.Println(err)
	// Output:
	// true <nil>
	// false true
	// redlimit: a different config is stored: 10 per 1s (sliding-log, overall) (requested 20 per 1s (sliding-log, overall))
}

// SetRate changes the limit for every client at once; permits already
// granted keep counting.
func ExampleLimiter_SetRate() {
	ctx := context.Background()
	l, _ := redlimit.New(memstore.New(), "reports")
	_ = l.SetRate(ctx, redlimit.PerMinute(2))
	_, _ = l.TryAcquire(ctx, 2)
	_ = l.SetRate(ctx, redlimit.PerMinute(5))
	n, _ := l.AvailablePermits(ctx)
	fmt.Println("available after raising 2 -> 5:", n)
	_ = l.SetRate(ctx, redlimit.PerMinute(5), redlimit.ResetState())
	n, _ = l.AvailablePermits(ctx)
	fmt.Println("available after a reset:", n)
	// Output:
	// available after raising 2 -> 5: 3
	// available after a reset: 5
}

// Acquire waits its turn: one round trip reserves the permits, then it
// sleeps until they are due, or until the context ends (and then hands
// them back). Its error is nil if and only if the permits were granted, so
// checking the error is enough; a grant that could only come after the
// context's deadline is refused at once.
func ExampleLimiter_Acquire() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, _ := redlimit.New(memstore.New(), "emails", redlimit.WithConfig(redlimit.PerInterval(1, 50*time.Millisecond)))
	var first time.Time
	for i := 0; i < 3; i++ {
		r, err := l.Acquire(ctx, 1)
		if err != nil {
			fmt.Println("not sent:", err) // no permit: refused, cancelled or the store failed
			return
		}
		if i == 0 {
			first = r.At
		}
		// Each send waits for its turn: at most one per 50 ms window.
		apart := time.Duration(i) * 50 * time.Millisecond
		fmt.Printf("sent %d, at least %v after the first: %v\n", i, apart, r.At.Sub(first) >= apart)
	}
	// One report an hour: the second could only be sent after the deadline.
	reports, _ := redlimit.New(memstore.New(), "reports", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour)))
	if _, err := reports.Acquire(ctx, 1); err != nil {
		fmt.Println("not sent:", err)
		return
	}
	r, err := reports.Acquire(ctx, 1)
	fmt.Println("refused:", errors.Is(err, redlimit.ErrRefused), errors.Is(err, redlimit.ErrWouldExceedDeadline))
	fmt.Println("a timeout:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("retry after:", r.RetryAfter.Round(time.Minute))
	// Output:
	// sent 0, at least 0s after the first: true
	// sent 1, at least 50ms after the first: true
	// sent 2, at least 100ms after the first: true
	// refused: true true
	// a timeout: false
	// retry after: 1h0m0s
}

// PerClient gives each client its own limit under one name.
func ExampleMode() {
	ctx := context.Background()
	store := memstore.New()
	cfg := redlimit.PerMinute(1).WithMode(redlimit.PerClient)
	a, _ := redlimit.New(store, "crawler", redlimit.WithClientID("host-a"), redlimit.WithConfig(cfg))
	b, _ := redlimit.New(store, "crawler", redlimit.WithClientID("host-b"), redlimit.WithConfig(cfg))
	ra, _ := a.TryAcquire(ctx, 1)
	rb, _ := b.TryAcquire(ctx, 1)
	ra2, _ := a.TryAcquire(ctx, 1)
	fmt.Println(ra.Allowed, rb.Allowed, ra2.Allowed)
	// Output:
	// true true false
}

// downRedis is a client of a Redis that cannot be reached: every dial is
// refused at once, as when nothing listens on the port.
func downRedis() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379", MaxRetries: -1, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		},
	})
}

// While Redis cannot be reached, a limiter fails closed by default: the
// caller gets ErrUnavailable with a refusal. FailOpen grants instead, with
// Result.Degraded set, for limits whose outage must not become the
// service's. (downRedis is a client of a Redis that is down.)
func ExampleWithFailurePolicy() {
	ctx := context.Background()
	rdb := downRedis()
	defer rdb.Close()
	store, _ := redisstore.New(rdb)
	cfg := redlimit.WithConfig(redlimit.PerSecond(10))

	closed, _ := redlimit.New(store, "api", cfg)
	r, err := closed.TryAcquire(ctx, 1)
	fmt.Printf("fail closed: allowed=%v degraded=%v unavailable=%v\n", r.Allowed, r.Degraded, errors.Is(err, redlimit.ErrUnavailable))

	open, _ := redlimit.New(store, "api", cfg, redlimit.WithFailurePolicy(redlimit.FailOpen))
	r, err = open.TryAcquire(ctx, 1)
	fmt.Printf("fail open: allowed=%v degraded=%v err=%v\n", r.Allowed, r.Degraded, err)
	// Output:
	// fail closed: allowed=false degraded=true unavailable=true
	// fail open: allowed=true degraded=true err=<nil>
}

// WithFallback decides in a store of this process while Redis cannot be
// reached, at a share of the limit: with 2 instances of a service, each
// takes half. (downRedis is a client of a Redis that is down.)
func ExampleWithFallback() {
	ctx := context.Background()
	rdb := downRedis()
	defer rdb.Close()
	store, _ := redisstore.New(rdb)
	local := memstore.New() // one per process, shared by its limiters
	l, _ := redlimit.New(store, "api",
		redlimit.WithConfig(redlimit.PerMinute(4)), // the fallback needs the config
		redlimit.WithFallback(local, 0.5))
	for i := 1; i <= 3; i++ {
		r, err := l.TryAcquire(ctx, 1)
		fmt.Printf("call %d: allowed=%v degraded=%v err=%v\n", i, r.Allowed, r.Degraded, err)
	}
	// Output:
	// call 1: allowed=true degraded=true err=<nil>
	// call 2: allowed=true degraded=true err=<nil>
	// call 3: allowed=false degraded=true err=<nil>
}
