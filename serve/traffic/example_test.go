package traffic_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve/traffic"
)

// A Recorder observes a policy's calls; each flush adds them to the
// shared counts (here in memory: give Options.Redis to share them).
func Example() {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	rec, _ := traffic.New(traffic.Options{Clock: fake})
	p, _ := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(fake)), "login",
		[]redlimit.Config{redlimit.PerInterval(2, time.Minute)}, redlimit.WithClock(fake), redlimit.WithObserver(rec))
	for range 3 {
		p.Key("alice").TryAcquire(ctx, 1)
	}
	rec.Flush(ctx)
	s, _ := rec.Series(ctx, 1)
	for _, pol := range s.Policies {
		fmt.Printf("%s: %d granted, %d refused\n", pol.Policy, pol.Granted[0], pol.Refused[0])
	}
	top, _ := rec.Top(ctx, "login", 1)
	fmt.Println("hottest:", top[0].Key, top[0].Hits)
	// Output:
	// login: 2 granted, 1 refused
	// hottest: alice 3
}
