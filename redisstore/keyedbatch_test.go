package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
)

// keyedPolicies are the policies the batching tests run: every algorithm,
// alone and beside another.
var keyedPolicies = [][]redlimit.Config{
	{redlimit.PerSecond(3).WithAlgorithm(redlimit.FixedWindow)},
	{redlimit.TokenBucketConfig(2, time.Second, 4), redlimit.PerSecond(5).WithAlgorithm(redlimit.SlidingLog)},
	{redlimit.LeakyBucketConfig(2, time.Second, 3)},
	{redlimit.PerSecond(4).WithAlgorithm(redlimit.SlidingCounter), redlimit.PerMinute(10).WithAlgorithm(redlimit.FixedWindow)},
	{redlimit.PerSecond(2).WithAlgorithm(redlimit.SlidingLog)},
}

// fakeClockStore is a store on rdb under prefix whose time is a fake
// clock's, closed at the test's end.
func fakeClockStore(t *testing.T, rdb redis.UniversalClient, prefix string) (*Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.UnixMicro(1_700_000_000_123_456))
	s, err := New(rdb, WithTimeSource(clk), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// twinCall is a keyed call made alone on a twin policy's keys beside
// call j of work w made in a run.
type twinCall struct {
	keys []string
	args []any
	w    *keyWork
	j    int
}

// answeredAsAlone fails t unless every call of a run that has a twin
// answered as its twin does made alone now, after the run; it returns how
// many it compared.
func answeredAsAlone(t *testing.T, ctx context.Context, s *Store, twins []twinCall) int {
	t.Helper()
	for _, tw := range twins {
		if tw.w.Err != nil {
			t.Fatal(tw.w.Err)
		}
		want, err := s.runCall(ctx, keyedCall{keys: tw.keys, args: tw.args})
		if err != nil {
			t.Fatal(err)
		}
		if got := tw.w.Results[tw.j]; got != want {
			t.Fatalf("%s call %d %v: batched %q, alone %q", tw.w.Key, tw.j, tw.args[1:4], got, want)
		}
	}
	return len(twins)
}

// TestKeyedBatchEqualsAlone: random keyed calls made in shared runs
// (policy_batch, several calls of several keys and policies per run)
// answer exactly as the same calls made one run each (policy_main), on a
// twin of each policy, at the same instants.
func TestKeyedBatchEqualsAlone(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s, clk := fakeClockStore(t, rdb, "kb:")
	for i, limits := range keyedPolicies {
		for _, side := range []string{"a", "b"} {
			norm, err := redlimit.NormalizePolicy(limits)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.SetPolicy(ctx, fmt.Sprint(side, i), redlimit.PolicyConfig{Limits: norm}, redlimit.SetResetState); err != nil {
				t.Fatal(err)
			}
		}
	}
	entry := func(name string) *policyEntry {
		e, _, err := s.policyFor(ctx, name, &redlimit.PolicyConfig{}, false)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ops := []string{keyAcquire, keyAcquire, keyAcquire, keyStatus, keyRelease, keyCancel}
	rng := rand.New(rand.NewPCG(15, 17))
	calls, runs := 0, 0
	for range 300 {
		clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
		now := clk.Now().UnixMicro()
		works := map[string]*keyWork{}
		var order []*keyWork
		var twins []twinCall
		for range 1 + rng.IntN(16) {
			p, key, op := rng.IntN(len(keyedPolicies)), fmt.Sprint("k", rng.IntN(4)), ops[rng.IntN(len(ops))]
			n, arg := 1+rng.Int64N(3), int64(0)
			switch op {
			case keyAcquire:
				arg = []int64{0, 0, -1, 300_000, 2_000_000}[rng.IntN(5)]
			case keyCancel:
				arg = now + rng.Int64N(2_000_000)
			case keyRelease:
				arg = -1
			case keyStatus:
				n = 1
			}
			var pair [2][]string
			var args [2][]any
			for i, side := range []string{"a", "b"} {
				name := fmt.Sprint(side, p)
				e := entry(name)
				pair[i] = policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: name, Key: key}, len(e.cfg.Limits))
				args[i] = e.callArgs(op, n, arg, false, "", nil)
			}
			w := works[pair[0][0]]
			if w == nil {
				w = &keyWork{Key: pair[0][0]}
				works[w.Key] = w
				order = append(order, w)
			}
			w.Calls = append(w.Calls, keyedCall{keys: pair[0], args: args[0]})
			twins = append(twins, twinCall{keys: pair[1], args: args[1], w: w, j: len(w.Calls) - 1})
		}
		for _, w := range order {
			w.Results = make([]string, len(w.Calls))
		}
		s.runKeyed(ctx, order)
		runs++
		calls += answeredAsAlone(t, ctx, s, twins)
	}
	t.Logf("%d calls in %d runs answered as alone", calls, runs)
}

// TestKeyedBatchRunsOnOneKey: a run of alike acquires on one key (the
// calls of a busy key, sent as "=": each takes the state the one before
// left, written once for the key), with now and then a call unlike them
// among them, answers as the same calls made one run each, and leaves the
// key holding the same state, for every one-limit policy.
func TestKeyedBatchRunsOnOneKey(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s, clk := fakeClockStore(t, rdb, "kr:")
	limits := []redlimit.Config{
		redlimit.PerSecond(5).WithAlgorithm(redlimit.FixedWindow),
		redlimit.PerSecond(5).WithAlgorithm(redlimit.SlidingCounter),
		redlimit.TokenBucketConfig(5, time.Second, 5),
		redlimit.LeakyBucketConfig(5000, time.Second, 5),
		redlimit.PerSecond(5).WithAlgorithm(redlimit.SlidingLog),
	}
	entries := map[string]*policyEntry{}
	for i, l := range limits {
		for _, side := range []string{"a", "b"} {
			name := fmt.Sprint(side, i)
			if _, _, err := s.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: []redlimit.Config{l}}, redlimit.SetResetState); err != nil {
				t.Fatal(err)
			}
			e, _, err := s.policyFor(ctx, name, &redlimit.PolicyConfig{}, false)
			if err != nil {
				t.Fatal(err)
			}
			entries[name] = e
		}
	}
	// state is a key's state after its head ("EPOCH VERSION|"), which
	// names the policy's epoch: the twins' differ.
	state := func(key string) string {
		_, st, _ := strings.Cut(rdb.Get(ctx, key).Val(), "|")
		return st
	}
	rng := rand.New(rand.NewPCG(21, 23))
	calls, alike := 0, 0
	for step := range 400 {
		clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
		i := step % len(limits)
		an, bn := fmt.Sprint("a", i), fmt.Sprint("b", i)
		a, b := entries[an], entries[bn]
		var order []*keyWork
		var twins []twinCall
		for _, key := range []string{"k0", "k1"} {
			ka := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: an, Key: key}, 1)
			kb := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: bn, Key: key}, 1)
			w := &keyWork{Key: ka[0]}
			for range 1 + rng.IntN(12) {
				op, n, arg := keyAcquire, int64(1), int64(0)
				if rng.IntN(8) == 0 { // unlike the calls around it
					op, n, arg = []string{keyAcquire, keyStatus, keyRelease}[rng.IntN(3)], 2, -1
					if op != keyAcquire {
						n = 1
					}
				} else {
					alike++
				}
				w.Calls = append(w.Calls, keyedCall{keys: ka, args: a.callArgs(op, n, arg, false, "", nil)})
				twins = append(twins, twinCall{kb, b.callArgs(op, n, arg, false, "", nil), w, len(w.Calls) - 1})
			}
			w.Results = make([]string, len(w.Calls))
			order = append(order, w)
		}
		s.runKeyed(ctx, order)
		calls += answeredAsAlone(t, ctx, s, twins)
		for _, w := range order {
			twinKey := strings.Replace(w.Key, "{a", "{b", 1)
			if got, want := state(w.Key), state(twinKey); got != want {
				t.Fatalf("step %d: %s holds %q after the run, %s %q", step, w.Key, got, twinKey, want)
			}
			// A sliding log's list beside the state.
			list, twinList := w.Calls[0].keys[1], strings.Replace(w.Calls[0].keys[1], "{a", "{b", 1)
			if got, want := rdb.LRange(ctx, list, 0, -1).Val(), rdb.LRange(ctx, twinList, 0, -1).Val(); !slices.Equal(got, want) {
				t.Fatalf("step %d: list %s holds %q after the run, %s %q", step, list, got, twinList, want)
			}
		}
	}
	t.Logf("%d calls (%d alike) in runs of one key answered as alone", calls, alike)
}

// TestKeyedBatchTTL: on Redis's clock, a run of alike acquires on one key
// leaves the key's TTL where its state expires: a fixed window's the
// window's end, kept from the call before the run; a token bucket's moved
// on by every grant of the run.
func TestKeyedBatchTTL(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s, err := New(rdb, WithPrefix("kt:"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const runCalls = 5
	for _, tc := range []struct {
		name  string
		limit redlimit.Config
		// ttl is the key's TTL after 1+runCalls grants, from Redis's clock
		// just before and just after them.
		ttl func(before, after time.Time) (lo, hi time.Duration)
	}{
		{"fixed-window", redlimit.PerInterval(100, time.Hour).WithAlgorithm(redlimit.FixedWindow), func(before, after time.Time) (time.Duration, time.Duration) {
			end := after.Truncate(time.Hour).Add(time.Hour)
			return end.Sub(after), end.Sub(before) + time.Millisecond
		}},
		{"token-bucket", redlimit.TokenBucketConfig(100, time.Hour, 100), func(before, after time.Time) (time.Duration, time.Duration) {
			owed := (1 + runCalls) * time.Hour / 100 // each grant owes 36s
			return owed - after.Sub(before), owed + time.Millisecond
		}},
		// The log's state: an interval after the newest entry.
		{"sliding-log", redlimit.PerInterval(100, time.Hour).WithAlgorithm(redlimit.SlidingLog), func(before, after time.Time) (time.Duration, time.Duration) {
			return time.Hour - after.Sub(before), time.Hour + time.Millisecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := s.SetPolicy(ctx, tc.name, redlimit.PolicyConfig{Limits: []redlimit.Config{tc.limit}}, redlimit.SetResetState); err != nil {
				t.Fatal(err)
			}
			e, _, err := s.policyFor(ctx, tc.name, &redlimit.PolicyConfig{}, false)
			if err != nil {
				t.Fatal(err)
			}
			keys := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: tc.name, Key: "k"}, 1)
			for try := 0; ; try++ {
				if err := rdb.Del(ctx, keys...).Err(); err != nil {
					t.Fatal(err)
				}
				before := rdb.Time(ctx).Val()
				if _, err := s.runCall(ctx, keyedCall{keys: keys, args: e.callArgs(keyAcquire, 1, 0, false, "", nil)}); err != nil {
					t.Fatal(err)
				}
				w := &keyWork{Key: keys[0]}
				for range runCalls {
					w.Calls = append(w.Calls, keyedCall{keys: keys, args: e.callArgs(keyAcquire, 1, 0, false, "", nil)})
				}
				w.Results = make([]string, runCalls)
				s.runKeyed(ctx, []*keyWork{w})
				if w.Err != nil {
					t.Fatal(w.Err)
				}
				ttl := rdb.PTTL(ctx, keys[0]).Val()
				listTTL := ttl
				if tc.limit.Algorithm == redlimit.SlidingLog {
					// Two runs, so at most two entries: a log short
					// enough to live in the state string, no list beside.
					if st := rdb.Get(ctx, keys[0]).Val(); !strings.Contains(st, "|i") {
						t.Errorf("state %q; want the log inline", st)
					}
					if n := rdb.Exists(ctx, keys[1]).Val(); n != 0 {
						t.Errorf("a list beside an inline log (TTL %v)", rdb.PTTL(ctx, keys[1]).Val())
					}
				}
				after := rdb.Time(ctx).Val()
				// At most twice: both calls fall in one window but for
				// those around an hour's turn.
				if !before.Truncate(time.Hour).Equal(after.Truncate(time.Hour)) && try == 0 {
					continue
				}
				// Redis sets and reads a TTL on its clock in whole ms:
				// up to a ms less than the µs bounds.
				lo, hi := tc.ttl(before, after)
				lo -= time.Millisecond
				if ttl < lo || ttl > hi || listTTL < lo || listTTL > hi {
					t.Errorf("TTL %v (list %v) after a grant and a run of %d; want [%v, %v]", ttl, listTTL, runCalls, lo, hi)
				}
				break
			}
		})
	}
}

// TestKeyedCallsShareRuns: keyed calls made while another is in flight
// wait and go together in one run: on one key, and on several keys of one
// server, with every decision as the limits say.
func TestKeyedCallsShareRuns(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 32})
	defer rdb.Close()
	ctx := context.Background()
	s, err := New(rdb, WithRefusalCache(0), WithPolicyMaxAge(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := redlimit.NewPolicy(s, "shared", []redlimit.Config{redlimit.PerMinute(5).WithAlgorithm(redlimit.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	warmPolicy(ctx, t, s, p, "shared", "warm")
	stateKey := func(key string) string {
		return policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "shared", Key: key}, 1)[0]
	}
	// queued waits until want calls wait in the batcher on keys.
	queued := func(want int, keys ...string) {
		t.Helper()
		for {
			n := 0
			for _, k := range keys {
				n += s.keyBatch.Queued(stateKey(k))
			}
			if n == want {
				return
			}
			if n > want {
				// Fewer calls in flight than the test assumed:
				// waiting for want would never end.
				t.Fatalf("%d calls queued; want %d", n, want)
			}
			time.Sleep(time.Millisecond) // polled: the calls are on their way
		}
	}
	// idle waits until the runs of the subtest before are over (their
	// callers are answered first): a run still in flight would take the
	// calls the next subtest counts on being queued.
	idle := func() {
		for s.keyBatch.InFlight() != 0 {
			time.Sleep(time.Millisecond) // polled: the run is ending
		}
	}
	acquire := func(keys []string) []redlimit.Result {
		t.Helper()
		rs := make([]redlimit.Result, len(keys))
		errs := make([]error, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs[i], errs[i] = p.Key(k).TryAcquire(ctx, 1)
			}()
		}
		return func() []redlimit.Result {
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			return rs
		}()
	}

	t.Run("one key", func(t *testing.T) {
		// Redis stopped: the first call is in flight, the other 11 wait for
		// it, then go in one run.
		idle()
		srv.Pause()
		before := s.Stats()
		keys := make([]string, 12)
		for i := range keys {
			keys[i] = "one"
		}
		done := make(chan []redlimit.Result)
		go func() { done <- acquire(keys) }()
		queued(11, "one")
		srv.Resume()
		rs := <-done
		after := s.Stats()
		granted := grantedCount(rs)
		if granted != 5 {
			t.Errorf("%d of 12 calls granted by a limit of 5", granted)
		}
		if runs, calls := after.KeyRuns-before.KeyRuns, after.KeyRunCalls-before.KeyRunCalls; runs != 2 || calls != 12 {
			t.Errorf("12 calls in %d runs carrying %d; want 2 runs carrying 12", runs, calls)
		}
	})

	t.Run("many keys", func(t *testing.T) {
		// maxKeyedInFlight calls go at once and stall; the others, each on a key
		// of its own, wait and then go in one run.
		idle()
		srv.Pause()
		before := s.Stats()
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = fmt.Sprint("many-", i)
		}
		done := make(chan []redlimit.Result)
		go func() { done <- acquire(append(append([]string(nil), keys...), keys...)) }()
		queued(2*len(keys)-maxKeyedInFlight, keys...)
		srv.Resume()
		rs := <-done
		after := s.Stats()
		granted := grantedCount(rs)
		if granted != 2*len(keys) {
			t.Errorf("%d of %d calls granted (two per key, limit 5)", granted, 2*len(keys))
		}
		// The stalled calls' runs, then the others: every key's queue
		// goes in the first run that takes the waiting keys, and a key
		// whose first call stalled has its second in a run after it.
		runs, calls := after.KeyRuns-before.KeyRuns, after.KeyRunCalls-before.KeyRunCalls
		if calls != 2*int64(len(keys)) || runs > 2*maxKeyedInFlight+1 {
			t.Errorf("%d calls in %d runs carrying %d; want at most %d runs", 2*len(keys), runs, calls, 2*maxKeyedInFlight+1)
		}
	})
}

// TestKeyedBatchingCluster: concurrent keyed calls on random keys of a
// Cluster go without CROSSSLOT, each decided as the limits say, those on
// one key sharing runs.
func TestKeyedBatchingCluster(t *testing.T) {
	rdb := redistest.StartCluster(t, 3, 0).Client(t)
	ctx := context.Background()
	s, err := New(rdb, WithRefusalCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := redlimit.NewPolicy(s, "cl", []redlimit.Config{redlimit.PerMinute(3).WithAlgorithm(redlimit.SlidingCounter), redlimit.TokenBucketConfig(1, time.Minute, 4)})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	keys := make([]string, 40)
	for i := range keys {
		b := make([]byte, 1+rng.IntN(12))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		keys[i] = string(b) + fmt.Sprint(i) // distinct, with '{', '}', '%' and all
	}
	const each = 5
	granted := make([]int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, k := range keys {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := p.Key(k).TryAcquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					granted[i]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for i, g := range granted {
		if g != 3 {
			t.Errorf("key %q: %d of %d granted by a limit of 3", keys[i], g, each)
		}
	}
	if st := s.Stats(); st.KeyRunCalls != int64(len(keys)*each) {
		t.Errorf("KeyRunCalls %d; want %d", st.KeyRunCalls, len(keys)*each)
	}
}

// warmPolicy calls p on each of keys (on a Cluster: one per primary, so
// that each has the library) until the store holds the policy name in its
// cache for good: read after the subscription to its channel was made
// (which empties the cache, counted in gen) and nothing publishes after
// that.
func warmPolicy(ctx context.Context, t *testing.T, s *Store, p *redlimit.Policy, name string, keys ...string) {
	t.Helper()
	for cached := false; !cached; {
		for _, k := range keys {
			if _, err := p.Key(k).TryAcquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		s.pol.mu.Lock()
		cached = s.pol.gen >= 1 && s.pol.m[name] != nil
		s.pol.mu.Unlock()
	}
}

// grantedCount is how many of rs were granted.
func grantedCount(rs []redlimit.Result) int {
	n := 0
	for _, r := range rs {
		if r.Allowed {
			n++
		}
	}
	return n
}

// TestKeyedBatchSendsPolicyOnce: in a run, a call of the same policy as
// the call before sends only its op, permits and wait, one alike in those
// too only "=", and one of another policy sends its policy again
// (TestKeyedBatchEqualsAlone checks the answers of such runs).
func TestKeyedBatchSendsPolicyOnce(t *testing.T) {
	limits := limitsArg([]redlimit.Config{redlimit.PerSecond(10)})
	a, err := makeEntry(DefaultPrefix, "p", limits, 1, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := makeEntry(DefaultPrefix, "p", limits, 2, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	call := func(e *policyEntry, key string, n int64) keyedCall {
		k := redlimit.PolicyKey{Policy: "p", Key: key}
		return keyedCall{keys: policyStateKeys(DefaultPrefix, k, e.listKeys()), args: e.callArgs(keyAcquire, n, 0, false, "", nil)}
	}
	w := &keyWork{Calls: []keyedCall{call(a, "x", 1), call(a, "y", 2), call(b, "z", 3), call(a, "w", 4), call(a, "v", 4)}}
	keys, args := batchArgs([]*keyWork{w}, len(w.Calls), "now")
	if len(keys) != 10 {
		t.Fatalf("keys %q", keys)
	}
	full := len(w.Calls[0].args) - 1
	short := []any{2, policyArgsAt, keyAcquire, int64(2), int64(0)}
	// now; x in full; y short; z and w in full (each after another
	// policy); v as w.
	if len(args) != 1+3*(2+full)+len(short)+1 {
		t.Fatalf("args %v", args)
	}
	if got := args[len(args)-1]; got != repeatCall {
		t.Fatalf("the last call sent %v, want %q", got, repeatCall)
	}
	if got := args[1+2+full : 1+2+full+len(short)]; !reflect.DeepEqual(got, short) {
		t.Fatalf("the second call sent %v, want %v", got, short)
	}
}

// TestKeyedCallStateKey: the state key a call is sent with, made from the
// head its policy's entry keeps, is the key of its state, escapes and all.
func TestKeyedCallStateKey(t *testing.T) {
	limits := limitsArg([]redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow)})
	for _, k := range []redlimit.PolicyKey{{Policy: "p", Key: "k"}, {Policy: "a{b}%:", Key: "x}{%:y"}} {
		e, err := makeEntry("pre:", k.Policy, limits, 1, 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := e.call("pre:", k, keyAcquire, 1, 0, false, "", nil)
		if want := policyStateKey("pre:", k); len(c.keys) != 1 || c.keys[0] != want {
			t.Errorf("%+v: keys %q; want %q", k, c.keys, want)
		}
	}
}
