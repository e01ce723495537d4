package refusalcache_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
)

// A key of a policy of two limits runs dry: the store's refusal answers
// the calls that repeat it, counting the retry-after down, until it frees.
func ExampleStore_AcquireKey() {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cache, _ := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{MaxStale: time.Second, Clock: clk})
	p, _ := redlimit.NewPolicy(cache, "api", []redlimit.Config{redlimit.PerSecond(2), redlimit.PerInterval(1000, time.Hour)})
	user := p.Key("user-1")
	for range 4 {
		r, _ := user.TryAcquire(ctx, 1)
		fmt.Println(r.Allowed, r.RetryAfter, cache.Stats().LocalKeyRefusals)
		clk.Advance(100 * time.Millisecond)
	}
	// Output:
	// true 0s 0
	// true 0s 0
	// false 800ms 0
	// false 700ms 1
}
