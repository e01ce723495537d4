package redisstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

var (
	policyTraces = flag.Int("policy.traces", 150, "random traces in TestPolicyDifferential")
	policySeed   = flag.Uint64("policy.seed", 0, "first seed of TestPolicyDifferential (0: from the time)")
	policyLog    = flag.Bool("policy.log", false, "log every call of TestPolicyDifferential")
)

// randomPolicy returns 1..3 limits of random algorithms.
func randomPolicy(rng *rand.Rand) []redlimit.Config {
	algs := redlimit.Algorithms
	n := 1 + rng.IntN(3)
	if rng.IntN(4) == 0 {
		n = 1
	}
	limits := make([]redlimit.Config, n)
	for i := range limits {
		rate := 1 + rng.Int64N(8)
		interval := time.Duration(1+rng.IntN(40)) * 5 * time.Millisecond
		c := redlimit.PerInterval(rate, interval).WithAlgorithm(algs[rng.IntN(len(algs))])
		switch c.Algorithm {
		case redlimit.TokenBucket:
			c.Burst = 1 + rng.Int64N(10)
		case redlimit.LeakyBucket:
			c.Capacity = 1 + rng.Int64N(10)
		}
		limits[i] = c
	}
	return limits
}

// sameDecision compares two stores' decisions, all but the policy's epoch.
func sameDecision(a, b redlimit.PolicyDecision) bool {
	a.Policy.Epoch, b.Policy.Epoch = 0, 0
	a.Cached, b.Cached = false, false // an answer of the refusal cache is the store's
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// lowerRemaining sets each limit's Remaining in local, a refusal answered
// by the refusal cache, to ref's when it is lower: a cached refusal shows
// a limit's Remaining as it was at the refusal, never more than now.
func lowerRemaining(ref, local *redlimit.PolicyDecision) {
	if len(ref.Limits) != len(local.Limits) {
		return
	}
	for i := range ref.Limits {
		if local.Limits[i].Remaining < ref.Limits[i].Remaining {
			local.Limits[i].Remaining = ref.Limits[i].Remaining
		}
	}
}

// sameErr: both nil, or both of the same redlimit kind.
func sameErr(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	for _, kind := range []error{redlimit.ErrInvalidArgument, redlimit.ErrNotInitialized, redlimit.ErrUnavailable, redlimit.ErrCorrupt} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}

// TestPolicyDifferential runs random traces of keyed multi-limit calls
// (mixed algorithms, waits, reservations cancelled, releases, reads,
// policy changes keeping or resetting the keys' states, time steps on one
// injected clock) through the memory store (algorithm.AcquireAll and each
// algorithm's Go rules) and Redis (policy.lua and each algorithm's Lua),
// and requires the same answer to every call.
func TestPolicyDifferential(t *testing.T) {
	n := policyDifferential(t, randomPolicy, *policyTraces)
	if n.granted == 0 || n.reserved == 0 || n.multiReserved == 0 || n.refused == 0 || n.multiRefused == 0 || n.local == 0 || n.full == 0 || n.cancelled == 0 || n.multiCancelled == 0 || n.released == 0 || n.changed == 0 {
		t.Fatal("traces missed a kind of answer")
	}
}

// TestPolicyDifferentialFastPath: the random traces of
// TestPolicyDifferential on policies of one fixed window, sliding counter,
// token bucket, leaky bucket or sliding log, whose acquire has a path of its own in policy.lua (granted at
// once, or refused, on a state without reservations) beside the general
// one (reservations, cancels, releases, states of other versions), both
// taken.
func TestPolicyDifferentialFastPath(t *testing.T) {
	for _, alg := range []redlimit.Algorithm{redlimit.FixedWindow, redlimit.SlidingCounter, redlimit.TokenBucket, redlimit.LeakyBucket, redlimit.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			oneLimit := func(rng *rand.Rand) []redlimit.Config {
				rate := 1 + rng.Int64N(8)
				interval := time.Duration(1+rng.IntN(40)) * 5 * time.Millisecond
				c := redlimit.PerInterval(rate, interval).WithAlgorithm(alg)
				switch alg {
				case redlimit.TokenBucket:
					c.Burst = 1 + rng.Int64N(10)
				case redlimit.LeakyBucket:
					c.Capacity = 1 + rng.Int64N(10)
				}
				return []redlimit.Config{c}
			}
			n := policyDifferential(t, oneLimit, *policyTraces/2)
			// A leaky bucket hands nothing back on release, and its queue fills.
			leaky := alg == redlimit.LeakyBucket
			if n.granted == 0 || n.reserved == 0 || n.refused == 0 || n.cancelled == 0 || (n.released == 0) != leaky || (n.full == 0) == leaky || n.changed == 0 {
				t.Fatal("traces missed a kind of answer")
			}
		})
	}
}

// policyCounts counts the answers of policyDifferential's traces by kind.
type policyCounts struct {
	granted, refused, reserved, full, cancelled, released, changed, multiRefused, local int
	multiReserved, multiCancelled                                                       int // reservations on several limits, and those handed back
}

// policyDifferential runs traces random traces of TestPolicyDifferential,
// its policies made by randomPolicy.
func policyDifferential(t *testing.T, randomPolicy func(*rand.Rand) []redlimit.Config, traces int) policyCounts {
	rdb := redistest.Start(t).Client(t)
	seed := *policySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -policy.seed=N -policy.traces=1)", seed, seed+uint64(traces)-1)
	var granted, refused, reserved, full, cancelled, released, changed, multiRefused, local int
	var multiReserved, multiCancelled int
	ctx := context.Background()
	for i := 0; i < traces; i++ {
		s := seed + uint64(i)
		rng := rand.New(rand.NewPCG(s, 0x9011c7))
		clk := clock.NewFake(storetest.T0.Add(time.Duration(rng.Int64N(int64(time.Second)))))
		red := newStore(t, rdb, redisstore.WithTimeSource(clk), redisstore.WithPolicyMaxAge(time.Hour))
		mem := memstore.New(memstore.WithTimeSource(clk))
		stores := []redlimit.PolicyStore{mem, red}
		limits := randomPolicy(rng)
		var known [2]redlimit.PolicyConfig
		for j, st := range stores {
			p, _, err := st.SetPolicy(ctx, "p", redlimit.PolicyConfig{Limits: limits}, redlimit.SetIfAbsent)
			if err != nil {
				t.Fatal(err)
			}
			known[j] = p
		}
		keys := []string{"k0", "k1", "k2"}
		type resv struct {
			key   string
			at    time.Time
			n     int64
			multi bool
		}
		var resvs []resv
		fail := func(op string, a, b any) {
			t.Helper()
			t.Fatalf("seed %d, %s on %v:\nmemory %+v\nredis  %+v", s, op, limits, a, b)
		}
		for op := 0; op < 80; op++ {
			key := redlimit.PolicyKey{Policy: "p", Key: keys[rng.IntN(len(keys))]}
			if *policyLog {
				t.Logf("%v %s", clk.Now().Sub(storetest.T0), key.Key)
			}
			switch x := rng.IntN(20); {
			case x < 12:
				n := int64(1)
				if rng.IntN(3) == 0 {
					n = 1 + rng.Int64N(4)
				}
				wait := time.Duration(0)
				switch rng.IntN(4) {
				case 0:
					wait = time.Duration(rng.IntN(60)) * time.Millisecond
				case 1:
					wait = -1
				}
				if n > known[0].MaxPermits() {
					// Refused before any state is read by the Redis
					// store, after it by the memory store: a key of its own.
					key.Key = "too-many"
				}
				var ds [2]redlimit.PolicyDecision
				var errs [2]error
				before := red.Stats().LocalKeyRefusals
				for j, st := range stores {
					ds[j], errs[j] = st.AcquireKey(ctx, key, known[j], n, wait)
				}
				if *policyLog {
					t.Logf("  acquire %d wait %v: %+v %v", n, wait, ds[0], errs[0])
					t.Logf("  state %q", rdb.Get(ctx, red.Prefix()+"{p%:"+key.Key+"}").Val())
				}
				if red.Stats().LocalKeyRefusals > before {
					// Answered by the refusal cache: a limit that
					// regained permits since the refusal shows the
					// refusal's Remaining (package refusalcache).
					local++
					lowerRemaining(&ds[0], &ds[1])
				}
				if !sameErr(errs[0], errs[1]) || errs[0] == nil && !sameDecision(ds[0], ds[1]) {
					fail(fmt.Sprintf("acquire %d wait %v", n, wait), fmt.Sprint(ds[0], errs[0]), fmt.Sprint(ds[1], errs[1]))
				}
				switch d := ds[0]; {
				case errs[0] != nil:
				case d.Granted && d.Wait > 0:
					reserved++
					if len(d.Limits) > 1 {
						multiReserved++
					}
					resvs = append(resvs, resv{key.Key, d.At, n, len(d.Limits) > 1})
				case d.Granted:
					granted++
				case d.Full:
					full++
				default:
					refused++
					if len(d.Limits) > 1 {
						multiRefused++
					}
				}
			case x < 14:
				var ds [2]redlimit.PolicyDecision
				var errs [2]error
				for j, st := range stores {
					ds[j], errs[j] = st.StatusKey(ctx, key, known[j])
				}
				if !sameErr(errs[0], errs[1]) || errs[0] == nil && !sameDecision(ds[0], ds[1]) {
					fail("status", fmt.Sprint(ds[0], errs[0]), fmt.Sprint(ds[1], errs[1]))
				}
			case x < 15 && len(resvs) > 0:
				k := rng.IntN(len(resvs))
				r := resvs[k]
				resvs = append(resvs[:k], resvs[k+1:]...)
				var got [2]int64
				var errs [2]error
				for j, st := range stores {
					got[j], errs[j] = st.CancelKey(ctx, redlimit.PolicyKey{Policy: "p", Key: r.key}, known[j], r.at, r.n)
				}
				if got[0] != got[1] || !sameErr(errs[0], errs[1]) {
					fail("cancel", fmt.Sprint(got[0], errs[0]), fmt.Sprint(got[1], errs[1]))
				}
				if got[0] > 0 {
					cancelled++
					if r.multi {
						multiCancelled++
					}
				}
			case x < 16:
				n := 1 + rng.Int64N(3)
				var got [2]int64
				var errs [2]error
				for j, st := range stores {
					got[j], errs[j] = st.ReleaseKey(ctx, key, known[j], n)
				}
				if got[0] != got[1] || !sameErr(errs[0], errs[1]) {
					fail("release", fmt.Sprint(got[0], errs[0]), fmt.Sprint(got[1], errs[1]))
				}
				if got[0] > 0 {
					released++
				}
			case x < 17 && rng.IntN(3) == 0:
				how := redlimit.SetKeepState
				if rng.IntN(3) == 0 {
					how = redlimit.SetResetState
				}
				limits = randomPolicy(rng)
				for j, st := range stores {
					p, _, err := st.SetPolicy(ctx, "p", redlimit.PolicyConfig{Limits: limits}, how)
					if err != nil {
						t.Fatal(err)
					}
					known[j] = p
				}
				if *policyLog {
					t.Logf("  set %v %v", how, limits)
				}
				if known[0].Version != known[1].Version || !known[0].Since.Equal(known[1].Since) {
					fail("set", known[0], known[1])
				}
				resvs = nil
				changed++
			default:
				clk.Advance(time.Duration(rng.Int64N(int64(30 * time.Millisecond))))
			}
		}
	}
	t.Logf("%d traces, every answer identical: %d granted, %d reserved (%d on several limits), %d refused (%d by several limits, %d by the refusal cache), %d full, %d cancelled (%d on several limits), %d released, %d policy changes",
		traces, granted, reserved, multiReserved, refused, multiRefused, local, full, cancelled, multiCancelled, released, changed)
	return policyCounts{granted: granted, refused: refused, reserved: reserved, full: full, cancelled: cancelled, released: released,
		changed: changed, multiRefused: multiRefused, local: local, multiReserved: multiReserved, multiCancelled: multiCancelled}
}

// TestPolicyStatesAcrossVersions: a bucket's state does not repeat the
// limits it is counted under (those of its version, kept in the policy's
// hash), nor does a window's short form its windows' grid, nor an inline
// sliding log its expiry (its version's interval): after two changes
// keeping the states, a key untouched meanwhile is still counted as the
// memory store counts it.
func TestPolicyStatesAcrossVersions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps [][]redlimit.Config
	}{
		{"buckets", [][]redlimit.Config{
			{redlimit.TokenBucketConfig(10, time.Second, 10), redlimit.LeakyBucketConfig(5, time.Second, 8)},
			{redlimit.TokenBucketConfig(10, time.Second, 20), redlimit.LeakyBucketConfig(5, time.Second, 9)},
			{redlimit.TokenBucketConfig(20, time.Second, 20), redlimit.LeakyBucketConfig(7, time.Second, 9)},
		}},
		{"windows", [][]redlimit.Config{
			{redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow), redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingCounter)},
			{redlimit.PerInterval(10, 3*time.Second).WithAlgorithm(redlimit.FixedWindow), redlimit.PerInterval(10, 2*time.Second).WithAlgorithm(redlimit.SlidingCounter)},
			{redlimit.PerInterval(20, 700*time.Millisecond).WithAlgorithm(redlimit.FixedWindow), redlimit.PerInterval(10, 1500*time.Millisecond).WithAlgorithm(redlimit.SlidingCounter)},
		}},
		// An inline log's expiry is one interval of its version after
		// its newest entry: the first log, full, caps the waits at that
		// expiry, not at one of the longer intervals since.
		{"sliding logs", [][]redlimit.Config{
			{redlimit.PerSecond(4), redlimit.PerInterval(10, 2*time.Second)},
			{redlimit.PerInterval(4, 3*time.Second), redlimit.PerInterval(10, 1500*time.Millisecond)},
			{redlimit.PerInterval(4, 5*time.Second), redlimit.PerInterval(20, 2500*time.Millisecond)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client(t)
			ctx := context.Background()
			// 1.5s into a grid of 6s: the windows of 1s and of 2s or 3s
			// that hold an instant start apart (0.5s and 1.5s before it).
			t0 := time.UnixMicro(storetest.T0.UnixMicro()/6_000_000*6_000_000 + 1_500_000)
			clk := clock.NewFake(t0)
			red := newStore(t, rdb, redisstore.WithTimeSource(clk), redisstore.WithPolicyMaxAge(time.Hour))
			mem := memstore.New(memstore.WithTimeSource(clk))
			stores := []redlimit.PolicyStore{mem, red}
			key := redlimit.PolicyKey{Policy: "b", Key: "k"}
			var known [2]redlimit.PolicyConfig
			for i, limits := range tc.steps {
				for j, st := range stores {
					p, _, err := st.SetPolicy(ctx, "b", redlimit.PolicyConfig{Limits: limits}, redlimit.SetKeepState)
					if err != nil {
						t.Fatal(err)
					}
					known[j] = p
				}
				if i == 0 {
					for j, st := range stores {
						if _, err := st.AcquireKey(ctx, key, known[j], 4, 0); err != nil {
							t.Fatal(err)
						}
					}
					// A bucket's last and owed; a window's last and count;
					// a log's last and its one entry's permits.
					if state := rdb.Get(ctx, red.Prefix()+"{b%:k}").Val(); strings.Count(state, " ") != 3 {
						t.Fatalf("state %q: want each limit's last and one number", state)
					}
				}
				clk.Advance(30 * time.Millisecond)
			}
			for call := 0; call < 3; call++ {
				var ds [2]redlimit.PolicyDecision
				for j, st := range stores {
					var err error
					if ds[j], err = st.AcquireKey(ctx, key, known[j], 3, 0); err != nil {
						t.Fatal(err)
					}
				}
				if !sameDecision(ds[0], ds[1]) {
					t.Fatalf("call %d:\nmemory %+v\nredis  %+v", call, ds[0], ds[1])
				}
			}
		})
	}
}
