package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestCluster runs the conformance suite on a Redis Cluster of three
// primaries, each with a replica: every limiter's keys share one slot, so
// each call is one script on one primary (no CROSSSLOT), and names with
// braces stay in their own slot.
func TestCluster(t *testing.T) {
	rdb := redistest.StartCluster(t, 3, 1).Client(t)
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
			return newStore(t, rdb, redisstore.WithTimeSource(clk))
		}, storetest.Full())
	})
	t.Run("RedisTime", func(t *testing.T) {
		ctx := context.Background()
		s := newStore(t, rdb)
		names := []string{"a", "{a}", "b}{", "user:{42}"}
		for _, name := range names {
			l, _ := redlimit.New(s, name, redlimit.WithConfig(redlimit.PerInterval(2, time.Hour)))
			for i := 0; i < 3; i++ {
				r, err := l.TryAcquire(ctx, 1)
				if err != nil {
					t.Fatalf("%q: %v", name, err)
				}
				if r.Allowed != (i < 2) {
					t.Fatalf("%q call %d: %+v", name, i, r)
				}
			}
		}
	})
}
