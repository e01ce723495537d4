package memstore_test

import (
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		return memstore.New(memstore.WithClock(clk))
	})
}
