package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
)

// keyShards shards a policy's keys (a power of two).
const keyShards = 64

var _ redlimit.PolicyStore = (*Store)(nil)

// policy is one name's stored policy and its keys' states.
type policy struct {
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
	// since is PolicyConfig.Since in µs (0: unknown).
	since int64
	most  int64
}

// keyShard holds some of a policy's keys.
type keyShard struct {
	mu sync.Mutex
	m  map[string]*keyState
	// next is the size at which an insert sweeps the shard; swept is the
	// store time (µs) of the last sweep.
	next  int
	swept int64
}

// keyState is one key's state on every limit of the policy, under the
// policy's epoch and the version it was last changed under.
type keyState struct {
	epoch, version int64
	states         []algorithm.State
}

// policyOf returns name's policy, creating an empty one when create is set.
func (s *Store) policyOf(name string, create bool) *policy {
	if v, ok := s.policies.Load(name); ok {
		return v.(*policy)
	}
	if !create {
		return nil
	}
	v, _ := s.policies.LoadOrStore(name, new(policy))
	return v.(*policy)
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
	p.most = pc.MaxPermits()
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
		ks.m = nil
		ks.mu.Unlock()
	}
	return had, nil
}

// pcall is one keyed call in progress: its policy and key, locked.
type pcall struct {
	c   *pconf
	ks  *keyShard
	st  *keyState
	now int64 // µs
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
	ks := &p.keys[maphash.String(s.seed, k.Key)&(keyShards-1)]
	now := s.nowUS()
	ks.mu.Lock()
	st := ks.m[k.Key]
	if st == nil && create {
		if len(ks.m) >= max(ks.next, minSweepSize) || now-ks.swept >= sweepEvery.Microseconds() {
			ks.sweep(c, now)
		}
		if ks.m == nil {
			ks.m = make(map[string]*keyState)
		}
		st = &keyState{}
		ks.m[k.Key] = st
	}
	if st != nil {
		st.bring(c)
	}
	return pcall{c: c, ks: ks, st: st, now: now}, nil
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
func (c *pconf) lim(i int) algorithm.Limit {
	lc := c.limits[i]
	l := lc.lim
	l.Since = c.since / lc.unit
	return l
}

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
	for k, st := range ks.m {
		if st.forgotten(c, now) {
			delete(ks.m, k)
		}
	}
	ks.next, ks.swept = 2*len(ks.m), now
}

// parts returns the limits of a call as algorithm parts.
func (k *pcall) parts() []algorithm.Part {
	parts := make([]algorithm.Part, len(k.c.limits))
	for i, lc := range k.c.limits {
		parts[i] = algorithm.Part{Spec: lc.spec, State: k.st.states[i], Limit: k.c.lim(i)}
	}
	return parts
}

// decision fills a PolicyDecision's limits from the rules' decisions.
func (k *pcall) decision(ds []algorithm.Decision, d *redlimit.PolicyDecision) {
	d.Policy = k.c.PolicyConfig
	d.Now = time.UnixMicro(k.now)
	d.Limits = make([]redlimit.LimitState, len(ds))
	for i, ad := range ds {
		u := k.c.limits[i].unit
		ls := redlimit.LimitState{Remaining: ad.Remaining, Wait: time.Duration(ad.Wait*u) * time.Microsecond}
		if k.st != nil {
			if exp := k.st.states[i].ExpiresAt() * u; exp > k.now {
				ls.ResetAfter = time.Duration(exp-k.now) * time.Microsecond
			}
		}
		d.Limits[i] = ls
	}
}

// AcquireKey implements redlimit.PolicyStore.
func (s *Store) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	if n < 1 {
		return redlimit.PolicyDecision{}, (redlimit.Config{}).ValidatePermits(n)
	}
	call, err := s.beginKey(ctx, k, &known, true)
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	defer call.ks.mu.Unlock()
	if n > call.c.most {
		for _, lc := range call.c.limits {
			if lc.max == call.c.most {
				return redlimit.PolicyDecision{}, lc.Config.ValidatePermits(n)
			}
		}
	}
	ds := make([]algorithm.Decision, len(call.c.limits))
	ad := algorithm.AcquireAll(call.parts(), call.now, n, waitUS(maxWait), ds)
	d := redlimit.PolicyDecision{Granted: ad.Granted, Full: ad.Full, Refused: ad.Refused, Wait: time.Duration(ad.Wait) * time.Microsecond}
	call.decision(ds, &d)
	if ad.Granted {
		d.At = d.Now.Add(d.Wait)
	}
	return d, nil
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
	if err != nil || call.st == nil {
		if err == nil {
			call.ks.mu.Unlock()
		}
		return 0, err
	}
	defer call.ks.mu.Unlock()
	var least int64 = -1
	for i, lc := range call.c.limits {
		got := call.st.states[i].Cancel(call.now/lc.unit, call.c.lim(i), at.UnixMicro()/lc.unit, n)
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
	if err != nil || call.st == nil {
		if err == nil {
			call.ks.mu.Unlock()
		}
		return 0, err
	}
	defer call.ks.mu.Unlock()
	var least int64 = -1
	for i, lc := range call.c.limits {
		got := call.st.states[i].Release(call.now/lc.unit, call.c.lim(i), n)
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
	ds := make([]algorithm.Decision, len(call.c.limits))
	d := redlimit.PolicyDecision{Granted: true, Refused: -1}
	for i, lc := range call.c.limits {
		t := call.now / lc.unit
		if call.st == nil {
			ds[i] = algorithm.Decision{Remaining: lc.spec.New().Available(t, call.c.lim(i)), Now: t}
		} else {
			ds[i] = algorithm.Decision{Remaining: call.st.states[i].Available(t, call.c.lim(i)), Now: t}
		}
		if ds[i].Remaining < 1 {
			d.Granted = false
		}
	}
	call.decision(ds, &d)
	return d, nil
}
