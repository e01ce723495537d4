package memstore

import (
	"context"
	"errors"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// probes returns a new key in each of the policy's shards, so that a call
// on each sweeps every shard that is due.
func (s *Store) probes(round string) []string {
	var keys []string
	seen := map[uint64]bool{}
	for i := 0; len(seen) < keyShards; i++ {
		k := round + "-" + strconv.Itoa(i)
		if sh := maphash.String(s.seed, k) & (keyShards - 1); !seen[sh] {
			seen[sh] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// TestPolicyIdleKeysEvicted: a key's state stays while it can change an
// answer and is evicted once it cannot, by the sweeps the calls pay for,
// in both layouts (a token bucket's compact records, and whole states).
func TestPolicyIdleKeysEvicted(t *testing.T) {
	ctx := context.Background()
	bucket := redlimit.TokenBucketConfig(1, 20*time.Second, 10) // a permit owed for 20 s
	for name, limits := range map[string][]redlimit.Config{
		"token-bucket": {bucket},
		"two-limits":   {bucket, redlimit.PerInterval(10, 20*time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			s := New(WithTimeSource(clk))
			p, err := redlimit.NewPolicy(s, "users", limits, redlimit.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			take := func(keys ...string) {
				t.Helper()
				for _, k := range keys {
					if r, err := p.Key(k).TryAcquire(ctx, 1); err != nil || !r.Allowed {
						t.Fatalf("key %q: %+v, %v", k, r, err)
					}
				}
			}
			const n = 1000
			for i := range n {
				take("user-" + strconv.Itoa(i))
			}
			if got := s.PolicyKeys("users"); got != n {
				t.Fatalf("%d keys held, want %d", got, n)
			}
			// At 10 s every shard is due a sweep, and the keys still owe.
			clk.Advance(10 * time.Second)
			take(s.probes("a")...)
			if got := s.PolicyKeys("users"); got != n+keyShards {
				t.Fatalf("at 10 s: %d keys held, want %d", got, n+keyShards)
			}
			// At 20 s the first keys are whole again: swept, while the
			// probes of 10 s stay.
			clk.Advance(10 * time.Second)
			take(s.probes("b")...)
			if got := s.PolicyKeys("users"); got != 2*keyShards {
				t.Fatalf("at 20 s: %d keys held, want %d", got, 2*keyShards)
			}
			// An evicted key starts whole.
			if r, err := p.Key("user-0").Status(ctx); err != nil || r.Remaining != 10 {
				t.Fatalf("an evicted key: %+v, %v; want 10 left", r, err)
			}
			if ok, err := p.Delete(ctx); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if got := s.PolicyKeys("users"); got != 0 {
				t.Fatalf("after Delete: %d keys held", got)
			}
		})
	}
}

// TestPolicyCompactAsLimiter: a key of a one-bucket policy, kept as a
// compact record, answers call for call as a limiter of the same limit
// (a whole algorithm.State; a PerClient limiter's client, whose state
// is brought to a config change by its next call, as a key's is) on
// random traces of grants, reservations,
// cancellations, releases, status reads and SetRate keeping or resetting
// the state.
func TestPolicyCompactAsLimiter(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []redlimit.Algorithm{redlimit.TokenBucket, redlimit.LeakyBucket} {
		t.Run(string(alg), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(14, 3))
			cfgOf := func() redlimit.Config {
				rate, room := 1+rng.Int64N(4), 2+rng.Int64N(6)
				iv := time.Duration(1+rng.IntN(3)) * time.Second
				if alg == redlimit.TokenBucket {
					return redlimit.TokenBucketConfig(rate, iv, room)
				}
				return redlimit.LeakyBucketConfig(rate, iv, room)
			}
			for trace := range 50 {
				clk := clock.NewFake(t0)
				s := New(WithTimeSource(clk))
				cfg := cfgOf()
				lk := redlimit.Key{Name: "ref", Client: "k"}
				pk := redlimit.PolicyKey{Policy: "p", Key: "k"}
				set := func(how redlimit.SetMode) (redlimit.Config, redlimit.PolicyConfig) { return setTwins(t, s, cfg, how) }
				known, pknown := set(redlimit.SetResetState)
				var ats []time.Time // reservations not handed back
				for step := range 80 {
					where := func() string { return "trace " + strconv.Itoa(trace) + " step " + strconv.Itoa(step) }
					switch op := rng.IntN(10); {
					case op < 4:
						n := 1 + rng.Int64N(min(known.MaxPermits(), 3))
						wait := time.Duration(0)
						if rng.IntN(2) == 0 {
							wait = time.Duration(rng.IntN(4)) * time.Second
						}
						want, err1 := s.Acquire(ctx, lk, known, n, wait)
						got, err2 := s.AcquireKey(ctx, pk, pknown, n, wait)
						if err1 != nil || err2 != nil || got.Granted != want.Granted || got.Wait != want.Wait || got.Limits[0].Remaining != want.Remaining || got.Full != want.Full || !got.At.Equal(want.At) {
							t.Fatalf("%s: Acquire(%d, %v): key %+v, %v; limiter %+v, %v", where(), n, wait, got, err2, want, err1)
						}
						if got.Granted && got.Wait > 0 {
							ats = append(ats, got.At)
						}
					case op < 5 && len(ats) > 0:
						i := rng.IntN(len(ats))
						at := ats[i]
						ats = append(ats[:i], ats[i+1:]...)
						want, err1 := s.Cancel(ctx, lk, known, at, 1)
						got, err2 := s.CancelKey(ctx, pk, pknown, at, 1)
						if err1 != nil || err2 != nil || got != want {
							t.Fatalf("%s: Cancel: key %d, %v; limiter %d, %v", where(), got, err2, want, err1)
						}
					case op < 6:
						want, err1 := s.Release(ctx, lk, known, 1, time.Time{})
						got, err2 := s.ReleaseKey(ctx, pk, pknown, 1)
						if err1 != nil || err2 != nil || got != want {
							t.Fatalf("%s: Release: key %d, %v; limiter %d, %v", where(), got, err2, want, err1)
						}
					case op < 7:
						want, _, err1 := s.Available(ctx, lk, known)
						got, err2 := s.StatusKey(ctx, pk, pknown)
						if err1 != nil || err2 != nil || got.Limits[0].Remaining != want {
							t.Fatalf("%s: Available: key %+v, %v; limiter %d, %v", where(), got, err2, want, err1)
						}
					case op < 8 && rng.IntN(4) == 0:
						cfg = cfgOf()
						how := redlimit.SetKeepState
						if rng.IntN(3) == 0 {
							how, ats = redlimit.SetResetState, nil
						}
						known, pknown = set(how)
					default:
						clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
					}
				}
			}
		})
	}
}

// TestPolicyConcurrentSetLimits: calls on a few keys race with SetLimits
// keeping the state (records widened and compacted again) and with
// status reads; at a standing clock no key is granted more than the
// largest burst, as no time refills a bucket and a change carries its
// tokens over, capped.
func TestPolicyConcurrentSetLimits(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	a, b := redlimit.TokenBucketConfig(1, time.Minute, 10), redlimit.TokenBucketConfig(2, time.Minute, 6)
	p, err := redlimit.NewPolicy(s, "race", []redlimit.Config{a}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	const keys, workers, calls = 8, 4, 200
	granted := make([][keys]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				k := p.Key("k" + strconv.Itoa(i%keys))
				r, err := k.TryAcquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					granted[w][i%keys]++
				}
				if _, err := k.Status(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			limits := []redlimit.Config{a}
			if i%2 == 0 {
				limits = []redlimit.Config{b}
			}
			if err := p.SetLimits(ctx, limits); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	for k := range keys {
		var sum int64
		for w := range workers {
			sum += granted[w][k]
		}
		if sum > 10 || sum < 1 {
			t.Errorf("key k%d: %d granted at one instant; want 1..10", k, sum)
		}
	}
}

// TestPolicyLayoutChangeKeepsState: a policy changed between one bucket
// (records) and several limits (whole states), keeping the state, keeps
// each key's count.
func TestPolicyLayoutChangeKeepsState(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	bucket := redlimit.TokenBucketConfig(1, time.Hour, 10)
	p, err := redlimit.NewPolicy(s, "layout", []redlimit.Config{bucket}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Key("k").TryAcquire(ctx, 3); err != nil || !r.Allowed {
		t.Fatalf("3 permits: %+v, %v", r, err)
	}
	remaining := func(want ...int64) {
		t.Helper()
		r, err := p.Key("k").Status(ctx)
		if err != nil || len(r.Limits) != len(want) {
			t.Fatalf("status: %+v, %v; want %v left", r, err, want)
		}
		for i, w := range want {
			if r.Limits[i].Remaining != w {
				t.Fatalf("status: %+v; want %v left", r.Limits, want)
			}
		}
	}
	if err := p.SetLimits(ctx, []redlimit.Config{bucket, redlimit.PerMinute(5)}); err != nil {
		t.Fatal(err)
	}
	remaining(7, 5)
	if r, err := p.Key("k").TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("1 permit on two limits: %+v, %v", r, err)
	}
	if err := p.SetLimits(ctx, []redlimit.Config{bucket}); err != nil {
		t.Fatal(err)
	}
	remaining(6)
	if r, err := p.Key("k").TryAcquire(ctx, 1); err != nil || !r.Allowed || r.Remaining != 5 {
		t.Fatalf("back on one bucket: %+v, %v; want 5 left", r, err)
	}
}

// TestPolicyKeyedCallsKeepApart: calls alternating between two policies
// (the store remembers the one found last) and between keys each count
// on their own, and every decision keeps its own Limits, whatever the
// calls made after it.
func TestPolicyKeyedCallsKeepApart(t *testing.T) {
	ctx := context.Background()
	s := New(WithTimeSource(clock.NewFake(t0)))
	a := []redlimit.Config{redlimit.TokenBucketConfig(100, time.Minute, 100)}
	b := []redlimit.Config{redlimit.TokenBucketConfig(50, time.Minute, 50), redlimit.PerMinute(60)}
	var known [2]redlimit.PolicyConfig
	for i, limits := range [][]redlimit.Config{a, b} {
		stored, _, err := s.SetPolicy(ctx, "p"+strconv.Itoa(i), redlimit.PolicyConfig{Limits: limits}, redlimit.SetKeepState)
		if err != nil {
			t.Fatal(err)
		}
		known[i] = stored
	}
	var ds []redlimit.PolicyDecision
	for i := range 40 {
		for j := range known {
			for _, key := range []string{"x", "y"} {
				d, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "p" + strconv.Itoa(j), Key: key}, known[j], 1, 0)
				if err != nil || !d.Granted {
					t.Fatalf("call %d on p%d/%s: %+v, %v", i, j, key, d, err)
				}
				ds = append(ds, d)
			}
		}
	}
	for n, d := range ds {
		i, j := n/4, n/2%2
		if len(d.Limits) != len(known[j].Limits) || cap(d.Limits) != len(d.Limits) {
			t.Fatalf("decision %d: %d limits (cap %d), want %d", n, len(d.Limits), cap(d.Limits), len(known[j].Limits))
		}
		want := int64(99 - i)
		if j == 1 {
			want = int64(49 - i)
		}
		if d.Limits[0].Remaining != want || !d.Policy.SameLimits(known[j]) {
			t.Fatalf("decision %d (p%d): %d left under %v, want %d under %v", n, j, d.Limits[0].Remaining, d.Policy.Limits, want, known[j].Limits)
		}
	}
	// A policy deleted and stored again is the same name's, found anew.
	if ok, err := s.DeletePolicy(ctx, "p0"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "p0", Key: "x"}, redlimit.PolicyConfig{}, 1, 0); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("a deleted policy: %v, want ErrNotInitialized", err)
	}
	if d, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "p0", Key: "x"}, redlimit.PolicyConfig{Limits: a}, 1, 0); err != nil || d.Limits[0].Remaining != 99 {
		t.Fatalf("a policy restored after its deletion: %+v, %v; want 99 left", d, err)
	}
	if _, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "p0", Key: ""}, known[0], 1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("an empty key: %v, want ErrInvalidArgument", err)
	}
	if _, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "", Key: "x"}, known[0], 1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("an empty policy name: %v, want ErrInvalidArgument", err)
	}
}

// TestPolicyRecordsAsLimiter: many keys of a one-bucket policy answer
// call for call as a PerClient limiter's clients of the same limit, on a
// random trace of grants, reservations, releases, status reads, config
// changes, then idle time (evictions, records compacted); and so they do
// when keys' hashes collide (hashMask narrowed), the keys whose hash
// another's record holds keeping whole states.
func TestPolicyRecordsAsLimiter(t *testing.T) {
	ctx := context.Background()
	forHashMasks(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 5))
		clk := clock.NewFake(t0)
		s := New(WithTimeSource(clk))
		cfg := redlimit.TokenBucketConfig(3, time.Second, 5)
		set := func(how redlimit.SetMode) (redlimit.Config, redlimit.PolicyConfig) { return setTwins(t, s, cfg, how) }
		known, pknown := set(redlimit.SetResetState)
		keys := make([]string, 600)
		for i := range keys {
			keys[i] = "k-" + strconv.Itoa(i)
		}
		for step := range 20_000 {
			key := keys[rng.IntN(len(keys))]
			lk, pk := redlimit.Key{Name: "ref", Client: key}, redlimit.PolicyKey{Policy: "p", Key: key}
			switch op := rng.IntN(100); {
			case op < 60:
				wait := time.Duration(0)
				if rng.IntN(4) == 0 {
					wait = time.Duration(rng.IntN(3)) * time.Second
				}
				want, err1 := s.Acquire(ctx, lk, known, 1, wait)
				got, err2 := s.AcquireKey(ctx, pk, pknown, 1, wait)
				if err1 != nil || err2 != nil || got.Granted != want.Granted || got.Wait != want.Wait || got.Limits[0].Remaining != want.Remaining || !got.At.Equal(want.At) {
					t.Fatalf("step %d, %s: Acquire(1, %v): key %+v, %v; limiter %+v, %v", step, key, wait, got, err2, want, err1)
				}
			case op < 70:
				want, err1 := s.Release(ctx, lk, known, 1, time.Time{})
				got, err2 := s.ReleaseKey(ctx, pk, pknown, 1)
				if err1 != nil || err2 != nil || got != want {
					t.Fatalf("step %d, %s: Release: key %d, %v; limiter %d, %v", step, key, got, err2, want, err1)
				}
			case op < 85:
				want, _, err1 := s.Available(ctx, lk, known)
				got, err2 := s.StatusKey(ctx, pk, pknown)
				if err1 != nil || err2 != nil || got.Limits[0].Remaining != want {
					t.Fatalf("step %d, %s: Available: key %+v, %v; limiter %d, %v", step, key, got, err2, want, err1)
				}
			case op < 86 && clk.Now().Before(t0.Add(sweepEvery)):
				// Changed only before any sweep: a state swept
				// (whole) and one kept differ under a new config.
				cfg = redlimit.TokenBucketConfig(1+rng.Int64N(4), time.Second, 2+rng.Int64N(6))
				known, pknown = set(redlimit.SetKeepState)
			default:
				clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			}
		}
		if n := s.PolicyKeys("p"); n > len(keys) {
			t.Fatalf("%d keys held, more than the %d used", n, len(keys))
		}
	})
}

// TestPolicyRecordsShrink: once most of a busy policy's keys are idle and
// swept, the shards' records are made anew, smaller, and the keys still
// held keep their state.
func TestPolicyRecordsShrink(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	p, err := redlimit.NewPolicy(s, "users", []redlimit.Config{redlimit.TokenBucketConfig(1, 20*time.Second, 10)}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	take := func(n int64, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if r, err := p.Key(k).TryAcquire(ctx, n); err != nil || !r.Allowed {
				t.Fatalf("key %q: %+v, %v", k, r, err)
			}
		}
	}
	const many = 8 * 4 * minSweepSize * keyShards // more than 4*minSweepSize a shard
	for i := range many {
		take(1, "u-"+strconv.Itoa(i))
	}
	clk.Advance(15 * time.Second)
	kept := s.probes("kept")
	take(5, kept...)
	clk.Advance(sweepEvery) // the first keys whole again, each shard due a sweep
	take(1, s.probes("sweep")...)
	if got, want := s.PolicyKeys("users"), 2*keyShards; got != want {
		t.Fatalf("%d keys held, want %d", got, want)
	}
	pol := s.policyOf("users", false)
	for i := range pol.keys {
		if c := &pol.keys[i].c; c.waste != 0 || len(c.recs) != c.len() || len(c.free) != 0 {
			t.Fatalf("shard %d: %d records in %d slots (%d free), %d key bytes wasted; want them made anew", i, c.len(), len(c.recs), len(c.free), c.waste)
		}
	}
	for _, k := range kept {
		if r, err := p.Key(k).Status(ctx); err != nil || r.Remaining != 5 {
			t.Fatalf("kept key %q: %+v, %v; want 5 left", k, r, err)
		}
	}
	if r, err := p.Key("u-1").Status(ctx); err != nil || r.Remaining != 10 {
		t.Fatalf("an evicted key: %+v, %v; want 10 left", r, err)
	}
}

// setTwins sets cfg as limiter "ref" (PerClient) and as the one limit of
// policy "p" on s, the same way (how): twins whose keys must decide alike.
func setTwins(t *testing.T, s *Store, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, redlimit.PolicyConfig) {
	t.Helper()
	c, _, err := s.SetConfig(context.Background(), "ref", cfg.WithMode(redlimit.PerClient), how)
	if err != nil {
		t.Fatal(err)
	}
	pc, _, err := s.SetPolicy(context.Background(), "p", redlimit.PolicyConfig{Limits: []redlimit.Config{cfg}}, how)
	if err != nil {
		t.Fatal(err)
	}
	return c, pc
}

// TestPolicyTakeAsWholePath: AcquireKey's shortcut on a token bucket's
// records (take) answers as the whole path does, call by call, over a
// random trace of calls, waits, hand-backs and config changes, on two
// stores of one clock, one of them without the shortcut.
func TestPolicyTakeAsWholePath(t *testing.T) {
	ctx := context.Background()
	forHashMasks(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(16, 6))
		clk := clock.NewFake(t0)
		fast, whole := twinStores(clk)
		stores := []*Store{fast, whole}
		var known redlimit.PolicyConfig
		set := func(cfgs ...redlimit.Config) {
			t.Helper()
			for _, s := range stores {
				pc, _, err := s.SetPolicy(ctx, "p", redlimit.PolicyConfig{Limits: cfgs}, redlimit.SetKeepState)
				if err != nil {
					t.Fatal(err)
				}
				known = pc
			}
		}
		set(redlimit.TokenBucketConfig(3, time.Second, 5))
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = "k-" + strconv.Itoa(i)
		}
		for step := range 20_000 {
			pk := redlimit.PolicyKey{Policy: "p", Key: keys[rng.IntN(len(keys))]}
			switch op := rng.IntN(100); {
			case op < 65:
				n := 1 + rng.Int64N(3)
				if rng.IntN(50) == 0 {
					n = 100 // more than the bucket holds: an error
				}
				wait := time.Duration(0)
				if rng.IntN(4) == 0 {
					wait = time.Duration(rng.IntN(3)) * time.Second
				}
				got, err1 := fast.AcquireKey(ctx, pk, known, n, wait)
				want, err2 := whole.AcquireKey(ctx, pk, known, n, wait)
				if (err1 == nil) != (err2 == nil) || !sameDecision(got, want) {
					t.Fatalf("step %d, %s: AcquireKey(%d, %v): %+v, %v; whole path %+v, %v", step, pk.Key, n, wait, got, err1, want, err2)
				}
			case op < 75:
				got, err1 := fast.ReleaseKey(ctx, pk, known, 1)
				want, err2 := whole.ReleaseKey(ctx, pk, known, 1)
				if err1 != nil || err2 != nil || got != want {
					t.Fatalf("step %d, %s: ReleaseKey: %d, %v; whole path %d, %v", step, pk.Key, got, err1, want, err2)
				}
			case op < 85:
				got, err1 := fast.StatusKey(ctx, pk, known)
				want, err2 := whole.StatusKey(ctx, pk, known)
				if err1 != nil || err2 != nil || !sameDecision(got, want) {
					t.Fatalf("step %d, %s: StatusKey: %+v, %v; whole path %+v, %v", step, pk.Key, got, err1, want, err2)
				}
			case op < 86:
				// Another bucket, sometimes two limits or a window,
				// whose keys take the whole path; back to one bucket
				// next time.
				cfgs := otherLimits(rng)
				set(cfgs...)
			default:
				clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			}
		}
	})
}

// sameDecision reports whether two stores' decisions say the same.
func sameDecision(a, b redlimit.PolicyDecision) bool {
	if a.Granted != b.Granted || a.Full != b.Full || a.Refused != b.Refused || a.Wait != b.Wait ||
		!a.At.Equal(b.At) || !a.Now.Equal(b.Now) || len(a.Limits) != len(b.Limits) || !a.Policy.SameLimits(b.Policy) {
		return false
	}
	for i := range a.Limits {
		if a.Limits[i] != b.Limits[i] {
			return false
		}
	}
	return true
}

// TestPolicySteadyStateAllocatesNothing: a policy of one token bucket over
// many keys, each taking a permit from its full bucket, allocates nothing
// per call once every key has its record (Results showing the same share
// their Limits), and each Result still shows its own decision.
func TestPolicySteadyStateAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p, err := redlimit.NewPolicy(New(WithTimeSource(clk)), "users", []redlimit.Config{redlimit.TokenBucketConfig(10, time.Second, 10)}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "u-" + strconv.Itoa(i)
	}
	var last redlimit.Result
	round := func() {
		clk.Advance(time.Second) // every bucket full again
		for _, k := range keys {
			r, err := p.Key(k).TryAcquire(ctx, 1)
			if err != nil || !r.Allowed || r.Remaining != 9 || len(r.Limits) != 1 || r.Limits[0].Remaining != 9 || r.Limits[0].ResetAfter != 100*time.Millisecond {
				t.Fatalf("key %s: %+v, %v", k, r, err)
			}
			last = r
		}
	}
	round()
	// Fewer than one allocation a round of 1000 calls, beside the fake
	// clock's own.
	clocks := testing.AllocsPerRun(5, func() { clk.Advance(0) })
	if n := testing.AllocsPerRun(5, round); n != clocks {
		t.Errorf("%v allocations per round of %d calls, want %v (the fake clock's)", n, len(keys), clocks)
	}
	// A refusal shows its own state; the Result kept before does not change.
	for range 9 {
		if _, err := p.Key(keys[0]).TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := p.Key(keys[0]).TryAcquire(ctx, 1); err != nil || r.Allowed || r.Limits[0].Remaining != 0 || !r.Limits[0].Refused || r.RetryAfter != 100*time.Millisecond {
		t.Fatalf("refusal: %+v, %v", r, err)
	}
	if last.Limits[0].Remaining != 9 || last.Limits[0].Refused {
		t.Fatalf("a Result kept changed: %+v", last.Limits[0])
	}
}

// forHashMasks runs f twice: with keys' hashes apart, and with them forced
// to collide (hashMask narrowed), which sends keys whose hash another's
// record holds to whole states.
func forHashMasks(t *testing.T, f func(t *testing.T)) {
	for name, mask := range map[string]uint64{"hashes apart": ^uint64(0), "hashes colliding": 4*keyShards - 1} {
		t.Run(name, func(t *testing.T) {
			defer func(m uint64) { hashMask = m }(hashMask)
			hashMask = mask
			f(t)
		})
	}
}

// twinStores returns two stores on clk, whole with AcquireKey's shortcuts
// off. One seed: their keys fall in the same shards, swept at the same
// calls (a sweep shows under a config change).
func twinStores(clk clock.Clock) (fast, whole *Store) {
	fast, whole = New(WithTimeSource(clk)), New(WithTimeSource(clk))
	whole.noTake, whole.seed = true, fast.seed
	return fast, whole
}

// otherLimits is another bucket, sometimes two limits or a window, whose
// keys take the whole path.
func otherLimits(rng *rand.Rand) []redlimit.Config {
	cfgs := []redlimit.Config{redlimit.TokenBucketConfig(1+rng.Int64N(4), time.Second, 2+rng.Int64N(6))}
	switch rng.IntN(4) {
	case 0:
		cfgs = append(cfgs, redlimit.TokenBucketConfig(20, time.Minute, 20))
	case 1:
		cfgs[0].Algorithm = redlimit.FixedWindow
		cfgs[0].Burst = 0
	}
	return cfgs
}
