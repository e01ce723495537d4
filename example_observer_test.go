package redlimit_test

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

// An Observer sees every call: here, a function printing what the metrics
// adapters (packages prometheus and otel of this repository) count.
func ExampleWithObserver() {
	print := redlimit.ObserverFunc(func(_ context.Context, e redlimit.Event) {
		limit, alg := e.Limit()
		fmt.Println(e.Name, e.Op, e.Outcome, limit, alg)
	})
	l, _ := redlimit.New(memstore.New(), "api", redlimit.WithConfig(redlimit.PerSecond(1)), redlimit.WithObserver(print))
	ctx := context.Background()
	l.TryAcquire(ctx, 1)
	l.TryAcquire(ctx, 1)
	// Output:
	// api acquire granted 1/1s sliding-log
	// api acquire refused 1/1s sliding-log
}
