package redisstore

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
)

// An exhausted limiter is asked again and again for a permit it does not
// have. When the store refused one permit with none left and said when one
// frees, the same refusal is answered here until then, without a round
// trip: nothing can make a permit appear earlier but a release, a
// cancelled wait or a config change, and those made through this store
// clear the entry. Those made by other processes cannot be seen, so an
// entry lives at most maxStale: a cached answer is only ever a refusal,
// never a grant, so staleness can refuse a little more, never admit more.

// DefaultRefusalCache is how long a cached refusal may ignore changes made
// by other processes.
const DefaultRefusalCache = 250 * time.Millisecond

// WithRefusalCache sets how long a refusal may be answered locally (0 turns
// the cache off). The default is DefaultRefusalCache.
func WithRefusalCache(maxStale time.Duration) Option {
	return func(s *Store) error {
		s.refusalTTL = maxStale
		return nil
	}
}

// refusal is a cached "no permit until".
type refusal struct {
	until time.Time // when a permit frees (the store's clock, or the local monotonic one)
	valid time.Time // the entry is used until then: until, or maxStale after the reply
	cfg   *redlimit.Config
	// full: a leaky bucket's queue had no room. Such an entry answers only
	// calls that cannot wait (TryAcquire), for which Decision.Full is not
	// asked: a waiting call goes to the store, which says whether the
	// queue is still full.
	full bool
}

type refusals struct {
	// overall maps a name to its Overall log's refusal, perClient a
	// logKey to a client's; entries counts both, so that the common case,
	// no entry at all, costs one atomic load.
	overall, perClient sync.Map
	entries            atomic.Int64
	hits               counter
	// gen counts the changes made through the store that may free permits
	// (releases, cancels, config changes): a refusal whose call was sent
	// before one of them is not cached, whichever reply arrives first.
	gen atomic.Uint64
}

// load returns the entry of key's log, whatever its mode.
func (rs *refusals) load(key redlimit.Key) (refusal, bool) {
	if rs.entries.Load() == 0 {
		return refusal{}, false
	}
	v, ok := rs.overall.Load(key.Name)
	if !ok {
		if v, ok = rs.perClient.Load(logKey(key)); !ok {
			return refusal{}, false
		}
	}
	return v.(refusal), true
}

func (rs *refusals) store(key redlimit.Key, mode redlimit.Mode, r refusal) {
	var had bool
	if mode == redlimit.PerClient {
		_, had = rs.perClient.Swap(logKey(key), r)
	} else {
		_, had = rs.overall.Swap(key.Name, r)
	}
	if !had {
		rs.entries.Add(1)
	}
}

// drop clears the entry of key's log, whatever its mode.
func (rs *refusals) drop(key redlimit.Key) {
	if rs.entries.Load() == 0 {
		return
	}
	if _, had := rs.overall.LoadAndDelete(key.Name); had {
		rs.entries.Add(-1)
	}
	if _, had := rs.perClient.LoadAndDelete(logKey(key)); had {
		rs.entries.Add(-1)
	}
}

// Stats counts what the store did since it was made.
type Stats struct {
	// Calls is the calls made on limiters (acquire, release, cancel,
	// available); LocalRefusals of them were answered by the refusal cache.
	Calls, LocalRefusals int64
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
}

// Stats reports the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Calls: s.calls.Load(), LocalRefusals: s.refusals.hits.Load(), ScriptRuns: s.runs.Load(),
		Abandoned: s.hb.abandoned.Load(), HandedBack: s.hb.handedBack.Load(), HandBackFailed: s.hb.failed.Load()}
}

func (s *Store) localNow() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// logKey names a client's log of a limiter: its PerClient refusals and the
// lanes of clients other than the one a name's lane belongs to (the
// Overall log is named by the limiter's name alone, in maps of its own).
func logKey(key redlimit.Key) string { return key.Name + "\x00" + key.Client }

// cachedRefusal answers a call for one permit locally when it can: it
// returns the retry-after and the time it read.
func (s *Store) cachedRefusal(key redlimit.Key, maxWait int64) (time.Duration, time.Time, *redlimit.Config, bool) {
	if s.refusalTTL <= 0 {
		return 0, time.Time{}, nil, false
	}
	r, ok := s.refusals.load(key)
	if !ok {
		return 0, time.Time{}, nil, false
	}
	now := s.localNow()
	if !now.Before(r.valid) || (r.full && maxWait != 0) {
		return 0, time.Time{}, nil, false
	}
	// The store's clock counts whole units: the retry-after is until less
	// the unit now is in, as the store would answer (maxWait, in µs, is
	// then compared as the script compares it).
	now = now.Truncate(grain(r.cfg))
	left := r.until.Sub(now)
	// Only while nothing can be granted in the caller's wait; a caller who
	// may wait long enough gets a reservation from the store.
	if left <= 0 || maxWait < 0 || maxWait >= left.Microseconds() {
		return 0, time.Time{}, nil, false
	}
	s.refusals.hits.Add(1)
	return left, now, r.cfg, true
}

// grain is the unit the store's clock counts in for cfg's algorithm: a
// microsecond, or a millisecond for the sliding log (limiter.lua's unit).
func grain(cfg *redlimit.Config) time.Duration {
	if cfg.Algorithm == redlimit.SlidingLog {
		return time.Millisecond
	}
	return time.Microsecond
}

// noteAcquire records the answer to a call for n permits sent at sent.
// gen was the refusals' generation when the call was sent.
func (s *Store) noteAcquire(key redlimit.Key, sent time.Time, gen uint64, n int64, r reply) {
	if s.refusalTTL <= 0 {
		return
	}
	if (r.code == 0 || r.code == 2) && n == 1 && r.value == 0 && r.wait > 0 {
		if s.refusals.gen.Load() != gen {
			return // permits may have been freed since: do not cache
		}
		wait := time.Duration(r.wait) * time.Microsecond
		until := sent.Truncate(grain(r.cfg)).Add(wait)
		s.refusals.store(key, r.cfg.Mode, refusal{until: until, valid: sent.Add(min(wait, s.refusalTTL)), cfg: r.cfg, full: r.code == 2})
		if s.refusals.gen.Load() != gen {
			s.refusals.drop(key) // a change came in between: take it back
		}
		return
	}
	s.refusals.drop(key)
}

// forget clears the entry of key's log, whatever its mode.
func (s *Store) forget(key redlimit.Key) {
	s.refusals.gen.Add(1)
	s.refusals.drop(key)
}

// forgetName clears the entries of every log of name.
func (s *Store) forgetName(name string) {
	s.refusals.gen.Add(1)
	if _, had := s.refusals.overall.LoadAndDelete(name); had {
		s.refusals.entries.Add(-1)
	}
	prefix := name + "\x00"
	s.refusals.perClient.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			if _, had := s.refusals.perClient.LoadAndDelete(k); had {
				s.refusals.entries.Add(-1)
			}
		}
		return true
	})
}
