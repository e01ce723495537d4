package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// Every Limiter opened on one memory store with the same name shares the
// limit: make one store per process and pass it around.
func ExampleNew() {
	ctx := context.Background()
	store := memstore.New()
	cfg := redlimit.PerMinute(2)
	a, _ := redlimit.New(store, "search", redlimit.WithConfig(cfg))
	b, _ := redlimit.New(store, "search", redlimit.WithConfig(cfg))
	for _, l := range []*redlimit.Limiter{a, b, a} {
		r, err := l.TryAcquire(ctx, 1)
		fmt.Println(r.Allowed, r.Remaining, err)
	}
	// Output:
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}

// Tests drive time by hand: one fake clock for the store (its decisions)
// and for the Limiter (its waits).
func ExampleWithTimeSource() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.WithTimeSource(clk))
	l, _ := redlimit.New(store, "emails", redlimit.WithClock(clk),
		redlimit.WithConfig(redlimit.TokenBucketConfig(1, time.Second, 2))) // 1 per second, bursts of 2
	for _, step := range []time.Duration{0, 0, 0, 500 * time.Millisecond, 500 * time.Millisecond} {
		clk.Advance(step)
		r, _ := l.TryAcquire(ctx, 1)
		fmt.Printf("+%v allowed=%v retry after %v\n", step, r.Allowed, r.RetryAfter)
	}
	// Output:
	// +0s allowed=true retry after 0s
	// +0s allowed=true retry after 0s
	// +0s allowed=false retry after 1s
	// +500ms allowed=false retry after 500ms
	// +500ms allowed=true retry after 0s
}
