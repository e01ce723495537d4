package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// TestBoundPolicyAsWholePath: a Policy bound to its policy in the store
// (keyHandle) gets, call by call, the Results a Policy gets through
// PolicyStore's whole path, over a random trace of grants, refusals,
// hand-backs, limit changes and deletions, on two stores of one clock,
// one of them without the shortcuts; and a Result kept never changes.
func TestBoundPolicyAsWholePath(t *testing.T) {
	ctx := context.Background()
	forHashMasks(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(20261124, 2))
		clk := clock.NewFake(t0)
		fast, whole := twinStores(clk)
		limits := []redlimit.Config{redlimit.TokenBucketConfig(3, time.Second, 5)}
		var pols [2]*redlimit.Policy
		for i, s := range []*Store{fast, whole} {
			p, err := redlimit.NewPolicy(s, "p", limits, redlimit.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			pols[i] = p
		}
		if pols[0].Key("k").Key() != "k" {
			t.Fatal("Key")
		}
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = "k-" + strconv.Itoa(i)
		}
		// kept are Results handed out, with a copy of their Limits.
		type kept struct {
			r     redlimit.Result
			shown []redlimit.LimitStatus
		}
		var keep []kept
		bound := 0
		for step := range 20_000 {
			key := keys[rng.IntN(len(keys))]
			f, w := pols[0].Key(key), pols[1].Key(key)
			switch op := rng.IntN(100); {
			case op < 70:
				n := 1 + rng.Int64N(3)
				if rng.IntN(50) == 0 {
					n = 100 // more than the bucket holds: an error
				}
				got, err1 := f.TryAcquire(ctx, n)
				want, err2 := w.TryAcquire(ctx, n)
				if (err1 == nil) != (err2 == nil) || !sameResult(got, want) {
					t.Fatalf("step %d, %s: TryAcquire(%d): %+v, %v; whole path %+v, %v", step, key, n, got, err1, want, err2)
				}
				if got.Allowed {
					bound++
				}
				if rng.IntN(10) == 0 {
					keep = append(keep, kept{got, slices.Clone(got.Limits)})
				}
			case op < 78:
				got, err1 := f.Release(ctx, 1)
				want, err2 := w.Release(ctx, 1)
				if (err1 == nil) != (err2 == nil) || got != want {
					t.Fatalf("step %d, %s: Release: %d, %v; whole path %d, %v", step, key, got, err1, want, err2)
				}
			case op < 85:
				got, err1 := f.Status(ctx)
				want, err2 := w.Status(ctx)
				if (err1 == nil) != (err2 == nil) || !sameResult(got, want) {
					t.Fatalf("step %d, %s: Status: %+v, %v; whole path %+v, %v", step, key, got, err1, want, err2)
				}
			case op < 86:
				// Another bucket, sometimes two limits or a window,
				// whose keys take the whole path.
				cfgs := otherLimits(rng)
				for _, p := range pols {
					if err := p.SetLimits(ctx, cfgs); err != nil {
						t.Fatal(err)
					}
				}
			case op < 87 && rng.IntN(4) == 0:
				// Deleted: a Policy that knows no limits any more
				// finds none, until some are set.
				for _, p := range pols {
					if _, err := p.Delete(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for _, p := range pols {
					if err := p.SetLimits(ctx, limits); err != nil {
						t.Fatal(err)
					}
				}
			default:
				clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			}
			for _, k := range keep[max(0, len(keep)-20):] {
				if !slices.Equal(k.r.Limits, k.shown) {
					t.Fatalf("step %d: a Result's Limits changed: %+v, was %+v", step, k.r.Limits, k.shown)
				}
			}
		}
		for _, k := range keep {
			if !slices.Equal(k.r.Limits, k.shown) {
				t.Fatalf("a Result's Limits changed: %+v, was %+v", k.r.Limits, k.shown)
			}
		}
		if bound < 1000 {
			t.Fatalf("%d grants: the trace hardly tried the bound path", bound)
		}
	})
}

// sameResult reports whether two Results say the same.
func sameResult(a, b redlimit.Result) bool {
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter && a.At.Equal(b.At) &&
		a.Waited == b.Waited && a.Degraded == b.Degraded && a.ResetAfter == b.ResetAfter && slices.Equal(a.Limits, b.Limits)
}

// embedded is a store that embeds the memory store: a Policy on it does
// not bind itself, and takes PolicyStore's path.
type embedded struct{ *Store }

// TestPolicyZipfAllocatesNothing: a Policy of one token bucket over keys
// drawn by Zipf's law (s 1.1), a few calls an instant, as a busy
// process's: hot keys show a few states by turns, and once every key has
// its record no call allocates, bound or through PolicyStore's calls;
// each Result still shows its own decision.
func TestPolicyZipfAllocatesNothing(t *testing.T) {
	t.Run("bound", func(t *testing.T) { testZipfAllocs(t, func(s *Store) redlimit.PolicyStore { return s }) })
	t.Run("PolicyStore", func(t *testing.T) { testZipfAllocs(t, func(s *Store) redlimit.PolicyStore { return embedded{s} }) })
}

func testZipfAllocs(t *testing.T, wrap func(*Store) redlimit.PolicyStore) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	const rate = 1 << 30 // whole again a µs after a few grants
	p, err := redlimit.NewPolicy(wrap(New(WithTimeSource(clk))), "users", []redlimit.Config{redlimit.TokenBucketConfig(rate, time.Second, rate)}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("u-%05d", i) // one length: the keys' bytes a shard holds vary less
	}
	rng := rand.New(rand.NewPCG(1, 1))
	z := rand.NewZipf(rng, 1.1, 1, uint64(len(keys)-1))
	order := make([]int, 30_000)
	for i := range order {
		order[i] = int(z.Uint64())
	}
	const perInstant = 3
	round := func() {
		seen := map[int]int64{} // key -> permits granted this instant
		for i, k := range order {
			if i%perInstant == 0 {
				clk.Advance(time.Microsecond)
				clear(seen)
			}
			seen[k]++
			r, err := p.Key(keys[k]).TryAcquire(ctx, 1)
			if err != nil || !r.Allowed || r.Remaining != rate-seen[k] || len(r.Limits) != 1 || r.Limits[0].Remaining != r.Remaining || r.Limits[0].ResetAfter != time.Microsecond {
				t.Fatalf("call %d, key %s: %+v, %v; want %d left", i, keys[k], r, err, rate-seen[k])
			}
		}
	}
	// Warm: every key has had its record, every shard's arrays have grown
	// to the most it holds between two sweeps (shards differ with the
	// hash seed, and so does the round at which the last grows).
	for range 10 {
		round()
	}
	clocks := testing.AllocsPerRun(5, func() {
		for range len(order) / perInstant {
			clk.Advance(time.Microsecond)
		}
	})
	if n := testing.AllocsPerRun(5, round); n != clocks {
		t.Errorf("%v allocations per round of %d calls, want %v (the fake clock's)", n, len(order), clocks)
	}
}
