package redissonstore

import (
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/storetest"
)

// TestContract runs the Limiter's contract cases (storetest.Contract) on
// Redisson's layouts; Redisson's limiter is a sliding log only.
func TestContract(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	bothLayouts(t, func(t *testing.T, layout Layout) {
		storetest.Contract(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := New(rdb, WithLayout(layout), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, redlimit.SlidingLog)
	})
}
