package memstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// keyShards shards a policy's keys (a power of two).
const keyShards = 64

var _ redlimit.PolicyStore = (*Store)(nil)

// policy is one name's stored policy and its keys' states.
type policy struct {
	name string
	// mu serializes writes of cfg (SetPolicy, DeletePolicy, restores).
	mu  sync.Mutex
	cfg atomic.Pointer[pconf]
	// keys: the states, by key, sharded.
	keys [keyShards]keyShard
}

// pconf is a stored policy with what the hot path derives from it; never
// written once made.
type pconf struct {
	redlimit.PolicyConfig
	limits []*conf
	// lims are the limits' Limits, each with the instant the policy
	// took effect (Since) in its unit.
	lims []algorithm.Limit
	// since is PolicyConfig.Since in µs (0: unknown).
	since int64
	most  int64
	// compact: one limit, of a bucket algorithm, whose keys' states the
	// shards keep as compact records.
	compact bool
	// bucket: compact, and the limit a token bucket, whose records
	// AcquireKey takes from in place (take).
	bucket bool
	// status is the limit as a Result shows it (bucket only), with
	// nothing of a decision: what a bound Policy's grants start from.
	status redlimit.LimitStatus
}

// keyShard holds some of a policy's keys.
//
// A key's state is in one of two maps. A policy of one bucket limit (the
// per-user token bucket, the common case) keeps each key's state in c as a
// compact record, counted under cc, while it is the plain case a record
// holds: under cc's limit, no reservation waiting. Every other state (a
// queue of reservations, one counted under an older config, several
// limits, the windows) is a whole algorithm.State in m.
type keyShard struct {
	mu sync.Mutex
	m  map[string]*keyState
	c  records
	// cc is the policy c's records are counted under; scratch is a state
	// of its algorithm that a call on a record works on, so that the call
	// allocates nothing.
	cc      *pconf
	scratch algorithm.State
	// tb is the bucket takeRecord takes from, counted under cc's limit
	// when cc.bucket: only a record's Owed, Last and Expiry change.
	tb tokenbucket.State
	// next is the size at which an insert sweeps the shard; swept is the
	// store time (µs) of the last sweep.
	next  int
	swept int64
	// peak is the most keys a sweep found since the maps were last made:
	// a Go map keeps its room when emptied, so a sweep that leaves a
	// quarter of it makes them anew.
	peak int
	// states is room for the Limits of decisions to come, handed out
	// under mu: one allocation serves many calls.
	states []redlimit.LimitState
	// last are the Limits of one limit handed out last (oneState), in
	// turn (lastNext the next to replace), given again to a decision that
	// shows the same: never written once handed out, as no decision's
	// Limits are.
	last     [shownRing]*[1]redlimit.LimitState
	lastNext uint32
	// shown are the Limits of the bound Policy's grants (keyHandle) handed
	// out last, under cc, in turn (shownNext the next to replace): given
	// again to a grant that shows the same, never written once handed out.
	// A hot key shows a few states by turns; so do keys of a full bucket.
	shown     [shownRing]shown
	shownNext uint32
	// statuses is room for the shown to come, as states is for Limits.
	statuses []redlimit.LimitStatus
}

// shownRing is how many statuses a shard shows again (keyShard.shown).
const shownRing = 4

// shown is a status shown (keyShard.shown), with what tells it apart
// beside it: looking for one reads the shard's lines only.
type shown struct {
	rem   int64
	reset int64 // µs
	a     *[1]redlimit.LimitStatus
}

// shownStatus returns the Limits of a grant under cc that left rem and
// whose bucket is whole again in reset µs; ks.mu is held.
func (ks *keyShard) shownStatus(rem, reset int64) []redlimit.LimitStatus {
	for i := range ks.shown {
		if sh := &ks.shown[i]; sh.rem == rem && sh.reset == reset && sh.a != nil {
			return sh.a[:]
		}
	}
	if len(ks.statuses) == 0 {
		ks.statuses = make([]redlimit.LimitStatus, stateSlab)
	}
	a := (*[1]redlimit.LimitStatus)(ks.statuses)
	ks.statuses = ks.statuses[1:]
	a[0] = ks.cc.status
	a[0].Remaining, a[0].ResetAfter = rem, time.Duration(reset)*time.Microsecond
	ks.shown[ks.shownNext%shownRing] = shown{rem: rem, reset: reset, a: a}
	ks.shownNext++
	return a[:]
}

// oneState returns ls as the Limits of a decision; ks.mu is held. Keys
// often show one of a few states (one permit taken from a full bucket, a
// hot key's few by turns), and then share its slice: no allocation.
func (ks *keyShard) oneState(ls redlimit.LimitState) []redlimit.LimitState {
	for _, a := range &ks.last {
		if a != nil && a[0] == ls {
			return a[:]
		}
	}
	a := (*[1]redlimit.LimitState)(ks.limitStates(1))
	a[0] = ls
	ks.last[ks.lastNext%shownRing] = a
	ks.lastNext++
	return a[:]
}

// limitStates returns n zero LimitStates for a decision; ks.mu is held.
func (ks *keyShard) limitStates(n int) []redlimit.LimitState {
	if len(ks.states) < n {
		ks.states = make([]redlimit.LimitState, max(stateSlab, n))
	}
	out := ks.states[:n:n]
	ks.states = ks.states[n:]
	return out
}

// stateSlab is how many LimitStates a shard allocates at once: a caller
// that keeps a decision keeps at most that many alive.
const stateSlab = 16

// record is a bucket's state (algorithm.Deficit) with its config left out
// (the shard's cc has it) and no queue of reservations.
type record struct {
	// owed is Deficit.Owed; 0: a fresh state, whose config is unset.
	owed, last, expiry int64
}

// deficitOf returns the bucket state st holds, or nil when st is not a
// bucket's.
func deficitOf(st algorithm.State) *algorithm.Deficit {
	switch b := st.(type) {
	case *tokenbucket.State:
		return &b.Deficit
	case *leakybucket.State:
		return &b.Deficit
	}
	return nil
}

// encode returns d as a record under lim, if one can hold it.
func encode(d *algorithm.Deficit, lim algorithm.Limit) (record, bool) {
	if d.Head != 0 || d.Tail != 0 || d.Live != 0 || d.Held != 0 {
		return record{}, false
	}
	if d.Owed == 0 {
		return record{last: d.Last, expiry: d.Expiry}, d.Rate == 0 && d.Scale == 0 && d.Burst == 0
	}
	same := d.Rate == lim.Rate && d.Scale == lim.Interval && d.Burst == lim.Burst
	return record{owed: d.Owed, last: d.Last, expiry: d.Expiry}, same
}

// decode writes r, a record under lim, to d.
func (r record) decode(d *algorithm.Deficit, lim algorithm.Limit) {
	*d = algorithm.Deficit{Owed: r.owed, Last: r.last, Expiry: r.expiry}
	if r.owed != 0 {
		d.Rate, d.Scale, d.Burst = lim.Rate, lim.Interval, lim.Burst
	}
}

// forgotten is Deficit.Forgotten at t of r, a record under its shard's
// limit, without decoding it: decoded, a record with a debt is counted
// under that very limit, so that Forgotten asks no more than this.
func (r *record) forgotten(t int64) bool { return r.owed == 0 || t >= r.expiry }

// adopt makes c the policy the shard's records are counted under: the
// records of another one become whole states (those of another epoch
// are gone); a policy that keeps no records leaves none. ks.mu is held.
func (ks *keyShard) adopt(c *pconf) {
	if ks.cc == c {
		return
	}
	if old := ks.cc; old != nil && ks.c.len() > 0 {
		if old.Epoch == c.Epoch {
			lim := old.lim(0)
			if ks.m == nil {
				ks.m = make(map[string]*keyState)
			}
			for _, i := range ks.c.idx.all() {
				st := old.limits[0].spec.New()
				ks.c.recs[i].decode(deficitOf(st), lim)
				ks.m[ks.c.key(i)] = &keyState{epoch: old.Epoch, version: old.Version, states: []algorithm.State{st}}
			}
		}
	}
	ks.c = records{}
	ks.shown = [shownRing]shown{}
	if !c.compact {
		ks.cc, ks.scratch = nil, nil
		return
	}
	if ks.cc == nil || ks.cc.limits[0].spec != c.limits[0].spec {
		ks.scratch = c.limits[0].spec.New()
	}
	ks.cc = c
	if lim := c.lim(0); c.bucket {
		ks.tb = tokenbucket.State{Deficit: algorithm.Deficit{Rate: lim.Rate, Scale: lim.Interval, Burst: lim.Burst}}
	}
}

// keyState is one key's state on every limit of the policy, under the
// policy's epoch and the version it was last changed under.
type keyState struct {
	epoch, version int64
	states         []algorithm.State
}

// policyOf returns name's policy, creating an empty one when create is set.
// A name's policy is never replaced (DeletePolicy empties it), so the one
// found last is remembered and found again by its name alone.
func (s *Store) policyOf(name string, create bool) *policy {
	if p := s.lastPolicy.Load(); p != nil && p.name == name {
		return p
	}
	v, ok := s.policies.Load(name)
	if !ok {
		if !create {
			return nil
		}
		v, _ = s.policies.LoadOrStore(name, &policy{name: name})
	}
	p := v.(*policy)
	s.lastPolicy.Store(p)
	return p
}

// makePconf interns a normalized policy's limits.
func (s *Store) makePconf(pc redlimit.PolicyConfig) (*pconf, error) {
	p := &pconf{PolicyConfig: pc, limits: make([]*conf, len(pc.Limits))}
	if !pc.Since.IsZero() {
		p.since = pc.Since.UnixMicro()
	}
	for i, c := range pc.Limits {
		ic, err := s.intern(c)
		if err != nil {
			return nil, err
		}
		p.limits[i] = ic
	}
	p.lims = make([]algorithm.Limit, len(p.limits))
	for i, lc := range p.limits {
		p.lims[i] = lc.lim
		p.lims[i].Since = p.since / lc.unit
	}
	p.most = pc.MaxPermits()
	p.compact = len(p.limits) == 1 && deficitOf(p.limits[0].spec.New()) != nil
	_, p.bucket = p.limits[0].spec.New().(*tokenbucket.State)
	p.bucket = p.bucket && p.compact
	if p.bucket {
		p.status = redlimit.LimitStatus{Name: redlimit.LimitName(pc.Limits[0]), Config: pc.Limits[0]}
	}
	return p, nil
}

// SetPolicy implements redlimit.PolicyStore.
func (s *Store) SetPolicy(ctx context.Context, name string, pc redlimit.PolicyConfig, how redlimit.SetMode) (redlimit.PolicyConfig, bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	limits, err := redlimit.NormalizePolicy(pc.Limits)
	if err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	if err := how.Validate(); err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	p := s.policyOf(name, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cfg.Load()
	if old != nil && how == redlimit.SetIfAbsent {
		return old.PolicyConfig, false, nil
	}
	next := redlimit.PolicyConfig{Limits: limits, Version: 1}
	if old != nil && how == redlimit.SetKeepState {
		next.Epoch, next.Version = old.Epoch, old.Version+1
		next.Since = time.UnixMicro(s.nowUS())
	} else {
		next.Epoch = redlimit.Config{}.WithNewEpoch().Epoch
		if old != nil {
			next.Version = old.Version + 1
		}
	}
	c, err := s.makePconf(next)
	if err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	p.cfg.Store(c)
	return next, true, nil
}

// Policy implements redlimit.PolicyStore.
func (s *Store) Policy(ctx context.Context, name string) (redlimit.PolicyConfig, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.PolicyConfig{}, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.PolicyConfig{}, err
	}
	if p := s.policyOf(name, false); p != nil {
		if c := p.cfg.Load(); c != nil {
			return c.PolicyConfig, nil
		}
	}
	return redlimit.PolicyConfig{}, redlimit.ErrNotInitialized
}

// DeletePolicy implements redlimit.PolicyStore. The keys' states go with
// it: in memory nothing else would ever drop them.
func (s *Store) DeletePolicy(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p := s.policyOf(name, false)
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	had := p.cfg.Swap(nil) != nil
	p.mu.Unlock()
	for i := range p.keys {
		ks := &p.keys[i]
		ks.mu.Lock()
		ks.m, ks.c, ks.cc, ks.scratch, ks.states, ks.last = nil, records{}, nil, nil, nil, [shownRing]*[1]redlimit.LimitState{}
		ks.shown, ks.statuses = [shownRing]shown{}, nil
		ks.mu.Unlock()
	}
	return had, nil
}

// pcall is one keyed call in progress: its policy and key, locked.
type pcall struct {
	c  *pconf
	ks *keyShard
	// st is the key's whole state; or, when rec is an index (not -1),
	// the key's state is its record ks.c.recs[rec], decoded in ks.scratch.
	st  *keyState
	rec int32
	key string
	h   uint64 // the key's hash (keyHash)
	now int64  // µs
}

// has reports whether the key has a state.
func (k *pcall) has() bool { return k.st != nil || k.rec >= 0 }

// state returns the key's state on limit i.
func (k *pcall) state(i int) algorithm.State {
	if k.rec >= 0 {
		return k.ks.scratch
	}
	return k.st.states[i]
}

// done keeps the key's state after a change: as a record when one can
// hold it, as a whole state otherwise; and unlocks the shard.
func (k *pcall) done() {
	ks := k.ks
	defer ks.mu.Unlock()
	if !k.c.compact || ks.cc != k.c || !k.has() {
		return
	}
	st := k.state(0)
	r, ok := encode(deficitOf(st), k.c.lim(0))
	switch {
	case ok && k.rec >= 0:
		ks.c.recs[k.rec].record = r
	case ok: // a whole state back to a record, if its hash is free
		if _, taken := ks.c.find(k.h, k.key); !taken && ks.c.fits(len(k.key)) {
			delete(ks.m, k.key)
			ks.c.add(k.h, k.key, r)
		}
	case k.rec >= 0: // a record that became more: a whole state
		ks.c.remove(k.h, k.rec)
		if ks.m == nil {
			ks.m = make(map[string]*keyState)
		}
		// The map keeps the key: a copy, not a part of a caller's
		// larger buffer.
		ks.m[strings.Clone(k.key)] = &keyState{epoch: k.c.Epoch, version: k.c.Version, states: []algorithm.State{st.Clone()}}
	}
}

// beginKey validates a keyed call, finds (or restores from known) the
// policy and locks the key's shard. The state is nil when the key has
// none and create is false.
func (s *Store) beginKey(ctx context.Context, k redlimit.PolicyKey, known *redlimit.PolicyConfig, create bool) (pcall, error) {
	if err := k.Validate(); err != nil {
		return pcall{}, err
	}
	if err := ctx.Err(); err != nil {
		return pcall{}, err
	}
	p := s.policyOf(k.Policy, len(known.Limits) > 0)
	var c *pconf
	if p != nil {
		c = p.cfg.Load()
	}
	if c == nil {
		if len(known.Limits) == 0 {
			return pcall{}, redlimit.ErrNotInitialized
		}
		// Restored from the caller's copy, epoch and version and all, as
		// a store that lost its data is.
		limits, err := redlimit.NormalizePolicy(known.Limits)
		if err != nil {
			return pcall{}, err
		}
		p.mu.Lock()
		if c = p.cfg.Load(); c == nil {
			r := *known
			r.Limits = limits
			if r.Epoch == 0 {
				r.Epoch, r.Version = redlimit.Config{}.WithNewEpoch().Epoch, 1
			}
			if c, err = s.makePconf(r); err != nil {
				p.mu.Unlock()
				return pcall{}, err
			}
			p.cfg.Store(c)
		}
		p.mu.Unlock()
	}
	// One hash of the key picks its shard and finds its record.
	h := s.keyHash(k.Key)
	ks := &p.keys[h&(keyShards-1)]
	now := s.nowUS()
	ks.mu.Lock()
	ks.adopt(c)
	call := pcall{c: c, ks: ks, key: k.Key, h: h, now: now, rec: -1}
	if call.st = ks.m[k.Key]; call.st == nil && c.compact {
		i, taken := ks.c.find(h, k.Key)
		if i < 0 && create && !taken {
			ks.maybeSweep(c, now)
			// A sweep may have moved the records, but freed no hash
			// of a record held.
			if ks.c.fits(len(k.Key)) {
				i = ks.c.add(h, k.Key, record{})
			}
		}
		if i >= 0 {
			ks.c.recs[i].decode(deficitOf(ks.scratch), c.lim(0))
			call.rec = i
			return call, nil
		}
		if !taken && !create {
			return call, nil
		}
		// A key whose hash another's record holds (or whose bytes do
		// not fit) keeps a whole state.
	}
	if call.st == nil && create {
		ks.maybeSweep(c, now)
		if ks.m == nil {
			ks.m = make(map[string]*keyState)
		}
		call.st = &keyState{}
		call.key = strings.Clone(k.Key)
		ks.m[call.key] = call.st
	}
	if call.st != nil {
		call.st.bring(c)
	}
	return call, nil
}

// maybeSweep sweeps the shard before an insert, if it doubled since the
// last sweep or was not swept for sweepEvery. ks.mu is held.
func (ks *keyShard) maybeSweep(c *pconf, now int64) {
	if len(ks.m)+ks.c.len() >= max(ks.next, minSweepSize) || now-ks.swept >= sweepEvery.Microseconds() {
		ks.sweep(c, now)
	}
}

// bring makes the state the current policy's: a state of another epoch
// is gone; a limit whose algorithm changed starts empty.
func (st *keyState) bring(c *pconf) {
	if st.epoch == c.Epoch && st.version == c.Version && len(st.states) == len(c.limits) {
		return
	}
	fresh := st.epoch != c.Epoch
	old := st.states
	st.states = make([]algorithm.State, len(c.limits))
	for i, lc := range c.limits {
		if !fresh && i < len(old) && old[i] != nil && algorithm.Of(old[i]) == lc.spec {
			st.states[i] = old[i]
		} else {
			st.states[i] = lc.spec.New()
		}
	}
	st.epoch, st.version = c.Epoch, c.Version
}

// lim is limit i's Limit, with the instant the policy took effect.
func (c *pconf) lim(i int) algorithm.Limit { return c.lims[i] }

// forgotten reports whether every limit of st holds nothing at now (µs).
func (st *keyState) forgotten(c *pconf, now int64) bool {
	if st.epoch != c.Epoch {
		return true
	}
	for i, s := range st.states {
		var lim algorithm.Limit
		if st.version == c.Version && i < len(c.limits) {
			lim = c.lim(i)
		}
		if !s.Forgotten(now/unitOf(s), lim) {
			return false
		}
	}
	return true
}

// sweep drops the forgotten keys; ks.mu is held.
func (ks *keyShard) sweep(c *pconf, now int64) {
	ks.peak = max(ks.peak, len(ks.m)+ks.c.len())
	for k, st := range ks.m {
		if st.forgotten(c, now) {
			delete(ks.m, k)
		}
	}
	if cc := ks.cc; cc != nil && ks.c.len() > 0 {
		t := now / cc.limits[0].unit
		ks.c.removeForgotten(t)
	}
	n := len(ks.m) + ks.c.len()
	if ks.peak >= 4*minSweepSize && n <= ks.peak/4 {
		ks.m, ks.peak = remake(ks.m), n
		ks.c.shrink()
	} else if ks.c.waste > len(ks.c.keys)/2 {
		ks.c.compact()
	}
	ks.next, ks.swept = 2*n, now
}

// remake returns m in a map of its size (nil when empty).
func remake[V any](m map[string]V) map[string]V {
	if len(m) == 0 {
		return nil
	}
	r := make(map[string]V, len(m))
	for k, v := range m {
		r[k] = v
	}
	return r
}

// parts returns the limits of a call as algorithm parts, in buf.
func (k *pcall) parts(buf []algorithm.Part) []algorithm.Part {
	for i, lc := range k.c.limits {
		buf = append(buf, algorithm.Part{Spec: lc.spec, State: k.state(i), Limit: k.c.lim(i)})
	}
	return buf
}

// decision fills a PolicyDecision's limits from the rules' decisions;
// k.ks.mu is held.
func (k *pcall) decision(ds []algorithm.Decision, d *redlimit.PolicyDecision) {
	d.Policy = k.c.PolicyConfig
	d.Now = time.UnixMicro(k.now)
	d.Limits = k.ks.limitStates(len(ds))
	for i, ad := range ds {
		u := k.c.limits[i].unit
		ls := redlimit.LimitState{Remaining: ad.Remaining, Wait: time.Duration(ad.Wait*u) * time.Microsecond}
		if k.has() {
			if exp := k.state(i).ExpiresAt() * u; exp > k.now {
				ls.ResetAfter = time.Duration(exp-k.now) * time.Microsecond
			}
		}
		d.Limits[i] = ls
	}
}

// AcquireKey implements redlimit.PolicyStore.
func (s *Store) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (d redlimit.PolicyDecision, _ error) {
	if n < 1 {
		return redlimit.PolicyDecision{}, (redlimit.Config{}).ValidatePermits(n)
	}
	// Made in place: a decision is large to copy.
	if s.take(ctx, k, n, &d) {
		return d, nil
	}
	call, err := s.beginKey(ctx, k, &known, true)
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	if len(call.c.limits) == 1 {
		return call.acquireOne(n, maxWait)
	}
	defer call.done()
	if n > call.c.most {
		for _, lc := range call.c.limits {
			if lc.max == call.c.most {
				return redlimit.PolicyDecision{}, lc.Config.ValidatePermits(n)
			}
		}
	}
	// Room for the common policies on the stack.
	var pbuf [4]algorithm.Part
	var dbuf [4]algorithm.Decision
	ds := dbuf[:0]
	for range call.c.limits {
		ds = append(ds, algorithm.Decision{})
	}
	ad := algorithm.AcquireAll(call.parts(pbuf[:0]), call.now, n, waitUS(maxWait), ds)
	d = redlimit.PolicyDecision{Granted: ad.Granted, Full: ad.Full, Refused: ad.Refused, Wait: time.Duration(ad.Wait) * time.Microsecond}
	call.decision(ds, &d)
	if ad.Granted {
		d.At = d.Now.Add(d.Wait)
	}
	return d, nil
}

// acquireOne is AcquireKey on a policy of one limit (the common case,
// whose keys are kept as records): the same rules (algorithm.AcquireAll
// of one part), with less to carry, and the shard unlocked before the
// decision is made up.
func (k *pcall) acquireOne(n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	lc := k.c.limits[0]
	if n > lc.max {
		k.done()
		return redlimit.PolicyDecision{}, lc.Config.ValidatePermits(n)
	}
	parts := [1]algorithm.Part{{Spec: lc.spec, State: k.state(0), Limit: k.c.lim(0)}}
	var ds [1]algorithm.Decision
	ad := algorithm.AcquireAll(parts[:], k.now, n, waitUS(maxWait), ds[:])
	u := lc.unit
	exp := parts[0].State.ExpiresAt() * u
	limits := k.ks.limitStates(1)
	k.done()
	now := k.now
	d := redlimit.PolicyDecision{Granted: ad.Granted, Full: ad.Full, Refused: ad.Refused, Wait: time.Duration(ad.Wait) * time.Microsecond,
		Now: time.UnixMicro(now), Limits: limits, Policy: k.c.PolicyConfig}
	limits[0] = redlimit.LimitState{Remaining: ds[0].Remaining, Wait: time.Duration(ds[0].Wait*u) * time.Microsecond}
	if exp > now {
		limits[0].ResetAfter = time.Duration(exp-now) * time.Microsecond
	}
	if ad.Granted {
		d.At = d.Now
		if ad.Wait != 0 {
			d.At = d.Now.Add(d.Wait)
		}
	}
	return d, nil
}

// take is AcquireKey's common case, taken straight from the key's record
// (takeRecord). ok false: any other case, nothing changed, for the whole
// path to answer (and report errors). d, zero, gets the decision.
func (s *Store) take(ctx context.Context, k redlimit.PolicyKey, n int64, d *redlimit.PolicyDecision) bool {
	if s.noTake || k.Validate() != nil || ctx.Err() != nil {
		return false
	}
	p := s.policyOf(k.Policy, false)
	if p == nil {
		return false
	}
	c, ks, rem, reset, now := s.takeRecord(p, k.Key, n)
	if ks == nil {
		return false
	}
	ls := redlimit.LimitState{Remaining: rem, ResetAfter: time.Duration(reset) * time.Microsecond}
	limits := ks.oneState(ls)
	ks.mu.Unlock()
	d.Granted, d.Refused, d.Limits, d.Policy = true, -1, limits, c.PolicyConfig
	d.Now = time.UnixMicro(now)
	d.At = d.Now
	return true
}

// takeRecord grants n (1..algorithm.MaxRate) permits to key of p in the
// common case, straight from the key's record: a policy of one token
// bucket, a key that has its record under it (or none yet), whose bucket
// grants n now (tokenbucket.State.Take). It returns the policy c it was
// granted under, the key's shard ks with ks.mu held, what is left, when
// the bucket is whole again (reset µs later) and the instant (µs); or a
// nil ks, nothing changed and no lock held.
func (s *Store) takeRecord(p *policy, key string, n int64) (c *pconf, ks *keyShard, rem, reset, now int64) {
	c = p.cfg.Load()
	if c == nil || !c.bucket {
		return nil, nil, 0, 0, 0
	}
	h := s.keyHash(key)
	ks = &p.keys[h&(keyShards-1)]
	now = s.nowUS()
	ks.mu.Lock()
	if ks.cc != c || len(ks.m) > 0 && ks.m[key] != nil {
		ks.mu.Unlock()
		return nil, nil, 0, 0, 0
	}
	i, taken := ks.c.find(h, key)
	if i < 0 {
		// A new key (or one swept) gets a fresh record, as beginKey
		// gives it; a key whose hash another's record holds takes the
		// whole path.
		if taken {
			ks.mu.Unlock()
			return nil, nil, 0, 0, 0
		}
		ks.maybeSweep(c, now)
		if !ks.c.fits(len(key)) {
			ks.mu.Unlock()
			return nil, nil, 0, 0, 0
		}
		i = ks.c.add(h, key, record{})
	}
	// A record with a debt is counted under c's limit (encode); a fresh
	// one (owed 0) is a full bucket, counted under c's limit from its
	// first grant on, which is what Take makes of it.
	r := &ks.c.recs[i].record
	u := c.limits[0].unit
	b := &ks.tb
	b.Owed, b.Last, b.Expiry = r.owed, r.last, r.expiry
	t := now
	if u != 1 { // a token bucket's unit is the µs: no division
		t = now / u
	}
	rem, granted := b.Take(t, &c.lims[0], n)
	if !granted {
		ks.mu.Unlock()
		return nil, nil, 0, 0, 0
	}
	r.owed, r.last, r.expiry = b.Owed, b.Last, b.Expiry
	if exp := b.Expiry * u; exp > now {
		reset = exp - now
	}
	return c, ks, rem, reset, now
}

// waitUS is a maximum wait in µs (algorithm.Unlimited when negative).
func waitUS(d time.Duration) int64 {
	if d < 0 {
		return algorithm.Unlimited
	}
	return d.Microseconds()
}

// CancelKey implements redlimit.PolicyStore.
func (s *Store) CancelKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, at time.Time, n int64) (int64, error) {
	if n < 1 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	call, err := s.beginKey(ctx, k, &known, false)
	if err != nil || !call.has() {
		if err == nil {
			call.ks.mu.Unlock()
		}
		return 0, err
	}
	defer call.done()
	var least int64 = -1
	for i, lc := range call.c.limits {
		got := call.state(i).Cancel(call.now/lc.unit, call.c.lim(i), at.UnixMicro()/lc.unit, n)
		if least < 0 || got < least {
			least = got
		}
	}
	return max(least, 0), nil
}

// ReleaseKey implements redlimit.PolicyStore.
func (s *Store) ReleaseKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64) (int64, error) {
	if n < 1 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	call, err := s.beginKey(ctx, k, &known, false)
	if err != nil || !call.has() {
		if err == nil {
			call.ks.mu.Unlock()
		}
		return 0, err
	}
	defer call.done()
	var least int64 = -1
	for i, lc := range call.c.limits {
		got := call.state(i).Release(call.now/lc.unit, call.c.lim(i), n)
		if least < 0 || got < least {
			least = got
		}
	}
	return max(least, 0), nil
}

// StatusKey implements redlimit.PolicyStore.
func (s *Store) StatusKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig) (redlimit.PolicyDecision, error) {
	call, err := s.beginKey(ctx, k, &known, false)
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	defer call.ks.mu.Unlock()
	var dbuf [4]algorithm.Decision
	ds := dbuf[:0]
	d := redlimit.PolicyDecision{Granted: true, Refused: -1}
	for i, lc := range call.c.limits {
		t := call.now / lc.unit
		if !call.has() {
			ds = append(ds, algorithm.Decision{Remaining: lc.spec.New().Available(t, call.c.lim(i)), Now: t})
		} else {
			ds = append(ds, algorithm.Decision{Remaining: call.state(i).Available(t, call.c.lim(i)), Now: t})
		}
		if ds[i].Remaining < 1 {
			d.Granted = false
		}
	}
	call.decision(ds, &d)
	return d, nil
}

// PolicyKeys returns how many keys of the policy called name hold a state
// in the store: those not evicted yet. A key's state is evicted by a later
// sweep of its shard once it can no longer change an answer.
func (s *Store) PolicyKeys(name string) int {
	p := s.policyOf(name, false)
	if p == nil {
		return 0
	}
	n := 0
	for i := range p.keys {
		ks := &p.keys[i]
		ks.mu.Lock()
		n += len(ks.m) + ks.c.len()
		ks.mu.Unlock()
	}
	return n
}
