package refusalcache_test

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
	"github.com/redlimit/redlimit/storetest"
)

var (
	diffTraces = flag.Int("diff.traces", 400, "random traces in TestDifferential")
	diffOps    = flag.Int("diff.ops", 200, "operations per trace in TestDifferential")
	diffSeed   = flag.Uint64("diff.seed", 0, "first seed of TestDifferential (0: from the time)")
	diffLog    = flag.Bool("diff.log", false, "log every call of TestDifferential")
)

// TestDifferential runs random traces (storetest.Differential: mostly
// acquires of one permit, so that limiters run dry; with deletions,
// expiries and time steps by ms, µs and ns) through a memory store and
// through the cache in front of another memory store, on one injected
// clock, and requires the same answer to every call: every refusal the
// cache answers locally is the one the store would have given at that
// instant. (redisstore's TestDifferential does the same with the cache in
// front of Redis.)
func TestDifferential(t *testing.T) {
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -diff.seed=N -diff.traces=1)", seed, seed+uint64(*diffTraces)-1)
	stales := []time.Duration{time.Millisecond, 20 * time.Millisecond, 0, time.Hour}
	var seen storetest.Outcomes
	for i := 0; i < *diffTraces; i++ {
		s := seed + uint64(i)
		clk, _, cache := tracedCache(t, s, stales)
		d := storetest.Differential{
			Names: []string{"a", "b"}, Ops: *diffOps, MaxRate: 6, MaxParam: 8, MaxWait: 30 * time.Millisecond,
			OnePermit: true, Expiry: true, Nanoseconds: true, Log: *diffLog,
			Local: func() int64 { return cache.Stats().LocalRefusals },
		}
		d.Trace(t, s, memstore.New(memstore.WithTimeSource(clk)), cache, clk, &seen)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d traces, every answer identical: %+v", *diffTraces, seen)
	// The traces must reach every kind of answer, or they prove little.
	if seen.Granted == 0 || seen.Refused == 0 || seen.Reserved == 0 || seen.Cancelled == 0 || seen.Released == 0 ||
		seen.Expired == 0 || seen.NotInitialized == 0 || seen.Full == 0 || seen.LocalRefusals == 0 || seen.LocalLeaky == 0 {
		t.Fatalf("traces missed a kind of answer: %+v", seen)
	}
}

// tracedCache is a trace's fake clock, its MaxStale (one of stales, drawn
// by seed) and a cache of that MaxStale over a memory store on the clock.
func tracedCache(t *testing.T, seed uint64, stales []time.Duration) (*clock.Fake, time.Duration, *refusalcache.Store) {
	t.Helper()
	clk := clock.NewFake(storetest.T0)
	stale := stales[rand.New(rand.NewPCG(seed, 0)).IntN(len(stales))]
	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{MaxStale: stale, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return clk, stale, cache
}
