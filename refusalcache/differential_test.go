package refusalcache_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
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

// TestDifferential runs random traces of acquires (mostly of one permit,
// with and without waits), cancelled reservations, releases, config
// changes, deletions, expiries and time steps (by ms, µs and ns) through a
// memory store and through the cache in front of another memory store, on
// one injected clock, and requires the same answer to every call: every
// refusal the cache answers locally is the one the store would have given
// at that instant. (redisstore's TestDifferential does the same with the
// cache in front of Redis.)
func TestDifferential(t *testing.T) {
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -diff.seed=N -diff.traces=1)", seed, seed+uint64(*diffTraces)-1)
	var seen outcomes
	for i := 0; i < *diffTraces; i++ {
		runTrace(t, seed+uint64(i), &seen)
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

// outcomes counts what the traces exercised.
type outcomes struct {
	Granted, Refused, Reserved, Cancelled, Released, Expired, NotInitialized, Full int
	// LocalRefusals were answered by the cache (LocalLeaky of them on a
	// leaky bucket): each was compared with the plain store's answer like
	// any other.
	LocalRefusals, LocalLeaky int64
}

type reservation struct {
	client string
	at     time.Time
	n      int64
}

func runTrace(t *testing.T, seed uint64, seen *outcomes) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	clk := clock.NewFake(storetest.T0)
	plain := memstore.New(memstore.WithTimeSource(clk))
	stales := []time.Duration{time.Millisecond, 20 * time.Millisecond, 0, time.Hour}
	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{MaxStale: stales[rng.IntN(len(stales))], Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := []string{"a", "b"}
	clients := []string{"c0", "c1", "c2"}
	algs := redlimit.Algorithms
	main := algs[rng.IntN(len(algs))]
	randConfig := func() redlimit.Config {
		c := redlimit.PerInterval(1+rng.Int64N(6), time.Duration(1+rng.Int64N(40))*time.Millisecond)
		if rng.IntN(6) == 0 {
			c.Rate = 1 + rng.Int64N(3000) // spacing down to a third of a µs
		}
		c.Algorithm = main
		if rng.IntN(5) == 0 {
			c.Algorithm = algs[rng.IntN(len(algs))]
		}
		switch c.Algorithm {
		case redlimit.TokenBucket:
			c.Burst = 1 + rng.Int64N(8)
		case redlimit.LeakyBucket:
			c.Capacity = 1 + rng.Int64N(8)
		}
		if rng.IntN(3) == 0 {
			c = c.WithMode(redlimit.PerClient)
		}
		return c
	}
	// The configs callers remember, per name, as each store last told
	// them (the epochs differ between the stores).
	cfgs := map[string]redlimit.Config{}
	knownP, knownC := map[string]redlimit.Config{}, map[string]redlimit.Config{}
	learn := func(name string, p, c redlimit.Config) {
		if p.Rate != 0 && c.Rate != 0 {
			knownP[name], knownC[name] = p, c
		}
	}
	pending := map[string][]reservation{}
	fail := func(step int, op string, p, c any) {
		t.Fatalf("seed %d step %d %s: plain %+v, cached %+v", seed, step, op, p, c)
	}
	same := func(step int, op string, ep, ec error) bool {
		if (ep == nil) != (ec == nil) || (ep != nil && !sameKind(ep, ec)) {
			fail(step, op+" error", ep, ec)
		}
		return ep == nil
	}
	set := func(step int, name string, how redlimit.SetMode) {
		cfgs[name] = randConfig()
		sp, okp, ep := plain.SetConfig(ctx, name, cfgs[name], how)
		sc, okc, ec := cache.SetConfig(ctx, name, cfgs[name], how)
		if same(step, "set", ep, ec) && (okp != okc || !sp.SameLimit(sc)) {
			fail(step, "set", sp, sc)
		}
		learn(name, sp, sc)
	}
	for _, name := range names {
		set(-1, name, redlimit.SetResetState)
	}
	for step := 0; step < *diffOps; step++ {
		name := names[rng.IntN(len(names))]
		client := clients[rng.IntN(len(clients))]
		key := redlimit.Key{Name: name, Client: client}
		cfg := cfgs[name]
		switch p := rng.IntN(100); {
		case p < 50: // acquire, mostly one permit, maybe waiting
			n := int64(1)
			if rng.IntN(4) == 0 {
				n = 1 + rng.Int64N(cfg.MaxPermits()+1) // sometimes more than the most grantable
			}
			wait := time.Duration(0)
			switch rng.IntN(4) {
			case 0:
				wait = time.Duration(rng.Int64N(30_000)) * time.Microsecond
			case 1:
				wait = -1
			}
			local := cache.Stats().LocalRefusals
			dp, ep := plain.Acquire(ctx, key, knownP[name], n, wait)
			dc, ec := cache.Acquire(ctx, key, knownC[name], n, wait)
			hit := cache.Stats().LocalRefusals > local
			if *diffLog {
				t.Logf("step %d t=%v: acquire(%s/%s, %d, %v) = %+v %v / %+v %v (local %v)", step, clk.Now().Sub(storetest.T0), name, client, n, wait, dp, ep, dc, ec, hit)
			}
			if !same(step, "acquire", ep, ec) {
				if errors.Is(ep, redlimit.ErrNotInitialized) {
					seen.NotInitialized++
				}
				continue
			}
			switch {
			case dp.Full:
				seen.Full++
			case !dp.Granted:
				seen.Refused++
			case dp.Wait > 0:
				seen.Reserved++
			default:
				seen.Granted++
			}
			if hit {
				seen.LocalRefusals++
				if dp.Config.Algorithm == redlimit.LeakyBucket {
					seen.LocalLeaky++
				}
			}
			if !dp.Config.SameLimit(dc.Config) {
				fail(step, "acquire config", dp.Config, dc.Config)
			}
			learn(name, dp.Config, dc.Config)
			dp.Config, dc.Config = redlimit.Config{}, redlimit.Config{}
			if wait == 0 {
				// A store may leave Full unset when no wait is
				// allowed (Decision.Full): memstore does.
				dp.Full, dc.Full = false, false
			}
			if dp != dc {
				fail(step, fmt.Sprintf("acquire(%s/%s, n=%d, wait=%v, local=%v)", name, client, n, wait, hit), dp, dc)
			}
			if dp.Granted && dp.Wait > 0 {
				pending[name] = append(pending[name], reservation{client, dp.At, n})
			}
		case p < 58: // a waiter gives up
			ps := pending[name]
			if len(ps) == 0 {
				continue
			}
			i := rng.IntN(len(ps))
			res := ps[i]
			pending[name] = append(ps[:i], ps[i+1:]...)
			k := redlimit.Key{Name: name, Client: res.client}
			gp, ep := plain.Cancel(ctx, k, knownP[name], res.at, res.n)
			gc, ec := cache.Cancel(ctx, k, knownC[name], res.at, res.n)
			if same(step, "cancel", ep, ec) && gp != gc {
				fail(step, "cancel", gp, gc)
			}
			if gp > 0 {
				seen.Cancelled++
			}
		case p < 65:
			n := 1 + rng.Int64N(cfg.MaxPermits())
			var upTo time.Time
			if rng.IntN(4) > 0 {
				iv := cfg.Interval.Microseconds()
				upTo = clk.Now().Add(time.Duration(rng.Int64N(iv*5/4)-iv+iv/8) * time.Microsecond)
			}
			gp, ep := plain.Release(ctx, key, knownP[name], n, upTo)
			gc, ec := cache.Release(ctx, key, knownC[name], n, upTo)
			if same(step, "release", ep, ec) && gp != gc {
				fail(step, "release", gp, gc)
			}
			if gp > 0 {
				seen.Released++
			}
		case p < 69:
			ap, cp, ep := plain.Available(ctx, key, knownP[name])
			ac, cc, ec := cache.Available(ctx, key, knownC[name])
			if same(step, "available", ep, ec) && (ap != ac || !cp.SameLimit(cc)) {
				fail(step, "available", ap, ac)
			}
			learn(name, cp, cc)
		case p < 73: // SetRate, keeping or resetting the grants
			how := redlimit.SetKeepState
			if rng.IntN(3) == 0 {
				how = redlimit.SetResetState
				pending[name] = nil
			}
			set(step, name, how)
		case p < 75: // data loss: the config and Overall state vanish
			op, ep := plain.Delete(ctx, name)
			oc, ec := cache.Delete(ctx, name)
			if same(step, "delete", ep, ec) && op != oc {
				fail(step, "delete", op, oc)
			}
			pending[name] = nil
			if rng.IntN(2) == 0 {
				delete(knownP, name) // nobody remembers it: not initialized
				delete(knownC, name)
			}
		case p < 79: // the limiter expires a little later
			ttl := time.Duration(1+rng.Int64N(30)) * time.Millisecond
			if rng.IntN(2) == 0 {
				ttl += time.Duration(rng.Int64N(1000)) * time.Microsecond
			}
			op, ep := plain.Expire(ctx, name, ttl)
			oc, ec := cache.Expire(ctx, name, ttl)
			if same(step, "expire", ep, ec) && op != oc {
				fail(step, "expire", op, oc)
			}
			if op {
				seen.Expired++
			}
		case p < 81:
			op, ep := plain.ClearExpire(ctx, name)
			oc, ec := cache.ClearExpire(ctx, name)
			if same(step, "clear expire", ep, ec) && op != oc {
				fail(step, "clear expire", op, oc)
			}
		default: // time passes, by whole ms, by µs or by ns
			switch rng.IntN(3) {
			case 0:
				clk.Advance(time.Duration(rng.Int64N(25)) * time.Millisecond)
			case 1:
				clk.Advance(time.Duration(rng.Int64N(2000)) * time.Microsecond)
			default:
				clk.Advance(time.Duration(rng.Int64N(2500)))
			}
		}
	}
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
