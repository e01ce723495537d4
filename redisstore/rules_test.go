package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
	"github.com/redlimit/redlimit/internal/redistest"
)

var (
	rulesTraces = flag.Int("rules.traces", 400, "random traces per algorithm in TestRules")
	rulesOps    = flag.Int("rules.ops", 60, "calls per trace in TestRules")
	rulesSeed   = flag.Uint64("rules.seed", 0, "first seed of TestRules (0: from the time)")
	rulesLog    = flag.Bool("rules.log", false, "log every call of TestRules")
)

// rulesAlgorithm is what TestRules needs of one algorithm: its Go State and
// how to read the Lua's stored state (the state string and the list) as one.
type rulesAlgorithm struct {
	fresh func() algorithm.State
	// stored reads the numbers of the state string (last, expiry offset,
	// then the algorithm's own) and the list's elements.
	stored func(v, list []int64) algorithm.State
	unit   int64 // µs per unit of the algorithm's clock
}

var rulesAlgorithms = map[redlimit.Algorithm]rulesAlgorithm{
	redlimit.SlidingLog: {
		fresh: func() algorithm.State { return &slidinglog.State{} },
		stored: func(v, list []int64) algorithm.State {
			s := &slidinglog.State{Last: v[0], Expiry: v[0] + v[1], Total: v[2]}
			for i := 0; i+1 < len(list); i += 2 {
				s.Entries = append(s.Entries, slidinglog.Entry{At: list[i], Permits: list[i+1]})
			}
			return s
		},
		unit: 1000,
	},
	redlimit.FixedWindow: {
		fresh: func() algorithm.State { return &fixedwindow.State{} },
		stored: func(v, _ []int64) algorithm.State {
			return &fixedwindow.State{Last: v[0], Expiry: v[0] + v[1], Windows: storedWindows(v[0], v[2:])}
		},
		unit: 1,
	},
	redlimit.SlidingCounter: {
		fresh: func() algorithm.State { return &slidingcounter.State{} },
		stored: func(v, _ []int64) algorithm.State {
			return &slidingcounter.State{Last: v[0], Expiry: v[0] + v[1], Tail: v[0] + v[2], Windows: storedWindows(v[0], v[3:])}
		},
		unit: 1,
	},
	redlimit.TokenBucket: {
		fresh:  func() algorithm.State { return &tokenbucket.State{} },
		stored: func(v, _ []int64) algorithm.State { return &tokenbucket.State{Deficit: storedDeficit(v)} },
		unit:   1,
	},
	redlimit.LeakyBucket: {
		fresh:  func() algorithm.State { return &leakybucket.State{} },
		stored: func(v, _ []int64) algorithm.State { return &leakybucket.State{Deficit: storedDeficit(v)} },
		unit:   1,
	},
}

func storedWindows(last int64, v []int64) algorithm.Windows {
	var ws algorithm.Windows
	for i := 0; i+1 < len(v); i += 2 {
		ws = append(ws, algorithm.Window{Start: last + v[i], Permits: v[i+1]})
	}
	return ws
}

func storedDeficit(v []int64) algorithm.Deficit {
	d := algorithm.Deficit{Last: v[0], Expiry: v[0] + v[1], Owed: v[2], Scale: v[3], Rate: v[4], Burst: v[5]}
	if len(v) == 10 {
		d.Head, d.Tail, d.Live, d.Held = v[0]+v[6], v[0]+v[7], v[8], v[9]
	}
	return d
}

// TestRules holds each algorithm's Lua file alone (with the shared files
// and a small driver, testdata/rules_driver.lua, but neither the other
// algorithms nor the batch loop) to its Go package, algorithm/<name>: random
// traces of calls at instants of an injected clock, with config changes,
// run through both (acquires also not before an instant, AcquireAt), must give the same answer to every call and leave the
// same state after it (the Lua's as stored in Redis, read back as the Go
// State). Where TestDifferential holds the whole store to memstore, this
// points at the rule that differs.
func TestRules(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	driver, err := os.ReadFile("testdata/rules_driver.lua")
	if err != nil {
		t.Fatal(err)
	}
	seed := *rulesSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -rules.seed=N -rules.traces=1)", seed, seed+uint64(*rulesTraces)-1)
	files := algorithmScripts()
	for i, alg := range redlimit.Algorithms {
		ra, ok := rulesAlgorithms[alg]
		if !ok {
			t.Errorf("%s: no rules test", alg)
			continue
		}
		t.Run(string(alg), func(t *testing.T) {
			src := joinScripts(append(append([]string(nil), sharedScripts...), files[i])...) + string(driver)
			sc := redis.NewScript(src)
			var seen rulesSeen
			for k := 0; k < *rulesTraces; k++ {
				runRulesTrace(t, rdb, sc, alg, ra, seed+uint64(k), &seen)
				if t.Failed() {
					return
				}
			}
			t.Logf("%d traces, every answer and state identical: %+v", *rulesTraces, seen)
			if seen.Granted == 0 || seen.Refused == 0 || seen.Reserved == 0 || seen.HandedBack == 0 || seen.Forgotten == 0 || seen.Changed == 0 || seen.NotBefore == 0 {
				t.Fatalf("traces missed a kind of answer: %+v", seen)
			}
		})
	}
}

// rulesSeen counts what the traces exercised.
type rulesSeen struct {
	Granted, Refused, Reserved, HandedBack, Forgotten, Changed int
	// NotBefore: grants asked for later than their own instant.
	NotBefore int
}

func runRulesTrace(t *testing.T, rdb redis.UniversalClient, sc *redis.Script, alg redlimit.Algorithm, ra rulesAlgorithm, seed uint64, seen *rulesSeen) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	keys := []string{fmt.Sprintf("rules:%s:%d", alg, seed), fmt.Sprintf("rules:%s:%d:list", alg, seed)}
	t.Cleanup(func() { rdb.Del(ctx, keys...) })
	// An interval of a few to a few thousand units, so that steps of time
	// cross windows, drain buckets and let states expire.
	randomLimit := func(since int64) algorithm.Limit {
		intervals := []int64{1, 7, 100, 1000, 5000}
		lim := algorithm.Limit{
			Rate:     1 + rng.Int64N(6),
			Interval: intervals[rng.IntN(len(intervals))],
			Burst:    1 + rng.Int64N(6),
			Capacity: 1 + rng.Int64N(6),
			Since:    since,
		}
		if alg == redlimit.SlidingLog && lim.Interval == 1 {
			lim.Interval = 3
		}
		return lim
	}
	most := func(lim algorithm.Limit) int64 {
		switch alg {
		case redlimit.TokenBucket:
			return lim.Burst
		case redlimit.LeakyBucket:
			return lim.Capacity
		}
		return lim.Rate
	}
	now := int64(1_763_900_000_000_000) / ra.unit
	lim := randomLimit(0)
	s := ra.fresh()
	var reserved []algorithm.Decision // grants after their now, to cancel
	var reservedN []int64
	for step := 0; step < *rulesOps; step++ {
		// Time mostly runs on, by up to two intervals, sometimes not at
		// all, and sometimes back (the rules never let it).
		switch r := rng.IntN(10); {
		case r < 3:
		case r < 9:
			now += rng.Int64N(2*lim.Interval + 1)
		default:
			now -= rng.Int64N(lim.Interval + 1)
		}
		if rng.IntN(20) == 0 {
			lim = randomLimit(now)
			seen.Changed++
		}
		if *rulesLog {
			t.Logf("step %d now %d lim %+v state %+v", step, now, lim, s)
		}
		forgotten := s.Forgotten(now, algorithm.Limit{})
		var op string
		var n, arg, want, notBefore int64
		var wantD algorithm.Decision
		switch r := rng.IntN(20); {
		case r < 10:
			op, n = "acquire", 1+rng.Int64N(most(lim))
			switch rng.IntN(3) {
			case 0:
				arg = algorithm.Unlimited
			case 1:
				arg = 0
			default:
				arg = rng.Int64N(3 * lim.Interval)
			}
			if rng.IntN(3) == 0 {
				// Not before an instant, before or after now.
				notBefore = now + rng.Int64N(3*lim.Interval+1) - lim.Interval/2
				own := s.Clone().Acquire(now, lim, n, algorithm.Unlimited)
				if own.Granted && notBefore > own.At {
					seen.NotBefore++
				}
			}
			wantD = s.AcquireAt(now, lim, n, arg, notBefore)
			if wantD.Granted && wantD.At < notBefore {
				t.Fatalf("seed %d step %d: granted at %d, asked not before %d", seed, step, wantD.At, notBefore)
			}
			if wantD.Granted && wantD.Wait > 0 {
				reserved, reservedN = append(reserved, wantD), append(reservedN, n)
			}
		case r < 14:
			op = "cancel"
			if len(reserved) > 0 && rng.IntN(5) > 0 {
				k := rng.IntN(len(reserved))
				arg, n = reserved[k].At, reservedN[k]
				reserved, reservedN = append(reserved[:k], reserved[k+1:]...), append(reservedN[:k], reservedN[k+1:]...)
			} else {
				arg, n = now+rng.Int64N(2*lim.Interval)-lim.Interval/2, 1+rng.Int64N(most(lim))
			}
			want = s.Cancel(now, lim, arg, n)
		case r < 18:
			op, n, arg = "release", 1+rng.Int64N(most(lim)), -1
			sl, ok := s.(*slidinglog.State)
			switch {
			case !ok:
				want = s.Release(now, lim, n)
			case rng.IntN(3) == 0:
				// Release is ReleaseUpTo the now given (not the
				// later one the log may have seen).
				arg = now
				want = s.Release(now, lim, n)
			case rng.IntN(2) == 0:
				arg = now - rng.Int64N(lim.Interval+1)
				want = sl.ReleaseUpTo(now, lim, n, arg)
			default: // -1: no bound but the log's now
				want = sl.ReleaseUpTo(now, lim, n, math.MaxInt64)
			}
		default:
			op = "available"
			want = s.Available(now, lim)
		}
		res, err := sc.Run(ctx, rdb, keys, string(alg), lim.Rate, lim.Interval, lim.Burst, lim.Capacity, lim.Since, now, op, n, arg, notBefore).Slice()
		if err != nil {
			t.Fatalf("seed %d step %d: %s(%d, %d): %v", seed, step, op, n, arg, err)
		}
		code, value, wait, luaNow := res[0].(int64), res[1].(int64), res[2].(int64), res[3].(int64)
		where := fmt.Sprintf("seed %d step %d, %+v, now %d: %s(n %d, arg %d)", seed, step, lim, now, op, n, arg)
		if got := res[4].(int64) == 1; got != forgotten {
			t.Fatalf("%s: Lua forgotten %v, Go %v", where, got, forgotten)
		}
		if forgotten {
			seen.Forgotten++
		}
		if op == "acquire" {
			got := algorithm.Decision{Granted: code == 1, Wait: wait, Remaining: value, Now: luaNow}
			if got.Granted {
				got.At = luaNow + wait
			}
			if got != wantD {
				t.Fatalf("%s: Lua %+v (code %d), Go %+v", where, got, code, wantD)
			}
			switch {
			case !got.Granted:
				seen.Refused++
			case got.Wait > 0:
				seen.Reserved++
			default:
				seen.Granted++
			}
		} else {
			if code != 1 || value != want {
				t.Fatalf("%s: Lua code %d value %d, Go %d", where, code, value, want)
			}
			if op != "available" && want > 0 {
				seen.HandedBack++
			}
		}
		var list []int64
		for _, e := range res[6].([]any) {
			list = append(list, mustInt(t, where, e.(string)))
		}
		stored := res[5].(string)
		var got algorithm.State = ra.fresh()
		if stored != "" {
			fields := strings.Fields(stored)
			if mark := fields[0] == "u"; mark != (ra.unit == 1) {
				t.Fatalf("%s: state %q: its mark of µs must be there iff the unit is", where, stored)
			} else if mark {
				fields = fields[1:]
			}
			var v []int64
			for _, f := range fields {
				v = append(v, mustInt(t, where, f))
			}
			got = ra.stored(v, list)
		} else if len(list) > 0 {
			t.Fatalf("%s: a list %v without a state", where, list)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("%s: state after the call:\nLua %+v (%q, list %v)\nGo  %+v", where, got, stored, list, s)
		}
	}
}

func mustInt(t *testing.T, where, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is no integer", where, s)
	}
	return v
}
