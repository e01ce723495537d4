// Package refusalcache puts a refusal cache in front of any redlimit.Store:
// an exhausted limiter's refusals are answered locally, without asking the
// store, until the store said a permit frees.
//
// An exhausted limiter is asked again and again for a permit it does not
// have; each of those calls costs the store a decision (for a remote store,
// a round trip) that it already made. When the store refuses one permit,
// with none left, and says how long until one frees, the cache answers the
// same refusal to the next calls for one permit on the same log (the
// limiter's, or a PerClient limiter's client's), counting the retry-after
// down, until that instant or MaxStale after the call, whichever comes
// first. It answers only refusals, never a grant, and only to a call that
// cannot wait long enough to be granted; a call for more than one permit,
// or one that may wait until a permit frees, goes to the store.
//
// Why the answer is exact: in every algorithm a refusal changes no state
// (it can be answered again without asking). So between the refusal and the
// instant it named, the store's answer to the same call changes only if
// someone changes the state: a release, a cancelled reservation, a new
// config, a deletion or an expiry. Those made through this Store clear the
// entries they may affect (by key, or by name for SetConfig, Delete and
// Expire), and a refusal whose call was sent before such a change finished
// is not cached, whichever reply arrives first. Grants made meanwhile only
// take permits, which never makes a refusal wrong. Changes made by other
// processes (or by other Store values on the same data) cannot be seen: a
// refusal may then be answered for at most MaxStale after they freed a
// permit, and such staleness can only refuse more, never admit more.
//
// Time: the cache counts an entry's life from the instant the call was
// sent, by its own clock (Settings.Clock), never from the store's clock, so
// it needs no mapping between the two: the store decided at that instant
// or later, so a permit cannot free before the entry ends. A cached
// refusal's Decision.Now is the store's Now of the refusal plus the time
// since it was made; when the store's time is the cache's clock (a memory
// store, or a store given the same clock), a cached answer equals the
// store's answer at that instant. The store's clock is assumed to count as
// redlimit's rules do (whole µs, whole ms for the sliding log), as memstore
// and redisstore do; against a store on another machine's clock, an entry
// may end up to one such unit late.
//
// Keyed policies: when the wrapped store is a redlimit.PolicyStore, so is
// the cache, and a refused AcquireKey of n permits answers the next calls
// for n permits on that policy and key that cannot wait, in the same way
// (keyed.go), each limit's state counted down; only a limit's Remaining
// is the one at the refusal, which may be lower than the store's by what
// the limit regained since. (Over a store that keeps no policies, the
// keyed calls fail with ErrInvalidArgument.)
//
// A Store is made once and shared by every Limiter on the wrapped store:
// its entries and its view of the changes are its own.
//
//	mem := memstore.New()
//	store, _ := refusalcache.New(mem, refusalcache.Settings{})
//	l, _ := redlimit.New(store, "api", redlimit.WithConfig(cfg))
//
// redisstore uses it by default (redisstore.WithRefusalCache).
package refusalcache

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/striped"
)

// DefaultMaxStale is how long a cached refusal may ignore changes made by
// other processes, unless Settings say otherwise.
const DefaultMaxStale = 250 * time.Millisecond

// Settings tune a cache; the zero value of each field takes its default.
type Settings struct {
	// MaxStale is the longest an entry is used after its call was sent:
	// how late changes made by other processes (a release freeing a
	// permit) may be seen. Default (0): DefaultMaxStale. Negative is an
	// error.
	MaxStale time.Duration
	// Clock measures an entry's age (tests pass a *clock.Fake). Default:
	// the real clock.
	Clock clock.Clock
	// MaxKeyEntries bounds the refusals of keyed calls held at once
	// (keyed.go): a refusal made while the cache holds that many is not
	// cached. Default (0): DefaultMaxKeyEntries. Negative is an error.
	MaxKeyEntries int
}

// Stats are a cache's counters.
type Stats struct {
	// LocalRefusals counts the calls answered by the cache, since New;
	// LocalKeyRefusals of them were keyed calls (AcquireKey).
	LocalRefusals, LocalKeyRefusals int64
	// Entries is the refusals held now (entries past their end included
	// until they are swept or replaced); KeyEntries of keyed calls.
	Entries, KeyEntries int64
}

// Store is a redlimit.Store whose refusals are cached. It is safe for
// concurrent use.
type Store struct {
	store    redlimit.Store
	maxStale time.Duration
	clock    clock.Clock // nil: time.Now, without an interface call

	// overall maps a limiter's name to its Overall log's entry, perClient
	// a name NUL client to a client's entry; entries counts both, so that
	// the common case, no entry at all, costs one atomic load.
	overall, perClient sync.Map // -> *entry
	entries            atomic.Int64
	// sweepAt is the entry count that triggers the next sweep of entries
	// past their end; sweeping is held by the one sweeper.
	sweepAt  atomic.Int64
	sweeping atomic.Bool
	hits     striped.Counter
	// gen counts the changes made through the cache that may free permits
	// (releases, cancels, config changes, deletions, expiries): a refusal
	// whose call was sent before one of them is not cached.
	gen atomic.Uint64
	// expiries bounds the entries of names given a TTL through Expire
	// (expiry.go); expiring is its size, read without the lock.
	expiryMu sync.Mutex
	expiries map[string]expiry
	expiring atomic.Int64

	keyCache
}

var _ redlimit.Store = (*Store)(nil)

// minSweep is the fewest entries that make a sweep worth it.
const minSweep = 1024

// entry is a cached "no permit until".
type entry struct {
	sent  time.Time     // when the call was sent, by the cache's clock
	base  time.Time     // sent truncated to the store's unit: the store's instant
	until time.Time     // base + the refusal's wait: when a permit frees
	valid time.Time     // the entry is used before then
	now   time.Time     // the refusal's Decision.Now
	unit  time.Duration // the unit the store's clock counts in for cfg's algorithm
	cfg   redlimit.Config
	// tryOnly: the entry answers only calls that cannot wait (maxWait 0).
	// A leaky bucket's full queue refuses whatever the wait, which a call
	// that may wait must learn from the store (Decision.Full); and a
	// refusal of a call that could not wait may not have said whether the
	// queue was full.
	tryOnly, full bool
}

// New returns a cache in front of store.
func New(store redlimit.Store, set Settings) (*Store, error) {
	if store == nil {
		return nil, &redlimit.ArgumentError{Arg: "store", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	if set.MaxStale < 0 {
		return nil, &redlimit.ArgumentError{Arg: "max stale", Value: set.MaxStale.String(), Reason: "must not be negative", Kind: redlimit.ErrInvalidArgument}
	}
	if set.MaxKeyEntries < 0 {
		return nil, &redlimit.ArgumentError{Arg: "max key entries", Value: strconv.Itoa(set.MaxKeyEntries), Reason: "must not be negative", Kind: redlimit.ErrInvalidArgument}
	}
	if set.MaxStale == 0 {
		set.MaxStale = DefaultMaxStale
	}
	if set.MaxKeyEntries == 0 {
		set.MaxKeyEntries = DefaultMaxKeyEntries
	}
	s := &Store{store: store, maxStale: set.MaxStale, clock: set.Clock}
	s.pstore, _ = store.(redlimit.PolicyStore)
	s.maxKeyEntries = int64(set.MaxKeyEntries)
	s.sweepAt.Store(minSweep)
	s.keySweepAt.Store(minSweep)
	return s, nil
}

// Unwrap returns the store the cache is in front of.
func (s *Store) Unwrap() redlimit.Store { return s.store }

// Stats reports the cache's counters.
func (s *Store) Stats() Stats {
	keyEntries := s.keyEntries.Load()
	return Stats{LocalRefusals: s.hits.Load(), LocalKeyRefusals: s.keyHits.Load(), Entries: s.entries.Load() + keyEntries, KeyEntries: keyEntries}
}

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// logKey names a client's log of a limiter in perClient.
func logKey(key redlimit.Key) string { return key.Name + "\x00" + key.Client }

// Acquire implements redlimit.Store: a call for one permit on a log with a
// cached refusal that still holds for the call's wait is answered locally.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if n == 1 && s.entries.Load() != 0 {
		if d, ok := s.cached(key, &known, maxWait); ok {
			return d, nil
		}
	}
	sent, gen := s.now(), s.gen.Load()
	d, err := s.store.Acquire(ctx, key, known, n, maxWait)
	if err == nil {
		s.note(key, sent, gen, n, maxWait, &d)
	}
	return d, err
}

// load returns the entry of key's log, whatever its mode.
func (s *Store) load(key redlimit.Key) *entry {
	v, ok := s.overall.Load(key.Name)
	if !ok {
		if v, ok = s.perClient.Load(logKey(key)); !ok {
			return nil
		}
	}
	return v.(*entry)
}

// cached answers a call for one permit from the cache when it can.
func (s *Store) cached(key redlimit.Key, known *redlimit.Config, maxWait time.Duration) (redlimit.Decision, bool) {
	e := s.load(key)
	if e == nil || (e.tryOnly && maxWait != 0) {
		return redlimit.Decision{}, false
	}
	now := s.now()
	if !now.Before(e.valid) {
		return redlimit.Decision{}, false
	}
	// The store's instant now: the time elapsed since the call was sent
	// (monotonic where the clock has it) after the call's instant, in
	// whole units of the store's clock.
	at := e.sent.Add(now.Sub(e.sent)).Truncate(e.unit)
	left := e.until.Sub(at)
	// Only while nothing can be granted within the caller's wait, compared
	// in µs as the stores compare it; a caller who may wait long enough
	// gets a reservation from the store.
	if left <= 0 || maxWait < 0 || maxWait.Microseconds() >= left.Microseconds() {
		return redlimit.Decision{}, false
	}
	// Bad arguments get the store's error, as if the cache were not there.
	if key.Validate() != nil {
		return redlimit.Decision{}, false
	}
	if known.Rate != 0 && !known.Equal(&e.cfg) {
		if _, err := known.Normalize(); err != nil {
			return redlimit.Decision{}, false
		}
	}
	s.hits.Add(1)
	return redlimit.Decision{Wait: left, Now: e.now.Add(at.Sub(e.base)), Config: e.cfg, Full: e.full, Cached: true}, true
}

// note records the store's answer d to a call for n permits sent at sent,
// when the cache's generation was gen.
func (s *Store) note(key redlimit.Key, sent time.Time, gen uint64, n int64, maxWait time.Duration, d *redlimit.Decision) {
	if n != 1 || d.Granted || d.Remaining != 0 || d.Wait <= 0 {
		if s.entries.Load() != 0 {
			s.drop(key) // a grant says the entry, if any, is out of date
		}
		return
	}
	if s.gen.Load() != gen {
		return // permits may have been freed since the call was sent
	}
	// The algorithm's spec says the unit its rules count time in (the
	// store's instants are whole units) and whether it can refuse for a
	// full queue whatever the wait.
	spec := algorithm.Lookup(string(d.Config.Algorithm))
	if spec == nil {
		return // not an algorithm the rules know: nothing to rely on
	}
	base := sent.Truncate(spec.Unit)
	e := &entry{sent: sent, base: base, until: base.Add(d.Wait), valid: sent.Add(min(d.Wait, s.maxStale)), now: d.Now, cfg: d.Config,
		unit: spec.Unit, tryOnly: d.Full || (maxWait == 0 && spec.Full != nil), full: d.Full}
	if s.expiring.Load() != 0 {
		e.valid, gen = s.capExpiring(key.Name, sent, e.valid, gen)
	}
	s.put(key, d.Config.Mode, e)
	if s.gen.Load() != gen {
		s.drop(key) // a change came in between: take it back
	}
}

func (s *Store) put(key redlimit.Key, mode redlimit.Mode, e *entry) {
	var had bool
	if mode == redlimit.PerClient {
		_, had = s.perClient.Swap(logKey(key), e)
	} else {
		_, had = s.overall.Swap(key.Name, e)
	}
	if !had && s.entries.Add(1) >= s.sweepAt.Load() {
		s.sweep()
	}
}

// drop clears the entry of key's log, whatever its mode.
func (s *Store) drop(key redlimit.Key) {
	if s.entries.Load() == 0 {
		return
	}
	if _, had := s.overall.LoadAndDelete(key.Name); had {
		s.entries.Add(-1)
	}
	if _, had := s.perClient.LoadAndDelete(logKey(key)); had {
		s.entries.Add(-1)
	}
}

// sweep removes the entries past their end, so that logs refused once and
// never asked again do not hold memory; the next sweep waits until the
// entries doubled, so that each entry stored pays for a bounded share.
func (s *Store) sweep() {
	if !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer s.sweeping.Store(false)
	now := s.now()
	for _, m := range []*sync.Map{&s.overall, &s.perClient} {
		m.Range(func(k, v any) bool {
			if !now.Before(v.(*entry).valid) && m.CompareAndDelete(k, v) {
				s.entries.Add(-1)
			}
			return true
		})
	}
	s.sweepAt.Store(max(2*s.entries.Load(), minSweep))
}

// Forget drops the entries of key's log, whatever its mode, and keeps the
// refusals then in flight out of the cache. Every change made through the
// cache does it; a store that frees permits of its own accord (handing back
// a grant its caller abandoned) calls it too.
func (s *Store) Forget(key redlimit.Key) {
	s.gen.Add(1)
	s.drop(key)
}

// ForgetName drops the entries of every log of the limiter name, and keeps
// the refusals then in flight out of the cache.
func (s *Store) ForgetName(name string) {
	s.gen.Add(1)
	if s.entries.Load() == 0 {
		return
	}
	if _, had := s.overall.LoadAndDelete(name); had {
		s.entries.Add(-1)
	}
	prefix := name + "\x00"
	s.perClient.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			if _, had := s.perClient.LoadAndDelete(k); had {
				s.entries.Add(-1)
			}
		}
		return true
	})
}

// Release implements redlimit.Store. The key's entries go once the store
// answered (or failed: the release may have been made).
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	got, err := s.store.Release(ctx, key, known, n, upTo)
	s.Forget(key)
	return got, err
}

// Cancel implements redlimit.Store, as Release.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	got, err := s.store.Cancel(ctx, key, known, at, n)
	s.Forget(key)
	return got, err
}

// SetConfig implements redlimit.Store. Every entry of name goes once the
// store answered: a new config may free permits.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	stored, set, err := s.store.SetConfig(ctx, name, cfg, how)
	s.ForgetName(name)
	return stored, set, err
}

// Delete implements redlimit.Store, as SetConfig.
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	existed, err := s.store.Delete(ctx, name)
	s.ForgetName(name)
	return existed, err
}

// Expire implements redlimit.Store. Every entry of name goes once the store
// answered, and until the limiter's state may have expired, no refusal of
// it is used past the expiry (expiry.go).
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	sent := s.now()
	existed, err := s.store.Expire(ctx, name, ttl)
	if existed || err != nil {
		s.noteExpire(name, ttl, sent, s.now())
	}
	s.ForgetName(name)
	return existed, err
}

// ClearExpire implements redlimit.Store.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	sent := s.now()
	cleared, err := s.store.ClearExpire(ctx, name)
	if cleared && err == nil {
		s.clearExpire(name, sent)
	}
	return cleared, err
}

// Config implements redlimit.Store: the store's answer.
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	return s.store.Config(ctx, name)
}

// Available implements redlimit.Store: the store's answer.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	return s.store.Available(ctx, key, known)
}
