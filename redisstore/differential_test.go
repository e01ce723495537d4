package redisstore_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

var (
	diffTraces = flag.Int("diff.traces", 400, "random traces in TestDifferential")
	diffOps    = flag.Int("diff.ops", 100, "operations per trace in TestDifferential")
	diffSeed   = flag.Uint64("diff.seed", 0, "first seed of TestDifferential (0: from the time)")
	diffTrace  = flag.Bool("diff.log", false, "log every call of TestDifferential")
)

// TestDifferential runs random traces (storetest.Differential) through the
// memory store (the Go rules) and Redis (the Lua, behind the refusal
// cache), on one injected clock, and requires the same answer to every
// call.
func TestDifferential(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -diff.seed=N -diff.traces=1)", seed, seed+uint64(*diffTraces)-1)
	var seen storetest.Outcomes
	for i := 0; i < *diffTraces; i++ {
		s := seed + uint64(i)
		clk := clock.NewFake(storetest.T0)
		red, err := redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprintf("diff%d:", s)), redisstore.WithTimeSource(clk))
		if err != nil {
			t.Fatal(err)
		}
		d := storetest.Differential{
			Ops:   *diffOps,
			Log:   *diffTrace,
			Local: func() int64 { return red.Stats().LocalRefusals },
			Dump: func(t *testing.T) {
				ctx := context.Background()
				for _, k := range rdb.Keys(ctx, red.Prefix()+"*").Val() {
					t.Logf("  key %s: %v %v %v", k, rdb.HGetAll(ctx, k).Val(), rdb.LRange(ctx, k, 0, -1).Val(), rdb.PTTL(ctx, k).Val())
				}
			},
		}
		d.Trace(t, s, memstore.New(memstore.WithTimeSource(clk)), red, clk, &seen)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d traces, every answer identical: %+v", *diffTraces, seen)
	// The traces must reach every kind of answer, or they prove little.
	if seen.Granted == 0 || seen.Refused == 0 || seen.Reserved == 0 || seen.Cancelled == 0 || seen.Released == 0 || seen.Restored == 0 || seen.NotInitialized == 0 || seen.TooMany == 0 || seen.LocalRefusals == 0 {
		t.Fatalf("traces missed a kind of answer: %+v", seen)
	}
}
