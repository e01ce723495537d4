package redisstore

import (
	"context"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/refusalcache"
)

// An exhausted limiter, or an exhausted key of a keyed policy, is asked
// again and again for a permit it does not have. The store answers those
// calls locally, without a round trip, with a refusal cache (package
// refusalcache) in front of itself: the Store's calls go through the
// cache, which calls the store without it (direct) when it cannot answer,
// and clears its entries on the releases, cancels and config or policy
// changes made through the store; the grants the store hands back by
// itself (handback.go) clear them too (forget), and so does a policy
// change made by another process, once the policy channel tells of it.

// DefaultRefusalCache is how long a cached refusal may ignore changes made
// by other processes.
const DefaultRefusalCache = refusalcache.DefaultMaxStale

// WithRefusalCache sets how long a refusal may be answered locally (0 turns
// the cache off, for limiters and keyed policies alike). The default is
// DefaultRefusalCache. A refusal of one permit with none left is answered
// locally until the store said a permit frees, or for maxStale at most: a
// release, a cancelled wait or a config change made through this store
// ends it at once, those made by other processes within maxStale. A
// keyed call refused for n permits answers the next calls for n permits
// on the key that cannot wait (maxWait 0) in the same way. Only refusals
// are cached, never grants, so staleness can refuse a little more, never
// admit more (see package refusalcache).
func WithRefusalCache(maxStale time.Duration) Option {
	return func(s *Store) error {
		s.refusalTTL = maxStale
		return nil
	}
}

// Stats counts what the store did since it was made.
type Stats struct {
	// Calls is the calls made on limiters (acquire, release, cancel,
	// available). LocalRefusals is the calls answered by the refusal
	// cache: limiters' (counted in Calls) and keyed calls' (AcquireKey),
	// LocalKeyRefusals of them.
	Calls, LocalRefusals, LocalKeyRefusals int64
	// ScriptRuns is the limiter scripts sent to Redis: fewer than the calls
	// sent when batching put several in one run.
	ScriptRuns int64
	// Abandoned is the calls whose callers gave up while they were in
	// flight (sent to Redis, or in a run that was); the store saw them
	// through. HandedBack of them had a grant, which the store handed
	// back; HandBackFailed could not be (Redis did not answer in time, or
	// too many were in flight): their permits come back when their instant
	// passes.
	Abandoned, HandedBack, HandBackFailed int64
	// RunSizes counts the script runs by how many calls they carried:
	// RunSizes[i] those of 2^i up to 2^(i+1)-1 calls, the last bucket
	// those of 2^(RunSizeBuckets-1) or more. It shows how many callers
	// batching puts in one round trip (metrics adapters export it as a
	// histogram).
	RunSizes [RunSizeBuckets]int64
	// RunCalls is the calls the script runs carried, in all: the sum of
	// their sizes (RunCalls/ScriptRuns is the mean size).
	RunCalls int64
	// KeyRuns is the runs of keyed calls (a Policy's) sent to Redis, and
	// KeyRunCalls the keyed calls they carried: more than KeyRuns when
	// batching put several in one run. On a Cluster a run of several keys
	// is one pipeline: one round trip to each primary holding some.
	KeyRuns, KeyRunCalls int64
}

// RunSizeBuckets is the number of buckets of Stats.RunSizes.
const RunSizeBuckets = 8

// Stats reports the store's counters.
func (s *Store) Stats() Stats {
	var local, keyed int64
	if s.cache != nil {
		st := s.cache.Stats()
		local, keyed = st.LocalRefusals, st.LocalKeyRefusals
	}
	st := Stats{Calls: s.calls.Load() + local - keyed, LocalRefusals: local, LocalKeyRefusals: keyed, ScriptRuns: s.runs.Load(),
		Abandoned: s.abandoned(), HandedBack: s.hb.handedBack.Load(), HandBackFailed: s.hb.failed.Load()}
	// The other buckets are read first: a run counted between the two
	// reads then shows as a run of one more, never as a negative count.
	var more int64
	for i := range s.runSizes {
		st.RunSizes[i+1] = s.runSizes[i].Load()
		more += st.RunSizes[i+1]
	}
	st.RunSizes[0] = max(0, s.runs.Load()-more)
	st.RunCalls = s.runCalls.Load()
	st.KeyRuns, st.KeyRunCalls = s.keyRuns.Load(), s.keyRunCalls.Load()
	return st
}

// forget tells the refusal cache that permits of key's log may have been
// freed by the store itself.
func (s *Store) forget(key redlimit.Key) {
	if s.cache != nil {
		s.cache.Forget(key)
	}
}

// SetConfig implements redlimit.Store.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if c := s.cache; c != nil {
		return c.SetConfig(ctx, name, cfg, how)
	}
	return s.setConfig(ctx, name, cfg, how)
}

// Acquire implements redlimit.Store.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if c := s.cache; c != nil {
		return c.Acquire(ctx, key, known, n, maxWait)
	}
	return s.acquire(ctx, key, known, n, maxWait)
}

// Cancel implements redlimit.Store.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	if c := s.cache; c != nil {
		return c.Cancel(ctx, key, known, at, n)
	}
	return s.cancel(ctx, key, known, at, n)
}

// Release implements redlimit.Store.
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if c := s.cache; c != nil {
		return c.Release(ctx, key, known, n, upTo)
	}
	return s.release(ctx, key, known, n, upTo)
}

// Delete implements redlimit.Store. The PerClient state of other clients is
// left to expire on its own; it belongs to the deleted limiter's epoch and no
// new config will match it. Clients' keys that hold data redlimit did not
// write, which would never expire, are removed (as by SetConfig with
// SetResetState).
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	if c := s.cache; c != nil {
		return c.Delete(ctx, name)
	}
	return s.delete(ctx, name)
}

// Expire implements redlimit.Store.
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if c := s.cache; c != nil {
		return c.Expire(ctx, name, ttl)
	}
	return s.expire(ctx, name, ttl)
}

// ClearExpire implements redlimit.Store.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	if c := s.cache; c != nil {
		return c.ClearExpire(ctx, name)
	}
	return s.clearExpire(ctx, name)
}

// SetPolicy implements redlimit.PolicyStore.
func (s *Store) SetPolicy(ctx context.Context, name string, p redlimit.PolicyConfig, how redlimit.SetMode) (redlimit.PolicyConfig, bool, error) {
	if c := s.cache; c != nil {
		return c.SetPolicy(ctx, name, p, how)
	}
	return s.setPolicyConfig(ctx, name, p, how)
}

// DeletePolicy implements redlimit.PolicyStore.
func (s *Store) DeletePolicy(ctx context.Context, name string) (bool, error) {
	if c := s.cache; c != nil {
		return c.DeletePolicy(ctx, name)
	}
	return s.deletePolicy(ctx, name)
}

// AcquireKey implements redlimit.PolicyStore. A refused call is answered
// locally to the next calls for as many permits on the key that cannot
// wait, as a limiter's (package refusalcache says how).
func (s *Store) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	if c := s.cache; c != nil {
		return c.AcquireKey(ctx, k, known, n, maxWait)
	}
	return s.acquireKey(ctx, k, known, n, maxWait)
}

// CancelKey implements redlimit.PolicyStore.
func (s *Store) CancelKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, at time.Time, n int64) (int64, error) {
	if c := s.cache; c != nil {
		return c.CancelKey(ctx, k, known, at, n)
	}
	return s.cancelKey(ctx, k, known, at, n)
}

// ReleaseKey implements redlimit.PolicyStore.
func (s *Store) ReleaseKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64) (int64, error) {
	if c := s.cache; c != nil {
		return c.ReleaseKey(ctx, k, known, n)
	}
	return s.releaseKey(ctx, k, known, n)
}

// direct is the store without its refusal cache: what the cache wraps.
type direct Store

var _ redlimit.Store = (*direct)(nil)

func (d *direct) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	return (*Store)(d).setConfig(ctx, name, cfg, how)
}

func (d *direct) Config(ctx context.Context, name string) (redlimit.Config, error) {
	return (*Store)(d).Config(ctx, name)
}

func (d *direct) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	return (*Store)(d).acquire(ctx, key, known, n, maxWait)
}

func (d *direct) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	return (*Store)(d).cancel(ctx, key, known, at, n)
}

func (d *direct) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	return (*Store)(d).release(ctx, key, known, n, upTo)
}

func (d *direct) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	return (*Store)(d).Available(ctx, key, known)
}

func (d *direct) Delete(ctx context.Context, name string) (bool, error) {
	return (*Store)(d).delete(ctx, name)
}

func (d *direct) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	return (*Store)(d).expire(ctx, name, ttl)
}

func (d *direct) ClearExpire(ctx context.Context, name string) (bool, error) {
	return (*Store)(d).clearExpire(ctx, name)
}

var _ redlimit.PolicyStore = (*direct)(nil)

func (d *direct) SetPolicy(ctx context.Context, name string, p redlimit.PolicyConfig, how redlimit.SetMode) (redlimit.PolicyConfig, bool, error) {
	return (*Store)(d).setPolicyConfig(ctx, name, p, how)
}

func (d *direct) Policy(ctx context.Context, name string) (redlimit.PolicyConfig, error) {
	return (*Store)(d).Policy(ctx, name)
}

func (d *direct) DeletePolicy(ctx context.Context, name string) (bool, error) {
	return (*Store)(d).deletePolicy(ctx, name)
}

func (d *direct) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	return (*Store)(d).acquireKey(ctx, k, known, n, maxWait)
}

func (d *direct) CancelKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, at time.Time, n int64) (int64, error) {
	return (*Store)(d).cancelKey(ctx, k, known, at, n)
}

func (d *direct) ReleaseKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64) (int64, error) {
	return (*Store)(d).releaseKey(ctx, k, known, n)
}

func (d *direct) StatusKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig) (redlimit.PolicyDecision, error) {
	return (*Store)(d).StatusKey(ctx, k, known)
}
