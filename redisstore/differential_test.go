package redisstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
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

// TestDifferential runs random traces of acquires (with and without waits),
// cancelled reservations, releases, config changes, resets, data loss and
// time steps through the memory store (the Go rules) and Redis (the Lua),
// on one injected clock, and requires the same answer to every call.
func TestDifferential(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -diff.seed=N -diff.traces=1)", seed, seed+uint64(*diffTraces)-1)
	var seen outcomes
	for i := 0; i < *diffTraces; i++ {
		runTrace(t, seed+uint64(i), rdb, &seen)
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

// outcomes counts what the traces exercised.
type outcomes struct {
	Granted, Refused, Reserved, Cancelled, Released, Restored, NotInitialized, TooMany int
	// LocalRefusals were answered by the Redis store's refusal cache: each
	// was compared with the memory store's answer like any other.
	LocalRefusals int64
}

type reservation struct {
	client string
	at     time.Time
	n      int64
}

func runTrace(t *testing.T, seed uint64, rdb redis.UniversalClient, seen *outcomes) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	clk := clock.NewFake(storetest.T0)
	mem := memstore.New(memstore.WithTimeSource(clk))
	red, err := redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprintf("diff%d:", seed)), redisstore.WithTimeSource(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "trace"
	clients := []string{"c0", "c1", "c2"}
	// Every trace sticks mostly to one algorithm, so that its state gets deep.
	algs := redlimit.Algorithms
	main := algs[rng.IntN(len(algs))]
	randConfig := func() redlimit.Config {
		c := redlimit.PerInterval(1+rng.Int64N(12), time.Duration(1+rng.Int64N(40))*time.Millisecond)
		if rng.IntN(6) == 0 {
			c.Rate = 1 + rng.Int64N(3000) // spacing down to a third of a µs
		}
		c.Algorithm = main
		if rng.IntN(5) == 0 {
			c.Algorithm = algs[rng.IntN(len(algs))]
		}
		switch c.Algorithm {
		case redlimit.TokenBucket:
			c.Burst = 1 + rng.Int64N(15)
		case redlimit.LeakyBucket:
			c.Capacity = 1 + rng.Int64N(15)
		}
		if rng.IntN(3) == 0 {
			c = c.WithMode(redlimit.PerClient)
		}
		return c
	}
	cfg := randConfig()
	// The config callers remember, as each store last told it (the epochs
	// differ between stores: each store makes its own).
	var knownM, knownR redlimit.Config
	learn := func(m, r redlimit.Config) {
		if m.Rate != 0 && r.Rate != 0 {
			knownM, knownR = m, r
		}
	}
	var pending []reservation
	fail := func(step int, op string, m, r any) {
		if *diffTrace {
			for _, k := range rdb.Keys(ctx, red.Prefix()+"*").Val() {
				t.Logf("  key %s: %v %v %v", k, rdb.HGetAll(ctx, k).Val(), rdb.LRange(ctx, k, 0, -1).Val(), rdb.PTTL(ctx, k).Val())
			}
		}
		t.Fatalf("seed %d step %d %s: memory %+v, redis %+v", seed, step, op, m, r)
	}
	same := func(step int, op string, em, er error) bool {
		if (em == nil) != (er == nil) || (em != nil && !sameKind(em, er)) {
			fail(step, op+" error", em, er)
		}
		return em == nil
	}
	setHow := func(how redlimit.SetMode) {
		sm, okm, em := mem.SetConfig(ctx, name, cfg, how)
		sr, okr, er := red.SetConfig(ctx, name, cfg, how)
		if *diffTrace {
			t.Logf("  set(%v, %v) = %v %v / %v %v", cfg, how, sm, okm, sr, okr)
		}
		if same(-1, "set", em, er) && (okm != okr || !sm.SameLimit(sr)) {
			fail(-1, "set", sm, sr)
		}
		learn(sm, sr)
	}
	setHow(redlimit.SetResetState)
	ops := *diffOps
	for step := 0; step < ops; step++ {
		if *diffTrace {
			t.Logf("step %d: t=%v cfg=%v pending=%d state=%v log=%v", step, clk.Now().Sub(storetest.T0), cfg, len(pending),
				rdb.HGetAll(ctx, red.Prefix()+"{trace}").Val(), rdb.LRange(ctx, red.Prefix()+"{trace}:log", 0, -1).Val())
		}
		client := clients[rng.IntN(len(clients))]
		key := redlimit.Key{Name: name, Client: client}
		switch p := rng.IntN(100); {
		case p < 45: // acquire, maybe waiting
			most := min(cfg.MaxPermits(), 40)
			n := 1 + rng.Int64N(most+1) // sometimes more than the most grantable
			wait := time.Duration(0)
			switch rng.IntN(4) {
			case 0:
				wait = time.Duration(rng.Int64N(60_000)) * time.Microsecond
			case 1:
				wait = -1
			}
			dm, em := mem.Acquire(ctx, key, knownM, n, wait)
			dr, er := red.Acquire(ctx, key, knownR, n, wait)
			if !same(step, "acquire", em, er) {
				switch {
				case errors.Is(em, redlimit.ErrNotInitialized):
					seen.NotInitialized++
				case errors.Is(em, redlimit.ErrPermitsExceedRate):
					seen.TooMany++
				}
				continue
			}
			switch {
			case !dm.Granted:
				seen.Refused++
			case dm.Wait > 0:
				seen.Reserved++
			default:
				seen.Granted++
			}
			if !dm.Config.SameLimit(dr.Config) {
				fail(step, "acquire config", dm.Config, dr.Config)
			}
			learn(dm.Config, dr.Config)
			dm.Config, dr.Config = redlimit.Config{}, redlimit.Config{}
			if wait == 0 {
				// A store may leave Full unset when no wait is
				// allowed (Decision.Full): memstore does.
				dm.Full, dr.Full = false, false
			}
			if *diffTrace {
				t.Logf("  acquire(%s, %d, %v) = %+v", client, n, wait, dm)
			}
			if dm != dr {
				fail(step, fmt.Sprintf("acquire(%s, n=%d, wait=%v)", client, n, wait), dm, dr)
			}
			if dm.Granted && dm.Wait > 0 {
				pending = append(pending, reservation{client, dm.At, n})
			}
		case p < 55: // a waiter gives up, or (one time in four) every one
			if len(pending) == 0 {
				continue
			}
			gone := 1
			if rng.IntN(4) == 0 {
				gone = len(pending)
			}
			for range gone {
				i := rng.IntN(len(pending))
				res := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				k := redlimit.Key{Name: name, Client: res.client}
				gm, em := mem.Cancel(ctx, k, knownM, res.at, res.n)
				gr, er := red.Cancel(ctx, k, knownR, res.at, res.n)
				if *diffTrace {
					t.Logf("  cancel(%+v) = %d/%d %v", res, gm, gr, em)
				}
				if same(step, "cancel", em, er) && gm != gr {
					fail(step, "cancel", gm, gr)
				}
				if gm > 0 {
					seen.Cancelled++
				}
			}
		case p < 62:
			n := 1 + rng.Int64N(max(cfg.Rate, cfg.Burst, cfg.Capacity))
			// No bound, or the oldest grant released made up to an
			// interval and a bit before now (or, from a clock ahead of
			// the store's, after it).
			var upTo time.Time
			if rng.IntN(4) > 0 {
				iv := cfg.Interval.Microseconds()
				upTo = clk.Now().Add(time.Duration(rng.Int64N(iv*5/4)-iv+iv/8) * time.Microsecond)
			}
			gm, em := mem.Release(ctx, key, knownM, n, upTo)
			gr, er := red.Release(ctx, key, knownR, n, upTo)
			if *diffTrace {
				t.Logf("  release(%s, %d, %v) = %d/%d %v", client, n, upTo, gm, gr, em)
			}
			if same(step, "release", em, er) && gm != gr {
				fail(step, "release", gm, gr)
			}
			if gm > 0 {
				seen.Released++
			}
		case p < 70:
			am, cm, em := mem.Available(ctx, key, knownM)
			ar, cr, er := red.Available(ctx, key, knownR)
			if *diffTrace {
				t.Logf("  available(%s) = %d/%d %v", client, am, ar, em)
			}
			if same(step, "available", em, er) && (am != ar || !cm.SameLimit(cr)) {
				fail(step, "available", am, ar)
			}
			learn(cm, cr)
		case p < 75: // SetRate, keeping or resetting the grants
			cfg = randConfig()
			how := redlimit.SetKeepState
			if rng.IntN(3) == 0 {
				how = redlimit.SetResetState
				pending = nil
			}
			setHow(how)
		case p < 77: // data loss: the config and Overall state vanish
			om, em := mem.Delete(ctx, name)
			or, er := red.Delete(ctx, name)
			if *diffTrace {
				t.Logf("  delete = %v/%v", om, or)
			}
			if same(step, "delete", em, er) && om != or {
				fail(step, "delete", om, or)
			}
			pending = nil
			if rng.IntN(2) == 0 {
				knownM, knownR = redlimit.Config{}, redlimit.Config{} // nobody remembers it: not initialized
			} else {
				// Clients remember the config and restore it, with its epoch:
				// the PerClient state that survived still counts.
				seen.Restored++
			}
		default: // time passes, by whole ms or by µs
			if rng.IntN(2) == 0 {
				clk.Advance(time.Duration(rng.Int64N(25)) * time.Millisecond)
			} else {
				clk.Advance(time.Duration(rng.Int64N(2000)) * time.Microsecond)
			}
		}
	}
	seen.LocalRefusals += red.Stats().LocalRefusals
}

// sameKind: both errors are of the same redlimit kind.
func sameKind(a, b error) bool {
	for _, kind := range []error{redlimit.ErrPermitsExceedRate, redlimit.ErrInvalidArgument, redlimit.ErrNotInitialized, redlimit.ErrConfigMismatch, redlimit.ErrUnavailable, redlimit.ErrCorrupt} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}
