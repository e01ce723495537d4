package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
)

// The cases of keyed, multi-limit policies (redlimit.PolicyStore), for
// stores that declare Policies:
//
//   - a key of a one-limit policy is decided as a Limiter of that limit is,
//     under every algorithm, and every key has its own state, whatever its
//     bytes;
//   - a request against several limits is granted only if every one grants
//     it and is then charged to all; a refusal charges none and names the
//     limit whose retry-after is latest; each limit's Remaining, ResetAfter
//     and Wait are reported;
//   - a request that waits reserves on every limit at one instant (later
//     waiters queue after it) and, cancelled, hands all of it back;
//   - Release and a cancelled reservation hand permits back;
//   - SetPolicy's modes, Version and Epoch; DeletePolicy; a caller whose
//     copy of the policy is stale is decided under the stored one (once
//     the key was changed under it), and a store that lost the policy
//     decides under the caller's copy;
//   - bad keys, names, permits and policies are ErrInvalidArgument.

// policyStore returns the store as a PolicyStore; a store that is not one
// skips the case, so that a store declaring Full runs these cases as soon
// as it implements the interface.
func (e *env) policyStore() redlimit.PolicyStore {
	e.t.Helper()
	ps, ok := e.store.(redlimit.PolicyStore)
	if !ok {
		e.t.Skipf("%T does not implement redlimit.PolicyStore", e.store)
	}
	return ps
}

// policy returns a Policy of limits on the store, its limits stored.
func (e *env) policy(name string, limits ...redlimit.Config) *redlimit.Policy {
	e.t.Helper()
	p, err := redlimit.NewPolicy(e.policyStore(), name, limits, redlimit.WithClock(e.clock))
	if err != nil {
		e.t.Fatalf("NewPolicy(%q): %v", name, err)
	}
	if err := p.SetLimits(e.ctx, limits, redlimit.ResetState()); err != nil {
		e.t.Fatalf("SetLimits(%q): %v", name, err)
	}
	return p
}

func (e *env) keyTry(k redlimit.Keyed, n int64) redlimit.Result {
	e.t.Helper()
	r, err := k.TryAcquire(e.ctx, n)
	if err != nil {
		e.t.Fatalf("key %q: TryAcquire(%d): %v", k.Key(), n, err)
	}
	if len(r.Limits) == 0 {
		e.t.Fatalf("key %q: TryAcquire(%d) = %+v: no Limits", k.Key(), n, r)
	}
	return r
}

func (e *env) keyStatus(k redlimit.Keyed) redlimit.Result {
	e.t.Helper()
	r, err := k.Status(e.ctx)
	if err != nil {
		e.t.Fatalf("key %q: Status: %v", k.Key(), err)
	}
	return r
}

// keyExhaust takes single permits for k until one is refused and returns
// that refusal and how many were granted.
func (e *env) keyExhaust(k redlimit.Keyed) (redlimit.Result, int) {
	e.t.Helper()
	for i := 0; i < 1000; i++ {
		if r := e.keyTry(k, 1); !r.Allowed {
			return r, i
		}
	}
	e.t.Fatalf("key %q: 1000 permits granted at once", k.Key())
	return redlimit.Result{}, 0
}

// testPolicyKeyed: a key of a one-limit policy answers as a Limiter of the
// same limit does, call for call, on a random trace of requests and
// waits; other keys are untouched; a refusal's retry-after is exact.
func testPolicyKeyed(e *env, a redlimit.Algorithm) {
	ac := e.algorithmCase(a)
	cfg := ac.every
	l := e.configured("ref-"+string(a), cfg)
	p := e.policy("keyed-"+string(a), cfg)
	k := p.Key("alice")
	most := cfg.MaxPermits()
	rng := rand.New(rand.NewPCG(14, uint64(len(a))))
	for step := 0; step < 200; step++ {
		if rng.IntN(3) == 0 {
			e.clock.Advance(time.Duration(rng.IntN(16)) * 100 * time.Millisecond)
			continue
		}
		n := 1 + rng.Int64N(most)
		want, got := e.try(l, n), e.keyTry(k, n)
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter {
			e.t.Fatalf("step %d, %d permits: key %+v; limiter %+v", step, n, got, want)
		}
		if ls := got.Limits[0]; ls.Remaining != got.Remaining || ls.RetryAfter != got.RetryAfter || ls.Refused == got.Allowed {
			e.t.Fatalf("step %d: Limits[0] = %+v of %+v", step, ls, got)
		}
	}
	// Fresh keys start whole, each on its own.
	e.clock.Advance(time.Hour)
	r, granted := e.keyExhaust(p.Key("bob"))
	if granted != ac.burst || r.RetryAfter <= 0 {
		e.t.Fatalf("bob: %d granted at once, then %+v; want %d and a retry-after", granted, r, ac.burst)
	}
	if st := e.keyStatus(p.Key("carol")); !st.Allowed || st.Remaining < 1 {
		e.t.Fatalf("carol, untouched: %+v", st)
	}
	e.clock.Advance(r.RetryAfter - time.Millisecond)
	if r := e.keyTry(p.Key("bob"), 1); r.Allowed {
		e.t.Fatalf("bob 1 ms before the retry-after: %+v", r)
	}
	e.clock.Advance(time.Millisecond)
	if r := e.keyTry(p.Key("bob"), 1); !r.Allowed {
		e.t.Fatalf("bob at the retry-after: %+v", r)
	}
}

// testPolicyAllOrNothing: with two limits a request is charged to both or
// to neither, whichever limit refuses.
func testPolicyAllOrNothing(e *env, a redlimit.Algorithm) {
	ac := e.algorithmCase(a)
	// The second limit refuses: the first keeps what it had.
	p := e.policy("aon-"+string(a), ac.every, redlimit.PerInterval(1, time.Hour))
	k := p.Key("k")
	r := e.keyTry(k, 1)
	if !r.Allowed || len(r.Limits) != 2 || r.Limits[1].Remaining != 0 {
		e.t.Fatalf("first grant: %+v", r)
	}
	left := r.Limits[0].Remaining
	r = e.keyTry(k, 1)
	by, ok := r.RefusedBy()
	if r.Allowed || !ok || by.Config.Interval != time.Hour || !r.Limits[1].Refused || r.Limits[0].Refused {
		e.t.Fatalf("second request: %+v; want refused by the hourly limit", r)
	}
	if r.RetryAfter != time.Hour || r.Limits[1].RetryAfter != time.Hour || r.Limits[0].RetryAfter > r.RetryAfter {
		e.t.Fatalf("second request: retry after %v, limits %+v; want 1h, the latest", r.RetryAfter, r.Limits)
	}
	if r.Limits[0].Remaining != left {
		e.t.Fatalf("refused request charged the first limit: %d left, had %d", r.Limits[0].Remaining, left)
	}
	if st := e.keyStatus(k); st.Allowed || st.Limits[0].Remaining != left {
		e.t.Fatalf("status after the refusal: %+v; want %d left on the first limit", st, left)
	}

	// The first limit refuses: the second is not charged.
	q := e.policy("aon2-"+string(a), ac.every, redlimit.PerInterval(100, time.Hour))
	k = q.Key("k")
	r, granted := e.keyExhaust(k)
	if granted != ac.burst {
		e.t.Fatalf("%d granted at once, want %d", granted, ac.burst)
	}
	if by, ok := r.RefusedBy(); !ok || by.Config.Interval == time.Hour || !r.Limits[0].Refused || r.Limits[1].RetryAfter != 0 {
		e.t.Fatalf("refusal %+v; want refused by the first limit alone", r)
	}
	if want := int64(100 - granted); r.Limits[1].Remaining != want {
		e.t.Fatalf("hourly limit after the refusal: %d left, want %d", r.Limits[1].Remaining, want)
	}
	if r.RetryAfter <= 0 || r.RetryAfter != r.Limits[0].RetryAfter {
		e.t.Fatalf("refusal %+v: retry-after not the first limit's", r)
	}
	e.clock.Advance(r.RetryAfter)
	if r := e.keyTry(k, 1); !r.Allowed || r.Limits[1].Remaining != int64(100-granted-1) {
		e.t.Fatalf("at the retry-after: %+v; want granted and charged to both", r)
	}
}

// testPolicyRelease: Release hands back on every limit, as a Limiter's
// release does on its one, and reports the fewest handed back by a limit.
func testPolicyRelease(e *env, a redlimit.Algorithm) {
	ac := e.algorithmCase(a)
	l := e.configured("rel-ref-"+string(a), ac.every)
	p := e.policy("rel-"+string(a), ac.every, redlimit.PerInterval(5, time.Minute))
	k := p.Key("k")
	if got, err := k.Release(e.ctx, 1); err != nil || got != 0 {
		e.t.Fatalf("Release with nothing granted = %d, %v; want 0", got, err)
	}
	e.try(l, 1)
	e.keyTry(k, 1)
	e.clock.Advance(100 * time.Millisecond)
	want, err := l.Release(e.ctx, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := k.Release(e.ctx, 1)
	if err != nil || got != want {
		e.t.Fatalf("Release(1) = %d, %v; the limiter's handed back %d", got, err, want)
	}
	st := e.keyStatus(k)
	if st.Limits[1].Remaining != 5 {
		e.t.Fatalf("sliding log after Release: %d left, want 5", st.Limits[1].Remaining)
	}
	if n := e.available(l); st.Limits[0].Remaining != n {
		e.t.Fatalf("%s after Release: %d left; the limiter has %d", a, st.Limits[0].Remaining, n)
	}
}

// testPolicyCancel: a reservation of a one-limit policy handed back,
// by CancelKey or by a waiter whose context ends, counts no more.
func testPolicyCancel(e *env, a redlimit.Algorithm) {
	ac := e.algorithmCase(a)
	ps := e.policyStore()
	p := e.policy("cancel-"+string(a), ac.every)
	known, err := ps.Policy(e.ctx, p.Name())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, key := range []string{"ref", "held", "cancelled", "waiter"} {
		e.keyExhaust(p.Key(key))
	}
	reserve := func(key string) redlimit.PolicyDecision {
		e.t.Helper()
		d, err := ps.AcquireKey(e.ctx, redlimit.PolicyKey{Policy: p.Name(), Key: key}, known, 1, time.Hour)
		if err != nil || !d.Granted || d.Wait <= 0 || d.Refused != -1 || !d.At.Equal(d.Now.Add(d.Wait)) {
			e.t.Fatalf("key %q: reservation %+v, %v; want granted later", key, d, err)
		}
		return d
	}
	held := reserve("held")
	d := reserve("cancelled")
	if !d.At.Equal(held.At) {
		e.t.Fatalf("reservations of two keys at %v and %v; want the same instant", d.At, held.At)
	}
	got, err := ps.CancelKey(e.ctx, redlimit.PolicyKey{Policy: p.Name(), Key: "cancelled"}, known, d.At, 1)
	if err != nil || got != 1 {
		e.t.Fatalf("CancelKey = %d, %v; want 1", got, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := p.Key("waiter").Acquire(ctx, 1)
		errc <- err
	}()
	e.waitTimers(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("cancelled waiter: %v; want context.Canceled", err)
	}
	e.clock.Advance(held.At.Sub(e.clock.Now()))
	ref := e.keyStatus(p.Key("ref")).Remaining
	if n := e.keyStatus(p.Key("held")).Remaining; n >= ref {
		e.t.Fatalf("at the reserved instant the holder has %d, an untouched key %d; want less", n, ref)
	}
	for _, key := range []string{"cancelled", "waiter"} {
		if n := e.keyStatus(p.Key(key)).Remaining; n != ref {
			e.t.Fatalf("key %q handed its reservation back but has %d, want %d", key, n, ref)
		}
	}
}

// testPolicyResult: every limit's Remaining, ResetAfter and RetryAfter,
// and which refused, on a token bucket of 1/s (burst 3) beside a sliding
// log of 5 a minute.
func testPolicyResult(e *env) {
	ps := e.policyStore()
	p := e.policy("fields", redlimit.TokenBucketConfig(1, time.Second, 3), redlimit.PerInterval(5, time.Minute))
	k := p.Key("k")
	type lim struct {
		remaining         int64
		reset, retryAfter time.Duration
	}
	check := func(what string, r redlimit.Result, allowed bool, refused int, want ...lim) {
		e.t.Helper()
		if r.Allowed != allowed || len(r.Limits) != len(want) {
			e.t.Fatalf("%s: %+v; want allowed %v", what, r, allowed)
		}
		var retry, reset time.Duration
		least := want[0].remaining
		for i, w := range want {
			got := r.Limits[i]
			if got.Remaining != w.remaining || got.ResetAfter != w.reset || got.RetryAfter != w.retryAfter || got.Refused != (i == refused) {
				e.t.Fatalf("%s: limit %d = %+v; want %+v, refused %v", what, i, got, w, i == refused)
			}
			retry, reset, least = max(retry, w.retryAfter), max(reset, w.reset), min(least, w.remaining)
		}
		if r.RetryAfter != retry || r.ResetAfter != reset || r.Remaining != least {
			e.t.Fatalf("%s: retry after %v, reset after %v, remaining %d; want %v, %v, %d", what, r.RetryAfter, r.ResetAfter, r.Remaining, retry, reset, least)
		}
	}
	const s = time.Second
	check("2 at 0s", e.keyTry(k, 2), true, -1, lim{1, 2 * s, 0}, lim{3, 60 * s, 0})
	check("2 more at 0s", e.keyTry(k, 2), false, 0, lim{1, 2 * s, s}, lim{3, 60 * s, 0})
	e.clock.Advance(s)
	check("2 at 1s", e.keyTry(k, 2), true, -1, lim{0, 3 * s, 0}, lim{1, 60 * s, 0})
	e.clock.Advance(s)
	check("1 at 2s", e.keyTry(k, 1), true, -1, lim{0, 3 * s, 0}, lim{0, 60 * s, 0})
	e.clock.Advance(2 * s)
	// At 4s: 2 tokens; the log's oldest two grants leave at 60s.
	check("1 at 4s", e.keyTry(k, 1), false, 1, lim{2, s, 0}, lim{0, 58 * s, 56 * s})
	check("3 at 4s", e.keyTry(k, 3), false, 1, lim{2, s, s}, lim{0, 58 * s, 57 * s})
	// Status: the same state, whatever retry-after it reports.
	st := e.keyStatus(k)
	if st.Allowed || len(st.Limits) != 2 || st.Remaining != 0 || st.ResetAfter != 58*s {
		e.t.Fatalf("status at 4s: %+v", st)
	}
	for i, w := range []lim{{2, s, 0}, {0, 58 * s, 0}} {
		if got := st.Limits[i]; got.Remaining != w.remaining || got.ResetAfter != w.reset {
			e.t.Fatalf("status at 4s: limit %d = %+v; want %d left, reset after %v", i, got, w.remaining, w.reset)
		}
	}

	// The store's own answer says the same, with the index and the time.
	d, err := ps.AcquireKey(e.ctx, redlimit.PolicyKey{Policy: "fields", Key: "k"}, redlimit.PolicyConfig{}, 3, 0)
	if err != nil || d.Granted || d.Refused != 1 || d.Wait != 57*s || !d.Now.Equal(e.clock.Now()) || len(d.Limits) != 2 {
		e.t.Fatalf("AcquireKey = %+v, %v; want refused by limit 1, wait 57s, at the clock's now", d, err)
	}
	if d.Limits[0] != (redlimit.LimitState{Remaining: 2, ResetAfter: s, Wait: s}) || d.Limits[1] != (redlimit.LimitState{ResetAfter: 58 * s, Wait: 57 * s}) {
		e.t.Fatalf("AcquireKey limits = %+v", d.Limits)
	}
}

// testPolicyLatestRefuses: when several limits refuse, the one whose
// retry-after is latest is named, wherever it stands.
func testPolicyLatestRefuses(e *env) {
	hour, short := redlimit.PerInterval(1, time.Hour), redlimit.PerInterval(1, 10*time.Second)
	for i, limits := range [][]redlimit.Config{{hour, short}, {short, hour}} {
		p := e.policy("latest"+string(rune('a'+i)), limits...)
		e.keyTry(p.Key("k"), 1)
		e.clock.Advance(time.Second)
		r := e.keyTry(p.Key("k"), 1)
		by, ok := r.RefusedBy()
		if r.Allowed || !ok || by.Config.Interval != time.Hour || r.RetryAfter != time.Hour-time.Second {
			e.t.Fatalf("limits %v: %+v; want refused by the hourly limit, retry after 59m59s", limits, r)
		}
		for _, ls := range r.Limits {
			if want := ls.Config.Interval - time.Second; ls.RetryAfter != want {
				e.t.Fatalf("limit %s: retry after %v, want %v", ls.Name, ls.RetryAfter, want)
			}
		}
	}
}

// testPolicyWaits: a waiting call on several limits is granted once every
// limit grants, and charges each once.
func testPolicyWaits(e *env) {
	p := e.policy("waits", redlimit.PerInterval(2, 10*time.Second), redlimit.TokenBucketConfig(1, 4*time.Second, 1))
	k := p.Key("k")
	e.keyTry(k, 1)
	r := e.keyTry(k, 1)
	if r.Allowed || r.RetryAfter != 4*time.Second {
		e.t.Fatalf("second at once: %+v; want retry after 4s", r)
	}
	if r, err := k.TryAcquireWait(e.ctx, 1, time.Second); err != nil || r.Allowed || r.RetryAfter != 4*time.Second {
		e.t.Fatalf("TryAcquireWait(1s) = %+v, %v; want refused at once", r, err)
	}
	done := make(chan redlimit.Result, 1)
	go func() {
		r, err := k.TryAcquireWait(e.ctx, 1, time.Minute)
		if err != nil {
			e.t.Errorf("TryAcquireWait(1m): %v", err)
		}
		done <- r
	}()
	e.waitTimers(1)
	e.clock.Advance(4 * time.Second)
	r = <-done
	if !r.Allowed || r.Limits[0].Remaining != 0 || r.Limits[1].Remaining != 0 {
		e.t.Fatalf("TryAcquireWait(1m) = %+v; want granted, charged to both", r)
	}
	if st := e.keyStatus(k); st.Allowed {
		e.t.Fatalf("status after: %+v", st)
	}
}

// testPolicySetModes: SetPolicy's modes, and the Version and Epoch each
// write gives the stored policy.
func testPolicySetModes(e *env) {
	ps := e.policyStore()
	const name = "modes"
	pk := redlimit.PolicyKey{Policy: name, Key: "k"}
	if _, err := ps.Policy(e.ctx, name); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("Policy before any: %v; want ErrNotInitialized", err)
	}
	three := redlimit.PolicyConfig{Limits: normalized(e, redlimit.PerInterval(3, time.Minute))}
	five := redlimit.PolicyConfig{Limits: normalized(e, redlimit.PerInterval(5, time.Minute))}
	s1, set, err := ps.SetPolicy(e.ctx, name, three, redlimit.SetIfAbsent)
	if err != nil || !set || !s1.SameLimits(three) || s1.Epoch == 0 || s1.Version <= 0 {
		e.t.Fatalf("SetIfAbsent on none = %+v, %v, %v; want stored with an epoch and version", s1, set, err)
	}
	got, set, err := ps.SetPolicy(e.ctx, name, five, redlimit.SetIfAbsent)
	if err != nil || set || !samePolicy(got, s1) {
		e.t.Fatalf("SetIfAbsent on one = %+v, %v, %v; want %+v kept", got, set, err, s1)
	}
	if got, err := ps.Policy(e.ctx, name); err != nil || !samePolicy(got, s1) {
		e.t.Fatalf("Policy = %+v, %v; want %+v", got, err, s1)
	}
	d, err := ps.AcquireKey(e.ctx, pk, s1, 2, 0)
	if err != nil || !d.Granted || !samePolicy(d.Policy, s1) {
		e.t.Fatalf("AcquireKey(2) = %+v, %v", d, err)
	}
	// Keeping state: the 2 granted still count under the new limit.
	s2, set, err := ps.SetPolicy(e.ctx, name, five, redlimit.SetKeepState)
	if err != nil || !set || !s2.SameLimits(five) || s2.Epoch != s1.Epoch || s2.Version <= s1.Version {
		e.t.Fatalf("SetKeepState = %+v, %v, %v; want the same epoch, a later version than %+v", s2, set, err, s1)
	}
	if d, err := ps.StatusKey(e.ctx, pk, s2); err != nil || d.Limits[0].Remaining != 3 || !samePolicy(d.Policy, s2) {
		e.t.Fatalf("StatusKey after SetKeepState = %+v, %v; want 3 left", d, err)
	}
	// A limit added keeping state starts empty; the first keeps counting.
	two := redlimit.PolicyConfig{Limits: normalized(e, redlimit.PerInterval(5, time.Minute), redlimit.TokenBucketConfig(1, time.Second, 4))}
	s3, _, err := ps.SetPolicy(e.ctx, name, two, redlimit.SetKeepState)
	if err != nil || s3.Epoch != s1.Epoch || s3.Version <= s2.Version {
		e.t.Fatalf("SetKeepState adding a limit = %+v, %v", s3, err)
	}
	if d, err := ps.StatusKey(e.ctx, pk, s3); err != nil || len(d.Limits) != 2 || d.Limits[0].Remaining != 3 || d.Limits[1].Remaining != 4 {
		e.t.Fatalf("StatusKey after adding a limit = %+v, %v; want 3 and 4 left", d, err)
	}
	// Resetting: a new epoch, every key whole.
	s4, set, err := ps.SetPolicy(e.ctx, name, five, redlimit.SetResetState)
	if err != nil || !set || s4.Epoch == s1.Epoch || s4.Epoch == 0 || s4.Version <= s3.Version {
		e.t.Fatalf("SetResetState = %+v, %v, %v; want a new epoch, a later version", s4, set, err)
	}
	if d, err := ps.StatusKey(e.ctx, pk, s4); err != nil || d.Limits[0].Remaining != 5 {
		e.t.Fatalf("StatusKey after SetResetState = %+v, %v; want 5 left", d, err)
	}
	if _, _, err := ps.SetPolicy(e.ctx, name, five, redlimit.SetMode(99)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Fatalf("SetPolicy with mode 99: %v", err)
	}
	// Through a Policy: TrySetLimits reports a different stored policy.
	p, err := redlimit.NewPolicy(ps, name, nil, redlimit.WithClock(e.clock))
	if err != nil {
		e.t.Fatal(err)
	}
	if set, err := p.TrySetLimits(e.ctx, []redlimit.Config{redlimit.PerInterval(3, time.Minute)}); set || !errors.Is(err, redlimit.ErrConfigMismatch) {
		e.t.Fatalf("TrySetLimits of another policy = %v, %v; want ErrConfigMismatch", set, err)
	}
	if set, err := p.TrySetLimits(e.ctx, []redlimit.Config{redlimit.PerInterval(5, time.Minute)}); set || err != nil {
		e.t.Fatalf("TrySetLimits of the stored policy = %v, %v; want false, nil", set, err)
	}
	if limits, err := p.Limits(e.ctx); err != nil || len(limits) != 1 || limits[0].Rate != 5 {
		e.t.Fatalf("Limits = %v, %v", limits, err)
	}
}

// testPolicyDelete: a deleted policy is gone, and one stored again counts
// none of the keys' old states.
func testPolicyDelete(e *env) {
	ps := e.policyStore()
	p := e.policy("del", redlimit.PerInterval(2, time.Hour))
	e.keyExhaust(p.Key("k"))
	old, err := ps.Policy(e.ctx, "del")
	if err != nil {
		e.t.Fatal(err)
	}
	if ok, err := p.Delete(e.ctx); !ok || err != nil {
		e.t.Fatalf("Delete = %v, %v; want true", ok, err)
	}
	if ok, err := ps.DeletePolicy(e.ctx, "del"); ok || err != nil {
		e.t.Fatalf("DeletePolicy again = %v, %v; want false", ok, err)
	}
	if ok, err := ps.DeletePolicy(e.ctx, "never"); ok || err != nil {
		e.t.Fatalf("DeletePolicy of none = %v, %v; want false", ok, err)
	}
	if _, err := ps.Policy(e.ctx, "del"); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("Policy after Delete: %v; want ErrNotInitialized", err)
	}
	pk := redlimit.PolicyKey{Policy: "del", Key: "k"}
	if _, err := ps.AcquireKey(e.ctx, pk, redlimit.PolicyConfig{}, 1, 0); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("AcquireKey after Delete, no policy known: %v; want ErrNotInitialized", err)
	}
	if _, err := ps.StatusKey(e.ctx, pk, redlimit.PolicyConfig{}); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("StatusKey after Delete, no policy known: %v; want ErrNotInitialized", err)
	}
	s, set, err := ps.SetPolicy(e.ctx, "del", redlimit.PolicyConfig{Limits: old.Limits}, redlimit.SetIfAbsent)
	if err != nil || !set || s.Epoch == old.Epoch {
		e.t.Fatalf("SetPolicy after Delete = %+v, %v, %v; want stored, a new epoch", s, set, err)
	}
	if r, granted := e.keyExhaust(p.Key("k")); granted != 2 {
		e.t.Fatalf("key after the policy was stored again: %d granted, then %+v; want 2", granted, r)
	}
}

// testPolicyStaleKnown: a caller whose copy of the policy is older than
// the stored one is decided under the stored one, and told so; a store
// that lost the policy decides under the caller's copy.
func testPolicyStaleKnown(e *env) {
	ps := e.policyStore()
	const name = "stale"
	s1, _, err := ps.SetPolicy(e.ctx, name, redlimit.PolicyConfig{Limits: normalized(e, redlimit.PerInterval(5, time.Minute))}, redlimit.SetResetState)
	if err != nil {
		e.t.Fatal(err)
	}
	// Two instances: a writes, b's copy goes stale. Once a key's state
	// was changed under the new policy, b's calls on it are decided
	// under the new one (a store may decide a key untouched since under
	// the copy it is given, until its documented bound passes).
	a, _ := redlimit.NewPolicy(ps, name, nil, redlimit.WithClock(e.clock))
	b, _ := redlimit.NewPolicy(ps, name, nil, redlimit.WithClock(e.clock))
	if r := e.keyTry(b.Key("x"), 1); !r.Allowed || r.Limits[0].Config.Rate != 5 {
		e.t.Fatalf("b before the change: %+v", r)
	}
	if err := a.SetLimits(e.ctx, []redlimit.Config{redlimit.PerInterval(2, time.Minute)}); err != nil {
		e.t.Fatal(err)
	}
	if r := e.keyTry(a.Key("x"), 1); !r.Allowed || r.Limits[0].Config.Rate != 2 || r.Remaining != 0 {
		e.t.Fatalf("a after its change: %+v; want granted under 2 a minute, 0 left", r)
	}
	if r := e.keyTry(b.Key("x"), 1); r.Allowed || r.Limits[0].Config.Rate != 2 {
		e.t.Fatalf("b after a's change: %+v; want refused under 2 a minute", r)
	}
	s2, err := ps.Policy(e.ctx, name)
	if err != nil || s2.Version <= s1.Version || s2.Epoch != s1.Epoch {
		e.t.Fatalf("Policy = %+v, %v", s2, err)
	}
	for _, c := range []redlimit.PolicyConfig{s1, {}} {
		d, err := ps.AcquireKey(e.ctx, redlimit.PolicyKey{Policy: name, Key: "x"}, c, 1, 0)
		if err != nil || d.Granted || !samePolicy(d.Policy, s2) || d.Limits[0].Remaining != 0 {
			e.t.Fatalf("AcquireKey knowing version %d: %+v, %v; want refused under %+v", c.Version, d, err, s2)
		}
	}
	// A store that lost the policy decides under the caller's copy.
	if _, err := ps.DeletePolicy(e.ctx, name); err != nil {
		e.t.Fatal(err)
	}
	d, err := ps.AcquireKey(e.ctx, redlimit.PolicyKey{Policy: name, Key: "y"}, s2, 1, 0)
	if err != nil || !d.Granted || !d.Policy.SameLimits(s2) || d.Limits[0].Remaining != 1 {
		e.t.Fatalf("AcquireKey with the policy lost = %+v, %v; want decided under %+v", d, err, s2)
	}
}

// testPolicyKeysApart: any bytes are a key, and no key reaches another's
// state, nor does a key of one policy reach another policy's.
func testPolicyKeysApart(e *env) {
	one := redlimit.PerInterval(1, time.Hour)
	p := e.policy("apart", one)
	keys := []string{"a", "a\x00", "\x00a", "{a}", "a}{", "{apart}:a", "a:b", "a b", "\xff\xfe", "é", "*", "?", strings.Repeat("k", 1024), strings.Repeat("k", 1023)}
	for _, key := range keys {
		if r := e.keyTry(p.Key(key), 1); !r.Allowed {
			e.t.Fatalf("key %q: first request refused: %+v", key, r)
		}
	}
	for _, key := range keys {
		if r := e.keyTry(p.Key(key), 1); r.Allowed {
			e.t.Fatalf("key %q: second request granted: %+v", key, r)
		}
	}
	// Policy "apart:a" key "b" is not policy "apart" key "a:b".
	q := e.policy("apart:a", one)
	if r := e.keyTry(q.Key("b"), 1); !r.Allowed {
		e.t.Fatalf("policy apart:a, key b: %+v", r)
	}
	if r := e.keyTry(e.policy("apart2", one).Key("a"), 1); !r.Allowed {
		e.t.Fatalf("policy apart2, key a: %+v", r)
	}
}

// testPolicyBadInput: bad keys, names, permits and policies are
// ErrInvalidArgument at every call that takes them, never a panic.
func testPolicyBadInput(e *env) {
	ps := e.policyStore()
	p := e.policy("bad", redlimit.PerInterval(2, time.Minute))
	known, err := ps.Policy(e.ctx, "bad")
	if err != nil {
		e.t.Fatal(err)
	}
	at := e.clock.Now()
	calls := func(pk redlimit.PolicyKey) map[string]error {
		_, aerr := ps.AcquireKey(e.ctx, pk, known, 1, 0)
		_, serr := ps.StatusKey(e.ctx, pk, known)
		_, rerr := ps.ReleaseKey(e.ctx, pk, known, 1)
		_, cerr := ps.CancelKey(e.ctx, pk, known, at, 1)
		return map[string]error{"AcquireKey": aerr, "StatusKey": serr, "ReleaseKey": rerr, "CancelKey": cerr}
	}
	for _, pk := range []redlimit.PolicyKey{
		{Policy: "bad", Key: ""},
		{Policy: "bad", Key: strings.Repeat("k", 1025)},
		{Policy: "", Key: "k"},
		{Policy: strings.Repeat("n", 10000), Key: "k"},
	} {
		for call, err := range calls(pk) {
			if !errors.Is(err, redlimit.ErrInvalidArgument) {
				e.t.Errorf("%s(policy of %d bytes, key of %d): %v; want ErrInvalidArgument", call, len(pk.Policy), len(pk.Key), err)
			}
		}
	}
	for _, key := range []string{"", strings.Repeat("k", 1025)} {
		k := p.Key(key)
		if _, err := k.TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("TryAcquire, key of %d bytes: %v", len(key), err)
		}
		if _, err := k.Status(e.ctx); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("Status, key of %d bytes: %v", len(key), err)
		}
		if _, err := k.Release(e.ctx, 1); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("Release, key of %d bytes: %v", len(key), err)
		}
	}
	pk := redlimit.PolicyKey{Policy: "bad", Key: "k"}
	for _, n := range []int64{0, -1} {
		if _, err := ps.AcquireKey(e.ctx, pk, known, n, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("AcquireKey(%d permits): %v", n, err)
		}
		if _, err := ps.ReleaseKey(e.ctx, pk, known, n); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("ReleaseKey(%d permits): %v", n, err)
		}
		if _, err := ps.CancelKey(e.ctx, pk, known, at, n); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("CancelKey(%d permits): %v", n, err)
		}
	}
	if _, err := ps.AcquireKey(e.ctx, pk, known, 3, 0); !errors.Is(err, redlimit.ErrPermitsExceedRate) {
		e.t.Errorf("AcquireKey(3 permits of 2): %v; want ErrPermitsExceedRate", err)
	}
	if _, err := p.Key("k").TryAcquireWait(e.ctx, 1, -time.Second); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Errorf("TryAcquireWait(-1s): %v", err)
	}
	many := make([]redlimit.Config, redlimit.MaxLimits+1)
	for i := range many {
		many[i] = redlimit.PerInterval(1, time.Minute)
	}
	for what, limits := range map[string][]redlimit.Config{
		"no limits":       nil,
		"too many limits": many,
		"a PerClient one": {redlimit.PerInterval(1, time.Minute).WithMode(redlimit.PerClient)},
		"a zero rate":     {{Rate: 0, Interval: time.Minute}},
		"a bad algorithm": {redlimit.PerInterval(1, time.Minute).WithAlgorithm("no-such")},
	} {
		if _, _, err := ps.SetPolicy(e.ctx, "bad2", redlimit.PolicyConfig{Limits: limits}, redlimit.SetResetState); !errors.Is(err, redlimit.ErrInvalidArgument) {
			e.t.Errorf("SetPolicy with %s: %v; want ErrInvalidArgument", what, err)
		}
		if _, err := ps.AcquireKey(e.ctx, redlimit.PolicyKey{Policy: "bad2", Key: "k"}, redlimit.PolicyConfig{Limits: limits}, 1, 0); err == nil {
			e.t.Errorf("AcquireKey knowing a policy with %s: no error", what)
		}
	}
	if _, err := ps.Policy(e.ctx, "bad2"); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Errorf("Policy after bad SetPolicy calls: %v; want ErrNotInitialized", err)
	}
	if _, _, err := ps.SetPolicy(e.ctx, "", redlimit.PolicyConfig{Limits: known.Limits}, redlimit.SetResetState); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Errorf("SetPolicy with an empty name: %v", err)
	}
	if _, err := ps.Policy(e.ctx, ""); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Errorf("Policy with an empty name: %v", err)
	}
	if _, err := ps.DeletePolicy(e.ctx, ""); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Errorf("DeletePolicy with an empty name: %v", err)
	}
	// Nothing above charged the key.
	if st := e.keyStatus(p.Key("k")); st.Remaining != 2 {
		e.t.Errorf("key after bad calls: %+v; want 2 left", st)
	}
}

// normalized returns limits as stores keep them.
func normalized(e *env, limits ...redlimit.Config) []redlimit.Config {
	e.t.Helper()
	n, err := redlimit.NormalizePolicy(limits)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// samePolicy reports whether two stored policies are the same write.
func samePolicy(a, b redlimit.PolicyConfig) bool {
	return a.SameLimits(b) && a.Version == b.Version && a.Epoch == b.Epoch
}

// testPolicyReserveAll: a waiting call on several limits (2 per second,
// a token bucket, and 5 per 10 seconds, a sliding log) reserves on both
// at one instant, the latest of theirs; a second waiter queues after it;
// a refusal charges neither; a waiter that gives up hands both back, so
// that the next caller has the permit at once.
func testPolicyReserveAll(e *env) {
	const s = time.Second
	ps := e.policyStore()
	p := e.policy("reserve-all", redlimit.TokenBucketConfig(2, s, 2), redlimit.PerInterval(5, 10*s))
	k := p.Key("k")
	pk := redlimit.PolicyKey{Policy: p.Name(), Key: "k"}
	// Grants at 0s, 0s, 1s, 1s and 2s: the log is full until 10s, when
	// the first two leave it; the bucket has a token left at 2s.
	for i, step := range []time.Duration{0, 0, s, 0, s} {
		e.clock.Advance(step)
		if r := e.keyTry(k, 1); !r.Allowed {
			e.t.Fatalf("grant %d: %+v", i, r)
		}
	}
	before := e.keyStatus(k)
	if before.Limits[0].Remaining != 1 || before.Limits[1].Remaining != 0 {
		e.t.Fatalf("status at 2s: %+v; want 1 token left and a full log", before)
	}
	remaining := func(what string, want ...int64) {
		e.t.Helper()
		st := e.keyStatus(k)
		for i, w := range want {
			if st.Limits[i].Remaining != w {
				e.t.Fatalf("%s: limit %d has %d left, want %d (%+v)", what, i, st.Limits[i].Remaining, w, st)
			}
		}
	}

	// Beyond its bound: refused with the latest retry-after, charging none.
	r, err := k.TryAcquireWait(e.ctx, 1, s)
	if err != nil || r.Allowed || r.RetryAfter != 8*s {
		e.t.Fatalf("TryAcquireWait(1s) = %+v, %v; want refused, retry after 8s", r, err)
	}
	remaining("after the refusal", 1, 0)

	// A waiter reserves on both at 10s, and gives up at 9s: both handed
	// back, so that at 10s the next caller has the permit at once.
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := k.Acquire(ctx, 1)
		errc <- err
	}()
	e.waitTimers(1)
	remaining("while a waiter holds 10s", 0, 0)
	e.clock.Advance(7 * s)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("cancelled waiter: %v; want context.Canceled", err)
	}
	remaining("at 9s, after the waiter gave up", 2, 0)
	e.clock.Advance(s)
	if r := e.keyTry(k, 1); !r.Allowed || r.Limits[0].Remaining != 1 || r.Limits[1].Remaining != 1 {
		e.t.Fatalf("at 10s: %+v; want granted at once, charged to both", r)
	}

	// Waiters at 10s reserve on both limits at one instant each, in
	// order: the log's grants of 1s leave at 11s, that of 2s at 12s.
	reserve := func(n int64) redlimit.PolicyDecision {
		e.t.Helper()
		d, err := ps.AcquireKey(e.ctx, pk, redlimit.PolicyConfig{}, n, time.Hour)
		if err != nil || !d.Granted || d.Refused != -1 || !d.At.Equal(d.Now.Add(d.Wait)) || len(d.Limits) != 2 {
			e.t.Fatalf("reservation of %d: %+v, %v; want granted later", n, d, err)
		}
		for i, l := range d.Limits {
			if l.Wait != d.Wait {
				e.t.Fatalf("reservation of %d in %v: limit %d waits %v; want every limit at the same instant", n, d.Wait, i, l.Wait)
			}
		}
		return d
	}
	if first := reserve(2); first.Wait != s {
		e.t.Fatalf("first waiter reserved for %v from now; want 1s (at 11s)", first.Wait)
	}
	if second := reserve(2); second.Wait != 2*s {
		e.t.Fatalf("second waiter reserved for %v from now; want 2s (at 12s), after the first", second.Wait)
	}
	// Once the first has had its turn, and before the second's, nobody
	// else gets in ahead of the second.
	e.clock.Advance(s + time.Millisecond)
	if r := e.keyTry(k, 1); r.Allowed {
		e.t.Fatalf("a newcomer at 11.001s: %+v; want refused (the second waiter holds 12s)", r)
	}
}
