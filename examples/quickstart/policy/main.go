// Command policy is the README's keyed-limits example: one policy of two
// limits applied per user. Run it with `go run ./examples/quickstart/policy`.
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
	store := memstore.New() // or redisstore.New(client): every instance shares the policy

	// 2 requests per second AND 5 per minute, for each user separately.
	// The limits are stored once; each user's state only while it counts.
	p, err := redlimit.NewPolicy(store, "api", []redlimit.Config{
		redlimit.PerSecond(2),
		redlimit.TokenBucketConfig(5, time.Minute, 5),
	})
	if err != nil {
		log.Fatal(err) // a bad name or limit: errors.Is(err, redlimit.ErrInvalidArgument)
	}

	for i := 1; i <= 3; i++ {
		r, err := p.Key("alice").TryAcquire(ctx, 1) // any bytes are a key
		if err != nil {
			log.Fatal(err)
		}
		if by, refused := r.RefusedBy(); refused {
			fmt.Printf("alice %d: refused by %s, retry in %v\n", i, by.Name, r.RetryAfter.Round(10*time.Millisecond))
			continue
		}
		fmt.Printf("alice %d: allowed;", i)
		for _, l := range r.Limits {
			fmt.Printf(" %s: %d left, whole in %v;", l.Name, l.Remaining, l.ResetAfter.Round(time.Second))
		}
		fmt.Println()
	}
	r, err := p.Key("bob").TryAcquire(ctx, 1) // bob has limits of his own
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("bob 1: allowed=%v, %d left\n", r.Allowed, r.Remaining)
}
