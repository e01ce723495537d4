package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// A caller alone takes the library's lone path, which sends no client's
// keys: one that knows a limiter as Overall, stored as PerClient by
// another instance, is still counted per client, under the stored config.
func TestLoneCallOnPerClientLimiter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	perClient := redlimit.Config{Algorithm: redlimit.TokenBucket, Mode: redlimit.PerClient, Rate: 2, Interval: time.Hour}
	first, err := redlimit.New(s, "lone-mode", redlimit.WithConfig(perClient), redlimit.WithClientID("a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := first.TryAcquire(ctx, 1); err != nil || !d.Allowed {
			t.Fatalf("client a: %+v, %v", d, err)
		}
	}
	overall := perClient
	overall.Mode, overall.Rate = redlimit.Overall, 100
	second, err := redlimit.New(s, "lone-mode", redlimit.WithConfig(overall), redlimit.WithClientID("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := second.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Client b has its own 2 permits, whatever client a took.
		if d.Allowed != (i < 2) || d.Remaining != max(int64(1-i), 0) {
			t.Fatalf("call %d of client b: allowed %v, %d left; want the stored PerClient config's", i, d.Allowed, d.Remaining)
		}
	}
}
