package redisstore_test

import (
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestSentinel runs the conformance suite (every algorithm, both modes)
// through a failover client: one primary, one replica, three sentinels.
func TestSentinel(t *testing.T) {
	rdb := redistest.StartSentinel(t, 1, 3).Client(t)
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		return newStore(t, rdb, redisstore.WithTimeSource(clk))
	}, storetest.Full())
}
