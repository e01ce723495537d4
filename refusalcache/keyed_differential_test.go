package refusalcache_test

import (
	"context"
	"errors"
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

// keyOutcomes counts what keyed traces exercised.
type keyOutcomes struct {
	Granted, Refused, Reserved, Full, Cancelled, Released, Errors int
	// Stale: traces that ended on a local refusal the store, told of a
	// release made by another process, would have granted.
	Stale int
	// Local: refusals answered by the cache; LocalMulti of them of a
	// policy of several limits; Lower: answers in which a limit's
	// Remaining was lower than the store's (one that regained permits).
	Local, LocalMulti, Lower int
}

// TestKeyedDifferential runs random traces of keyed calls (mostly
// AcquireKey of few permits without waiting, so that keys run dry; with
// waits, cancels, releases, status reads, policy changes keeping or
// resetting the keys' states, deletions and time steps by ms, µs and ns)
// on policies of one to three limits of mixed algorithms, through a memory
// store and through the cache in front of another memory store, on one
// injected clock. Every answer must be the store's, except that a locally
// answered refusal's Remaining of a limit may be lower than the store's (a
// limit that regained permits since the refusal; keyed.go says why), never
// higher; and that after a release made by another process (straight on
// the store under the cache) a local answer may be a refusal where the
// store grants, within MaxStale of the refusal it repeats (the trace ends
// there: the stores' states part).
func TestKeyedDifferential(t *testing.T) {
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -diff.seed=N -diff.traces=1)", seed, seed+uint64(*diffTraces)-1)
	stales := []time.Duration{time.Millisecond, 20 * time.Millisecond, 0, time.Hour}
	var seen keyOutcomes
	for i := 0; i < *diffTraces; i++ {
		s := seed + uint64(i)
		clk, stale, cache := tracedCache(t, s, stales)
		keyTrace(t, s, memstore.New(memstore.WithTimeSource(clk)), cache, clk, stale, &seen)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d traces, every answer the store's: %+v", *diffTraces, seen)
	if seen.Granted == 0 || seen.Refused == 0 || seen.Reserved == 0 || seen.Full == 0 || seen.Cancelled == 0 ||
		seen.Released == 0 || seen.Errors == 0 || seen.Local == 0 || seen.LocalMulti == 0 || seen.Stale == 0 {
		t.Fatalf("traces missed a kind of answer: %+v", seen)
	}
}

// keyTrace runs one seeded trace through ref and got.
func keyTrace(t *testing.T, seed uint64, ref redlimit.PolicyStore, got *refusalcache.Store, clk *clock.Fake, maxStale time.Duration, seen *keyOutcomes) {
	t.Helper()
	if maxStale == 0 {
		maxStale = refusalcache.DefaultMaxStale
	}
	under := got.Unwrap().(redlimit.PolicyStore) // another process's way in
	// refusedAt: when got's store last refused a key (the call its cache
	// may repeat); elsewhere: a release was made under the cache since.
	refusedAt, elsewhere := map[redlimit.PolicyKey]time.Time{}, map[redlimit.PolicyKey]bool{}
	rng := rand.New(rand.NewPCG(seed, 0x6b6579))
	ctx := context.Background()
	names := []string{"p", "q"}
	keys := []string{"k0", "k1", "k2"}
	algs := redlimit.Algorithms
	randLimits := func() []redlimit.Config {
		limits := make([]redlimit.Config, 1+rng.IntN(3))
		for i := range limits {
			c := redlimit.PerInterval(1+rng.Int64N(6), time.Duration(1+rng.Int64N(40))*time.Millisecond)
			if rng.IntN(6) == 0 {
				c.Rate = 1 + rng.Int64N(3000)
			}
			c.Algorithm = algs[rng.IntN(len(algs))]
			switch c.Algorithm {
			case redlimit.TokenBucket:
				c.Burst = 1 + rng.Int64N(8)
			case redlimit.LeakyBucket:
				c.Capacity = 1 + rng.Int64N(8)
			}
			limits[i] = c
		}
		return limits
	}
	// What callers of each store know of each policy (the stores' epochs
	// differ: each makes its own).
	knownR, knownG := map[string]redlimit.PolicyConfig{}, map[string]redlimit.PolicyConfig{}
	learn := func(name string, r, g redlimit.PolicyConfig) {
		if len(r.Limits) != 0 && len(g.Limits) != 0 {
			knownR[name], knownG[name] = r, g
		}
	}
	type reservation struct {
		k  redlimit.PolicyKey
		at time.Time
		n  int64
	}
	var pending []reservation
	fail := func(step int, op string, r, g any) {
		t.Helper()
		t.Fatalf("seed %d step %d t=%v %s: reference %+v, cache %+v", seed, step, clk.Now().Sub(storetest.T0), op, r, g)
	}
	same := func(step int, op string, er, eg error) bool {
		t.Helper()
		if (er == nil) != (eg == nil) || (er != nil && !sameKeyedKind(er, eg)) {
			fail(step, op+" error", er, eg)
		}
		if er != nil {
			seen.Errors++
		}
		return er == nil
	}
	samePolicy := func(r, g redlimit.PolicyConfig) bool {
		return r.SameLimits(g) && r.Version == g.Version && r.Since.Equal(g.Since)
	}
	set := func(step int, name string, how redlimit.SetMode) {
		limits := randLimits()
		sr, okr, er := ref.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: limits}, how)
		sg, okg, eg := got.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: limits}, how)
		if same(step, "set", er, eg) && (okr != okg || !samePolicy(sr, sg)) {
			fail(step, "set", sr, sg)
		}
		learn(name, sr, sg)
	}
	for _, name := range names {
		set(-1, name, redlimit.SetResetState)
	}
	for step := 0; step < 300; step++ {
		name := names[rng.IntN(len(names))]
		k := redlimit.PolicyKey{Policy: name, Key: keys[rng.IntN(len(keys))]}
		switch p := rng.IntN(100); {
		case p < 50:
			n := int64(1)
			if rng.IntN(4) == 0 {
				n = 1 + rng.Int64N(10) // sometimes more than a limit grants
			}
			wait := time.Duration(0)
			switch rng.IntN(6) {
			case 0:
				wait = time.Duration(rng.Int64N(30_000)) * time.Microsecond
			case 1:
				wait = -1
			}
			local := got.Stats().LocalKeyRefusals
			dr, er := ref.AcquireKey(ctx, k, knownR[name], n, wait)
			dg, eg := got.AcquireKey(ctx, k, knownG[name], n, wait)
			hit := got.Stats().LocalKeyRefusals > local
			op := fmt.Sprintf("acquire(%v, n=%d, wait=%v, local=%v)", k, n, wait, hit)
			if !same(step, op, er, eg) {
				continue
			}
			if !samePolicy(dr.Policy, dg.Policy) {
				fail(step, op+" policy", dr.Policy, dg.Policy)
			}
			learn(name, dr.Policy, dg.Policy)
			if hit && elsewhere[k] && clk.Now().Before(refusedAt[k].Add(maxStale)) {
				// May be stale, within the bound: a refusal all the same.
				if dg.Granted {
					fail(step, op+" granted locally", dr, dg)
				}
				if dr.Granted {
					seen.Stale++
					return // the states part here
				}
				continue // both refused: neither state changed
			}
			if !hit {
				elsewhere[k] = false
				if !dg.Granted {
					refusedAt[k] = clk.Now()
				}
			}
			lower := false
			if len(dr.Limits) == len(dg.Limits) {
				for i := range dr.Limits {
					r, g := dr.Limits[i], dg.Limits[i]
					if hit && g.Remaining < r.Remaining {
						lower = true
						dg.Limits[i].Remaining = r.Remaining
					}
				}
			}
			if dg.Cached != hit {
				fail(step, op+" Cached", hit, dg.Cached)
			}
			dr.Policy, dg.Policy = redlimit.PolicyConfig{}, redlimit.PolicyConfig{}
			dg.Cached = false // the cache's answer is the store's in all else
			if fmt.Sprint(dr) != fmt.Sprint(dg) {
				fail(step, op, dr, dg)
			}
			switch {
			case dr.Full:
				seen.Full++
			case !dr.Granted:
				seen.Refused++
			case dr.Wait > 0:
				seen.Reserved++
				pending = append(pending, reservation{k, dr.At, n})
			default:
				seen.Granted++
			}
			if hit {
				seen.Local++
				if len(dr.Limits) > 1 {
					seen.LocalMulti++
				}
				if lower {
					seen.Lower++
				}
			}
		case p < 57:
			if len(pending) == 0 {
				continue
			}
			i := rng.IntN(len(pending))
			res := pending[i]
			pending = append(pending[:i], pending[i+1:]...)
			gr, er := ref.CancelKey(ctx, res.k, knownR[res.k.Policy], res.at, res.n)
			gg, eg := got.CancelKey(ctx, res.k, knownG[res.k.Policy], res.at, res.n)
			if same(step, "cancel", er, eg) && gr != gg {
				fail(step, "cancel", gr, gg)
			}
			if gr > 0 {
				seen.Cancelled++
			}
		case p < 63:
			n := 1 + rng.Int64N(4)
			gr, er := ref.ReleaseKey(ctx, k, knownR[name], n)
			gg, eg := got.ReleaseKey(ctx, k, knownG[name], n)
			if same(step, "release", er, eg) && gr != gg {
				fail(step, "release", gr, gg)
			}
			if gr > 0 {
				seen.Released++
			}
		case p < 66: // another process releases
			n := 1 + rng.Int64N(4)
			gr, er := ref.ReleaseKey(ctx, k, knownR[name], n)
			gg, eg := under.ReleaseKey(ctx, k, knownG[name], n)
			if same(step, "release elsewhere", er, eg) && gr != gg {
				fail(step, "release elsewhere", gr, gg)
			}
			elsewhere[k] = true
		case p < 69:
			dr, er := ref.StatusKey(ctx, k, knownR[name])
			dg, eg := got.StatusKey(ctx, k, knownG[name])
			if same(step, "status", er, eg) {
				dr.Policy, dg.Policy = redlimit.PolicyConfig{}, redlimit.PolicyConfig{}
				if fmt.Sprint(dr) != fmt.Sprint(dg) {
					fail(step, "status", dr, dg)
				}
			}
		case p < 73:
			how := redlimit.SetKeepState
			if rng.IntN(3) == 0 {
				how = redlimit.SetResetState
			}
			set(step, name, how)
		case p < 75:
			or, er := ref.DeletePolicy(ctx, name)
			og, eg := got.DeletePolicy(ctx, name)
			if same(step, "delete", er, eg) && or != og {
				fail(step, "delete", or, og)
			}
			kept := pending[:0]
			for _, r := range pending {
				if r.k.Policy != name {
					kept = append(kept, r)
				}
			}
			pending = kept
			if rng.IntN(2) == 0 {
				delete(knownR, name) // nobody remembers it: not initialized
				delete(knownG, name)
			}
		default:
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

// sameKeyedKind: both errors are of the same redlimit kind.
func sameKeyedKind(a, b error) bool {
	for _, kind := range []error{redlimit.ErrPermitsExceedRate, redlimit.ErrInvalidArgument, redlimit.ErrNotInitialized, redlimit.ErrConfigMismatch} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}
