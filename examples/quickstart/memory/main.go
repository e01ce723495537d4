// Command memory is the README's quick start on the memory store: one
// process, no server. Run it with `go run ./examples/quickstart/memory`.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

func main() {
	ctx := context.Background()
	store := memstore.New() // every Limiter made on this store shares its limits

	// 3 permits in any window of 1 second (a sliding log, the default algorithm).
	l, err := redlimit.New(store, "api", redlimit.WithConfig(redlimit.PerSecond(3)))
	if err != nil {
		log.Fatal(err) // a bad name or config: a typed error, errors.Is(err, redlimit.ErrInvalidArgument)
	}

	// TryAcquire: now or never. A refusal is a Result, not an error.
	for i := 1; i <= 4; i++ {
		r, err := l.TryAcquire(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		if r.Allowed {
			fmt.Printf("request %d: allowed, %d left\n", i, r.Remaining)
		} else {
			fmt.Printf("request %d: refused, retry in %v\n", i, r.RetryAfter.Round(10*time.Millisecond))
		}
	}

	// TryAcquireWait: wait up to 2 s for the permit, in line with other waiters.
	r, err := l.TryAcquireWait(ctx, 1, 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after waiting %v: allowed=%v\n", r.Waited.Round(10*time.Millisecond), r.Allowed)
}
