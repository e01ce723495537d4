package refusalcache

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/internal/striped"
)

// Keyed policies (redlimit.PolicyStore) get the same cache, per policy and
// key. When the store refuses a keyed call for n permits that could not be
// granted at once on every limit (not a full queue: see below), the next
// calls for the same n permits on the same policy and key that cannot wait
// (maxWait 0) are answered locally until the request's retry-after, MaxStale
// after the call, or the instant one of the limits would be whole again,
// whichever comes first.
//
// A cached answer is the store's at that instant in all but one field: its
// Wait, Now, Refused, and each limit's Wait and ResetAfter are those of the
// refusal counted down by the time since (each limit in its algorithm's
// unit, as the store counts), which is what the store answers while no
// state changes (a refusal changes none). Each limit's Remaining is the one
// at the refusal: a limit that did not refuse may regain permits meanwhile
// (a token bucket refills), at instants the refusal does not tell, so a
// cached Remaining may be lower than the store's by what was regained since,
// never higher. A refusal of a full leaky-bucket queue is not cached: the
// queue may have room again before the retry-after, which the refusal does
// not tell either. Calls for another count of permits go to the store (a
// larger request's retry-after is later, and the refusal does not say by
// how much).
//
// Entries are dropped by the changes made through the cache: ReleaseKey and
// CancelKey of the key, SetPolicy and DeletePolicy of the policy (and, as
// for limiters, a refusal whose call was sent before such a change is not
// cached); by any answer of the store showing another version of the policy
// than the entries were made under (a change made elsewhere), and any call
// whose known policy is newer; and by the store's answer to any call of the
// key. Only refused keys hold entries, each swept once past its end, and at
// most Settings.MaxKeyEntries are held.

// DefaultMaxKeyEntries bounds the keyed refusals held, unless Settings say
// otherwise.
const DefaultMaxKeyEntries = 1 << 17

// keyShards shards a policy's entries (a power of two), so that the keys
// of one busy policy do not all wait on one lock.
const keyShards = 16

// keyPolicy is the entries of one policy, all made under one version of it.
type keyPolicy struct {
	cfg    redlimit.PolicyConfig
	shards [keyShards]keyShard
}

type keyShard struct {
	// mu is read-locked by lookups: the callers of one exhausted key
	// all read its entry.
	mu sync.RWMutex
	m  map[string]*keyEntry
	// dead: the policy's entries were dropped; nothing is put here again.
	dead bool
}

// keyEntry is a cached keyed refusal.
type keyEntry struct {
	sent  time.Time // when the call was sent, by the cache's clock
	valid time.Time // the entry is used before then
	now   time.Time // the refusal's PolicyDecision.Now
	n     int64
	// us is the store's instant of the call in µs: sent truncated.
	us     time.Time
	limits []keyLimit
}

// keyLimit is one limit's part of a refusal.
type keyLimit struct {
	unit time.Duration // its algorithm's unit of time
	// until is when it would grant, from sent truncated to unit; reset is
	// its ResetAfter, from us.
	until, reset time.Duration
	remaining    int64
}

func (s *Store) policyStore() (redlimit.PolicyStore, error) {
	if s.pstore == nil {
		return nil, &redlimit.ArgumentError{Arg: "store", Reason: "the store under the cache does not keep keyed policies", Kind: redlimit.ErrInvalidArgument}
	}
	return s.pstore, nil
}

// AcquireKey implements redlimit.PolicyStore: a call for n permits that
// cannot wait, on a key with a cached refusal of n permits that still
// holds, is answered locally.
func (s *Store) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	ps, err := s.policyStore()
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	if maxWait == 0 && s.keyEntries.Load() != 0 {
		if d, ok := s.cachedKey(k, &known, n); ok {
			return d, nil
		}
	}
	sent, gen := s.now(), s.gen.Load()
	d, err := ps.AcquireKey(ctx, k, known, n, maxWait)
	if err == nil {
		s.noteKey(k, sent, gen, n, &d)
	}
	return d, err
}

// cachedKey answers a call for n permits that cannot wait from the cache
// when it can.
func (s *Store) cachedKey(k redlimit.PolicyKey, known *redlimit.PolicyConfig, n int64) (redlimit.PolicyDecision, bool) {
	v, ok := s.keyed.Load(k.Policy)
	if !ok {
		return redlimit.PolicyDecision{}, false
	}
	p := v.(*keyPolicy)
	if len(known.Limits) != 0 && (known.Epoch != p.cfg.Epoch || known.Version > p.cfg.Version ||
		known.Version == p.cfg.Version && !known.SameLimits(p.cfg)) {
		// The caller knows another policy: the store decides, and its
		// answer (noteKey) drops the entries if they are out of date.
		return redlimit.PolicyDecision{}, false
	}
	ks := p.shard(k.Key)
	ks.mu.RLock()
	e := ks.m[k.Key]
	ks.mu.RUnlock()
	if e == nil || e.n != n {
		return redlimit.PolicyDecision{}, false
	}
	now := s.now()
	if !now.Before(e.valid) {
		ks.mu.Lock()
		if ks.m[k.Key] == e {
			delete(ks.m, k.Key)
			s.keyEntries.Add(-1)
		}
		ks.mu.Unlock()
		return redlimit.PolicyDecision{}, false
	}
	// Bad arguments get the store's error, as if the cache were not there
	// (the key was good when cached; a config restored from known is not
	// at stake: the store has the policy).
	if k.Validate() != nil {
		return redlimit.PolicyDecision{}, false
	}
	// The store's instant now, as Acquire counts it (cached).
	at := e.sent.Add(now.Sub(e.sent))
	us := at.Truncate(time.Microsecond)
	d := redlimit.PolicyDecision{Refused: -1, Now: e.now.Add(us.Sub(e.us)), Policy: p.cfg, Limits: make([]redlimit.LimitState, len(e.limits)), Cached: true}
	for i, l := range e.limits {
		// Each limit counts in its unit from its own instant of the call.
		wait := max(e.sent.Truncate(l.unit).Add(l.until).Sub(at.Truncate(l.unit)), 0)
		d.Limits[i] = redlimit.LimitState{Remaining: l.remaining, ResetAfter: max(l.reset-us.Sub(e.us), 0), Wait: wait}
		// The refusing limit: the first whose wait is the latest
		// (algorithm.AcquireAll).
		if wait > d.Wait {
			d.Wait, d.Refused = wait, i
		}
	}
	if d.Wait <= 0 {
		return redlimit.PolicyDecision{}, false // granted by now: the store's to say
	}
	s.hits.Add(1)
	s.keyHits.Add(1)
	return d, true
}

// shard returns key's shard.
func (p *keyPolicy) shard(key string) *keyShard {
	return &p.shards[maphash.String(shardSeed, key)&(keyShards-1)]
}

var shardSeed = maphash.MakeSeed()

// noteKey records the store's answer d to a keyed call for n permits sent
// at sent, when the cache's generation was gen.
func (s *Store) noteKey(k redlimit.PolicyKey, sent time.Time, gen uint64, n int64, d *redlimit.PolicyDecision) {
	cacheable := !d.Granted && !d.Full && d.Wait > 0 && d.Refused >= 0 && len(d.Limits) == len(d.Policy.Limits)
	p := s.keyPolicyOf(k.Policy, &d.Policy, cacheable)
	if !cacheable {
		if p != nil {
			p.drop(s, k.Key) // the entry, if any, is out of date
		}
		return
	}
	if p == nil || s.gen.Load() != gen {
		return // permits may have been freed since the call was sent
	}
	e := &keyEntry{sent: sent, us: sent.Truncate(time.Microsecond), now: d.Now, n: n, limits: make([]keyLimit, len(d.Limits))}
	e.valid = sent.Add(min(d.Wait, s.maxStale))
	for i, ls := range d.Limits {
		spec := algorithm.Lookup(string(d.Policy.Limits[i].Algorithm))
		if spec == nil {
			return // not an algorithm the rules know: nothing to rely on
		}
		e.limits[i] = keyLimit{unit: spec.Unit, until: ls.Wait, reset: ls.ResetAfter, remaining: ls.Remaining}
		if ls.ResetAfter > 0 {
			// Whole again then: its Remaining is no longer the refusal's.
			e.valid = minTime(e.valid, e.us.Add(ls.ResetAfter))
		}
	}
	if !sent.Before(e.valid) {
		return
	}
	p.put(s, k.Key, e)
	if s.gen.Load() != gen {
		p.drop(s, k.Key) // a change came in between: take it back
	}
}

// keyPolicyOf returns the entries of policy name, made under cfg's version:
// entries made under another are dropped (a change the cache did not see),
// and a newer version than the cache's gets a new set. It returns nil when
// cfg is older than the entries' (a stale answer: nothing to learn from it),
// or when there are none and create is false.
func (s *Store) keyPolicyOf(name string, cfg *redlimit.PolicyConfig, create bool) *keyPolicy {
	for {
		v, ok := s.keyed.Load(name)
		if ok {
			p := v.(*keyPolicy)
			switch {
			case p.cfg.Epoch == cfg.Epoch && p.cfg.Version == cfg.Version:
				return p
			case p.cfg.Epoch == cfg.Epoch && p.cfg.Version > cfg.Version:
				return nil
			}
			if s.keyed.CompareAndDelete(name, p) {
				p.kill(s)
			}
			continue
		}
		if !create || len(cfg.Limits) == 0 {
			return nil
		}
		p := &keyPolicy{cfg: *cfg}
		if _, loaded := s.keyed.LoadOrStore(name, p); !loaded {
			return p
		}
	}
}

// put stores e as key's entry, unless the cache holds as many as it may.
func (p *keyPolicy) put(s *Store, key string, e *keyEntry) {
	if n := s.keyEntries.Load(); n >= s.keySweepAt.Load() || n >= s.maxKeyEntries {
		s.sweepKeys(e.sent)
	}
	ks := p.shard(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.dead {
		return
	}
	if _, had := ks.m[key]; had {
		ks.m[key] = e
		return
	}
	if s.keyEntries.Add(1) > s.maxKeyEntries {
		s.keyEntries.Add(-1) // full: not cached
		return
	}
	if ks.m == nil {
		ks.m = make(map[string]*keyEntry)
	}
	ks.m[strings.Clone(key)] = e // not a part of a caller's larger buffer
}

// sweepKeys removes the keyed entries past their end at now, so that keys
// refused once and never asked again do not hold memory. The next sweep
// waits until the entries doubled, so that each entry stored pays for a
// bounded share; or, when the cache is full, until the first entry left
// ends (none can go before).
func (s *Store) sweepKeys(now time.Time) {
	if !s.keySweeping.CompareAndSwap(false, true) {
		return
	}
	defer s.keySweeping.Store(false)
	if s.keyEntries.Load() < s.keySweepAt.Load() && now.UnixNano() < s.keySweepAfter.Load() {
		return
	}
	var first time.Time
	s.keyed.Range(func(_, v any) bool {
		p := v.(*keyPolicy)
		for i := range p.shards {
			ks := &p.shards[i]
			ks.mu.Lock()
			for k, e := range ks.m {
				switch {
				case !now.Before(e.valid):
					delete(ks.m, k)
					s.keyEntries.Add(-1)
				case first.IsZero() || e.valid.Before(first):
					first = e.valid
				}
			}
			if len(ks.m) == 0 {
				ks.m = nil // a map keeps its room when emptied
			}
			ks.mu.Unlock()
		}
		return true
	})
	s.keySweepAt.Store(max(2*s.keyEntries.Load(), minSweep))
	s.keySweepAfter.Store(first.UnixNano())
}

// drop removes key's entry.
func (p *keyPolicy) drop(s *Store, key string) {
	ks := p.shard(key)
	ks.mu.Lock()
	if _, had := ks.m[key]; had {
		delete(ks.m, key)
		s.keyEntries.Add(-1)
	}
	ks.mu.Unlock()
}

// kill drops every entry of p, for good.
func (p *keyPolicy) kill(s *Store) {
	for i := range p.shards {
		ks := &p.shards[i]
		ks.mu.Lock()
		s.keyEntries.Add(-int64(len(ks.m)))
		ks.m, ks.dead = nil, true
		ks.mu.Unlock()
	}
}

// ForgetKey drops the entry of a policy's key and keeps the refusals then
// in flight out of the cache: permits of the key may have been freed.
func (s *Store) ForgetKey(k redlimit.PolicyKey) {
	s.gen.Add(1)
	if s.keyEntries.Load() == 0 {
		return
	}
	if v, ok := s.keyed.Load(k.Policy); ok {
		v.(*keyPolicy).drop(s, k.Key)
	}
}

// ForgetPolicy drops the entries of every key of policy name and keeps the
// refusals then in flight out of the cache: its limits may have changed.
func (s *Store) ForgetPolicy(name string) {
	s.gen.Add(1)
	if v, ok := s.keyed.LoadAndDelete(name); ok {
		v.(*keyPolicy).kill(s)
	}
}

// SetPolicy implements redlimit.PolicyStore. The policy's entries go once
// the store answered.
func (s *Store) SetPolicy(ctx context.Context, name string, p redlimit.PolicyConfig, how redlimit.SetMode) (redlimit.PolicyConfig, bool, error) {
	ps, err := s.policyStore()
	if err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	stored, set, err := ps.SetPolicy(ctx, name, p, how)
	s.ForgetPolicy(name)
	return stored, set, err
}

// Policy implements redlimit.PolicyStore: the store's answer.
func (s *Store) Policy(ctx context.Context, name string) (redlimit.PolicyConfig, error) {
	ps, err := s.policyStore()
	if err != nil {
		return redlimit.PolicyConfig{}, err
	}
	return ps.Policy(ctx, name)
}

// DeletePolicy implements redlimit.PolicyStore, as SetPolicy.
func (s *Store) DeletePolicy(ctx context.Context, name string) (bool, error) {
	ps, err := s.policyStore()
	if err != nil {
		return false, err
	}
	existed, err := ps.DeletePolicy(ctx, name)
	s.ForgetPolicy(name)
	return existed, err
}

// CancelKey implements redlimit.PolicyStore. The key's entry goes once the
// store answered (or failed: the cancel may have been made).
func (s *Store) CancelKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, at time.Time, n int64) (int64, error) {
	ps, err := s.policyStore()
	if err != nil {
		return 0, err
	}
	got, err := ps.CancelKey(ctx, k, known, at, n)
	s.ForgetKey(k)
	return got, err
}

// ReleaseKey implements redlimit.PolicyStore, as CancelKey.
func (s *Store) ReleaseKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64) (int64, error) {
	ps, err := s.policyStore()
	if err != nil {
		return 0, err
	}
	got, err := ps.ReleaseKey(ctx, k, known, n)
	s.ForgetKey(k)
	return got, err
}

// StatusKey implements redlimit.PolicyStore: the store's answer.
func (s *Store) StatusKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig) (redlimit.PolicyDecision, error) {
	ps, err := s.policyStore()
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	return ps.StatusKey(ctx, k, known)
}

var _ redlimit.PolicyStore = (*Store)(nil)

// keyCache is the keyed part of a Store.
type keyCache struct {
	pstore redlimit.PolicyStore // nil: the store keeps no policies
	// keyed maps a policy's name to its entries; keyEntries counts the
	// entries of every policy, bounded by maxKeyEntries.
	keyed         sync.Map // -> *keyPolicy
	keyEntries    atomic.Int64
	maxKeyEntries int64
	keyHits       striped.Counter
	// keySweepAt is the entry count that triggers the next sweep (at
	// least minSweep); keySweepAfter the instant (ns) before which a full
	// cache finds nothing to sweep; keySweeping is held by the sweeper.
	keySweepAt    atomic.Int64
	keySweepAfter atomic.Int64
	keySweeping   atomic.Bool
}
