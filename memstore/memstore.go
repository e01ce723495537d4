// Package memstore is the in-process Store: no server, the embedded default.
// It runs the algorithms' Go rules directly, under one mutex per limiter.
//
// Limiters in one memory store are shared by every Limiter opened on it in
// this process; PerClient limits are told apart by client ID as in Redis.
//
// # Memory
//
// Limiters live in a sync.Map split into shards, each with its own lock for
// inserts and sweeps and a one-name cache in front, so that
// calls on different names scale with GOMAXPROCS. State is dropped once it is
// forgotten (algorithm.State.Forgotten: it can no longer change an answer),
// as Redis drops a log by its key's TTL, and a name with neither config nor
// state goes entirely. The store has no goroutine: calls pay for the sweeps,
// amortized. A shard is swept by the call that finds it unswept for
// sweepEvery (store time) and by the call that doubles its size since the
// last sweep, so idle state never outnumbers the state in use for long.
//
// Configs are never evicted, even those restored from a caller's known
// config: Redis keeps those until Delete or Expire, and Config, TrySetRate,
// Delete and Expire would answer differently without them. They are kept
// compact instead: an idle limiter is its name, a small entry and a pointer
// to its config, which equal configs share. A limiter made for a token
// bucket has its Overall state in the same allocation, in the lock's
// cache line, kept when idle: contending calls pass one line between CPUs,
// and a busy limiter whose state a sweep forgot allocates no new one
// (BenchmarkMillionKeys measures the bytes).
//
// A keyed policy (redlimit.Policy) keeps its config once and, per key, only
// state, swept the same way: an idle key takes nothing once swept
// (Store.PolicyKeys counts the keys held). The keys of a policy of one
// token or leaky bucket, the per-user limit of most services, are compact
// records of the bucket's state alone (BenchmarkPolicyMillionKeys). A Policy
// binds itself to its policy here: its grants at once skip the name's
// lookup and the store's decision in full.
package memstore

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/direct"
)

const (
	// shardCount shards the names (a power of two): enough that cores
	// rarely meet on one shard's lock and that one shard's sweep is short.
	shardCount = 256
	// sweepEvery is how often (store time) each shard is swept at least.
	sweepEvery = 10 * time.Second
	// minSweepSize is the size below which a shard's growth triggers no sweep.
	minSweepSize = 64
)

// Store is an in-memory redlimit.Store. The zero value is not usable; call New.
type Store struct {
	clock clock.Clock
	// real: clock is clock.Real, read directly (no interface call).
	real   bool
	seed   maphash.Seed
	shards [shardCount]shard
	// policies: name -> *policy (policy.go); lastPolicy is the one
	// found last, found again without a map lookup.
	policies   sync.Map
	lastPolicy atomic.Pointer[policy]
	// last is the config interned last: limiters restored from the same
	// known config (per-user limits) share one copy.
	last atomic.Pointer[conf]
	// lastIn is the config as given (not normalized) interned last, with
	// its conf: a caller of the Store that passes the same config as it
	// wrote it on every call is not normalized again each time.
	lastIn atomic.Pointer[given]
	// due is a store time (µs) no later than the first at which a shard
	// is due a sweep: a call before it reads no shard's state to end (its
	// shard's line is not touched at all), and is written only by sweeps.
	due atomic.Int64
	// noTake turns AcquireKey's shortcut (take) off, for tests that hold
	// it to the whole path.
	noTake bool
}

var _ redlimit.Store = (*Store)(nil)

// shard is one part of the names: a sync.Map (lookups take no lock) and
// a one-name cache in front of it.
type shard struct {
	m sync.Map // name -> *limiter
	// mu serializes the inserts and sweeps; n counts the names in m, and
	// next is the size at which an insert sweeps the shard; swept is the
	// store time (µs) of the last sweep.
	mu    sync.Mutex
	n     int
	next  int
	swept atomic.Int64
	// hot is a name of the shard and its limiter, found without a map
	// lookup; set when empty, so the hot path never writes it.
	hot atomic.Pointer[hot]
}

// hot is a shard's cached name and its limiter (dead once it left).
type hot struct {
	name string
	l    *limiter
}

// Option configures a Store.
type Option func(*Store)

// WithTimeSource sets the store's time: decisions are made at c's Now
// (tests pass a *clock.Fake). Not to be confused with redlimit.WithClock,
// the clock a Limiter waits on.
func WithTimeSource(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns an empty memory store.
func New(opts ...Option) *Store {
	s := &Store{clock: clock.Real, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	s.real = s.clock == clock.Real
	return s
}

// conf is a stored config with what the hot path derives from it. It is
// never written once made, so limiters share it.
type conf struct {
	redlimit.Config
	spec *algorithm.Spec // the algorithm's, from the registry
	lim  algorithm.Limit // in the rules' unit of time
	max  int64           // Config.MaxPermits
	// unit is the rules' unit of time in µs (algorithm.Spec.Unit): 1000
	// for the sliding log, whose entries are per ms, 1 for the others.
	// every is the Interval in µs.
	unit, every int64
}

// limiter is one name's config and logs.
//
// Its first 64 bytes are the fields a call reads and seldom writes; the
// lock follows them, starting the next cache line, and a bucketLimiter's
// state follows the lock in that line. Contending callers then pass one
// line between CPUs per call, the lock and the state it guards, instead
// of two; the line read stays shared (BenchmarkContended's timed form
// measures the difference). TestLimiterLayout holds the layout.
type limiter struct {
	// dead: the limiter left the store (set under mu); whoever finds it
	// dead looks again.
	dead atomic.Bool
	// cfg is nil when no config is stored. Written under mu; read without
	// it only to skip validating a known config equal to it.
	cfg       atomic.Pointer[conf]
	expiresAt int64 // µs; 0: the config does not expire
	overall   log
	swept     int64 // µs of the last sweep of idle logs
	// limiterRest holds the fields no common call reads, in the
	// limiter's own allocation (after the state, in a bucketLimiter).
	*limiterRest
	mu sync.Mutex
}

// limiterRest is the part of a limiter its common call does not read.
type limiterRest struct {
	since   int64           // µs: when cfg took effect keeping the epoch, or was restored (algorithm.Limit.Since); 0: unknown
	clients map[string]*log // PerClient logs; nil while there is none
	// bucket is a token bucket made with the limiter, in its allocation
	// (bucketLimiter), for its Overall state only: the first call
	// allocates nothing. nil: none.
	bucket *tokenbucket.State
}

// plainLimiter is a limiter made for any algorithm but the token bucket,
// padded to a size class whose objects start on a cache line, as
// bucketLimiter: else half of them would start mid-line, their lock on
// a line with their neighbour's fields.
type plainLimiter struct {
	limiter
	rest limiterRest
	_    [32]byte // to 128 bytes
}

// lockSpins is how many times lock looks at a taken lock again before it
// waits as sync.Mutex does; 0 with one CPU, where the holder cannot run
// meanwhile.
var lockSpins = spinsFor(runtime.NumCPU())

func spinsFor(cpus int) int {
	if cpus < 2 {
		return 0
	}
	return 64
}

// lock takes l.mu. A call holds it for a few dozen instructions, and a
// caller that finds it taken by a call running on another CPU has it
// sooner by watching it than by parking: sync.Mutex spins only while its
// CPU has no other goroutine to run, so with more callers than CPUs
// every collision parked one and woke it again, most of a contended
// call's cost. The spin writes nothing until the lock is free: TryLock
// tests before it swaps, and between looks it reads a word of the line
// before the lock's, which a holder seldom writes. Past lockSpins looks
// it waits in Lock, queued fairly.
func (l *limiter) lock() {
	if !l.mu.TryLock() {
		l.spinLock()
	}
}

// spinLock is lock's wait for a taken lock.
func (l *limiter) spinLock() {
	for range lockSpins {
		for range 4 {
			l.dead.Load() // a pause that reads the line before the lock's
		}
		if l.mu.TryLock() {
			return
		}
	}
	l.mu.Lock()
}

// bucketLimiter is a limiter whose first config is a token bucket, with
// room for its Overall state right after the lock. Its size, a multiple
// of 64 bytes, puts it in a size class whose objects start on a cache
// line, so the lock and the state share one.
type bucketLimiter struct {
	limiter
	tb   tokenbucket.State
	rest limiterRest
	_    [16]byte // to 192 bytes
}

// making says whether open creates a limiter that is missing, and which.
type making uint8

const (
	noCreate making = iota
	create
	createBucket // a bucketLimiter
)

// makingFor is open's making for a call that knows config c (zero:
// none): a limiter is created only to restore a known config.
func makingFor(c *redlimit.Config) making {
	switch {
	case c.Rate == 0:
		return noCreate
	case c.Algorithm == redlimit.TokenBucket:
		return createBucket
	}
	return create
}

// newLimiter returns an empty limiter, made as mk says.
func newLimiter(mk making) *limiter {
	if mk == createBucket {
		b := new(bucketLimiter)
		b.limiterRest = &b.rest
		b.bucket = &b.tb
		return &b.limiter
	}
	p := new(plainLimiter)
	p.limiterRest = &p.rest
	return &p.limiter
}

// log is one limit's state under the algorithm of its epoch; a nil State
// is a fresh one.
type log struct {
	algorithm.State
	epoch int64
}

// nowUS reads the store's time, in µs since the Unix epoch.
func (s *Store) nowUS() int64 {
	if s.real {
		return wallUS()
	}
	return s.clock.Now().UnixMicro()
}

// unitOf is the unit of time (in µs) of a state's rules: that of its
// algorithm, which a log of an older epoch may not share with the config.
func unitOf(st algorithm.State) int64 {
	return units(algorithm.Of(st))
}

// units is spec's unit of time in µs.
func units(spec *algorithm.Spec) int64 {
	return int64(spec.Unit / time.Microsecond)
}

// given is a config as a caller gave it and its conf (Store.lastIn).
type given struct {
	in redlimit.Config
	p  *conf
}

// intern returns c, normalized, as a shared conf. A config equal to the
// last one interned, normalized or as given, is known to be valid and is
// not normalized again (Normalize is a function of the config alone).
func (s *Store) intern(c redlimit.Config) (*conf, error) {
	if p := s.last.Load(); p != nil && p.Config == c {
		return p, nil
	}
	if g := s.lastIn.Load(); g != nil && g.in == c {
		return g.p, nil
	}
	n, err := c.Normalize()
	if err != nil {
		return nil, err
	}
	if p := s.last.Load(); p != nil && p.Config == n {
		if n != c {
			s.lastIn.Store(&given{in: c, p: p})
		}
		return p, nil
	}
	spec := algorithm.Lookup(string(n.Algorithm)) // known: n is normalized
	unit := units(spec)
	every := n.Interval.Microseconds()
	p := &conf{Config: n, spec: spec, lim: algorithm.Limit{Rate: n.Rate, Interval: every / unit, Burst: n.Burst, Capacity: n.Capacity}, max: n.MaxPermits(), unit: unit, every: every}
	s.last.Store(p)
	if n != c {
		s.lastIn.Store(&given{in: c, p: p})
	}
	return p, nil
}

func (s *Store) shard(name string) *shard {
	return &s.shards[maphash.String(s.seed, name)&(shardCount-1)]
}

// open returns name's limiter, locked, creating an empty one as mk says;
// nil when there is none.
func (s *Store) open(sh *shard, name string, mk making) *limiter {
	var l *limiter
	if h := sh.hot.Load(); h != nil && h.name == name {
		l = h.l
	} else if v, ok := sh.m.Load(name); ok {
		if l = v.(*limiter); h == nil {
			sh.hot.Store(&hot{name: name, l: l})
		}
	}
	for {
		if l == nil || l.dead.Load() {
			if l = s.find(sh, name, mk); l == nil {
				return nil
			}
		}
		l.lock()
		if !l.dead.Load() {
			return l
		}
		l.mu.Unlock()
	}
}

// find is open's slow path, under sh.mu: a name that is not (or no longer
// alive) in the shard. An insert that doubles the shard since its last
// sweep sweeps it.
func (s *Store) find(sh *shard, name string, mk making) *limiter {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var l *limiter
	if v, ok := sh.m.Load(name); ok && !v.(*limiter).dead.Load() {
		l = v.(*limiter)
	}
	if l == nil {
		if mk == noCreate {
			return nil
		}
		if sh.n >= max(sh.next, minSweepSize) {
			now := s.nowUS()
			sh.swept.Store(now)
			sh.sweep(now)
		}
		l = newLimiter(mk)
		if _, had := sh.m.Swap(name, l); !had {
			sh.n++ // a dead limiter replaced was counted already
		}
	}
	if h := sh.hot.Load(); h == nil || h.l != l && h.name == name {
		sh.hot.Store(&hot{name: name, l: l})
	}
	return l
}

// done unlocks l after a call at now, and sweeps sh if it is due.
func (s *Store) done(sh *shard, l *limiter, now int64) {
	l.mu.Unlock()
	if now >= s.due.Load() && now-sh.swept.Load() >= sweepEvery.Microseconds() {
		s.sweepDue(sh, now)
	}
}

// sweepDue sweeps sh at now unless another call took the sweep first,
// then moves the store's due time to the earliest shard's.
func (s *Store) sweepDue(sh *shard, now int64) {
	if last := sh.swept.Load(); now-last >= sweepEvery.Microseconds() && sh.swept.CompareAndSwap(last, now) {
		sh.mu.Lock()
		sh.sweep(now)
		sh.mu.Unlock()
		s.nextDue()
	}
}

// nextDue sets the store's due time to when the shard swept longest ago
// is due. Sweep times only grow, so a value computed from older reads is
// earlier, never later, than the true one: a call may look at its shard
// in vain, but a due sweep is never skipped.
func (s *Store) nextDue() {
	oldest := s.shards[0].swept.Load()
	for i := 1; i < shardCount; i++ {
		oldest = min(oldest, s.shards[i].swept.Load())
	}
	s.due.Store(oldest + sweepEvery.Microseconds())
}

// sweep drops the forgotten state of the shard's limiters, and the limiters
// left with neither config nor state. sh.mu is held; a limiter that is busy
// is left for the next sweep.
func (sh *shard) sweep(now int64) {
	sh.m.Range(func(k, v any) bool {
		l := v.(*limiter)
		if !l.dead.Load() && l.mu.TryLock() {
			l.expireConfig(now)
			l.forget(now)
			if l.empty() {
				l.dead.Store(true)
			}
			l.mu.Unlock()
		}
		if l.dead.Load() && sh.m.CompareAndDelete(k, l) {
			sh.n--
		}
		return true
	})
	if h := sh.hot.Load(); h != nil && h.l.dead.Load() {
		sh.hot.Store(nil)
	}
	sh.next = 2 * sh.n
}

// drop takes l, locked and empty, out of the store.
func (sh *shard) drop(name string, l *limiter) {
	l.dead.Store(true)
	sh.mu.Lock()
	if sh.m.CompareAndDelete(name, l) {
		sh.n--
	}
	if h := sh.hot.Load(); h != nil && h.l == l {
		sh.hot.Store(nil)
	}
	sh.mu.Unlock()
}

// empty reports whether l holds neither config nor state. l.mu is held.
func (l *limiter) empty() bool {
	return l.cfg.Load() == nil && l.overall.State == nil && len(l.clients) == 0
}

// expireConfig forgets a config whose TTL has passed, and the Overall state
// with it, as Redis does (both live in the limiter hash there). l.mu is held.
func (l *limiter) expireConfig(now int64) {
	if l.expiresAt != 0 && now >= l.expiresAt {
		l.cfg.Store(nil)
		l.expiresAt = 0
		l.overall = log{}
	}
}

// overallLog is log's common case, inlined: the Overall log, in use, when
// no sweep is due; nil otherwise. l.mu is held.
func (l *limiter) overallLog(c *conf, now int64) *log {
	if c.Mode == redlimit.Overall && now-l.swept < c.every && l.overall.epoch == c.Epoch && l.overall.State != nil {
		return &l.overall
	}
	return nil
}

// log returns the log that client uses under c, emptied if it belongs to
// another epoch. l.mu is held.
func (l *limiter) log(c *conf, client string, now int64) *log {
	var spare algorithm.State // a forgotten Overall state, to reuse
	if now-l.swept >= c.every {
		// Forget the logs that hold nothing that can change an answer
		// (such as the log of a PerClient client that went away), at most
		// once per interval. A log of another epoch is kept until then, as
		// Redis keeps its keys: a client that restores that epoch after a
		// data loss finds it as Redis would.
		l.swept = now
		spare = l.forget(now)
	}
	lg := &l.overall
	if c.Mode == redlimit.PerClient {
		if lg = l.clients[client]; lg == nil {
			if l.clients == nil {
				l.clients = make(map[string]*log)
			}
			lg = new(log)
			l.clients[client] = lg
		}
	}
	if lg.State == nil || lg.epoch != c.Epoch {
		if b := l.bucket; b != nil && lg == &l.overall && c.Algorithm == redlimit.TokenBucket {
			*b = tokenbucket.State{}
			lg.State = b
		} else {
			if b != nil && spare == algorithm.State(b) {
				spare = nil // the limiter's own bucket is for its Overall state only
			}
			lg.State = fresh(c.spec, spare)
		}
		lg.epoch = c.Epoch
	}
	return lg
}

// fresh returns a fresh state of spec's algorithm: spare reset in place
// when it is one (algorithm.Resetter), so that a limiter in use does not
// allocate a state each time its own is forgotten; else a new one.
func fresh(spec *algorithm.Spec, spare algorithm.State) algorithm.State {
	if r, ok := spare.(algorithm.Resetter); ok && algorithm.Of(spare) == spec {
		r.Reset()
		return spare
	}
	return spec.New()
}

// limit is the config's Limit, with the instant it took effect. l.mu is held.
func (l *limiter) limit(c *conf) algorithm.Limit {
	lim := c.lim
	lim.Since = l.since / c.unit
	return lim
}

// forgotten reports whether lg holds nothing at now (µs): under the stored
// config if it is lg's, else under lg's own. l.mu is held.
func (l *limiter) forgotten(lg *log, now int64) bool {
	var lim algorithm.Limit
	if c := l.cfg.Load(); c != nil && c.Epoch == lg.epoch {
		lim = l.limit(c)
	}
	return lg.Forgotten(now/unitOf(lg.State), lim)
}

// forget drops the logs that are forgotten at now, and returns the Overall
// state it dropped, if any. l.mu is held.
func (l *limiter) forget(now int64) (dropped algorithm.State) {
	if l.overall.State != nil && l.forgotten(&l.overall, now) {
		dropped = l.overall.State
		l.overall = log{}
	}
	for id, lg := range l.clients {
		if lg.State == nil || l.forgotten(lg, now) {
			delete(l.clients, id)
		}
	}
	if len(l.clients) == 0 {
		l.clients = nil
	}
	return dropped
}

// SetConfig implements redlimit.Store.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, false, err
	}
	c, err := cfg.Normalize()
	if err != nil {
		return redlimit.Config{}, false, err
	}
	if err := how.Validate(); err != nil {
		return redlimit.Config{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.Config{}, false, err
	}
	sh := s.shard(name)
	l := s.open(sh, name, makingFor(&c))
	now := s.nowUS()
	l.expireConfig(now)
	old := l.cfg.Load()
	switch {
	case old != nil && how == redlimit.SetIfAbsent:
		s.done(sh, l, now)
		return old.Config, false, nil
	case old != nil && how == redlimit.SetKeepState && old.Algorithm == c.Algorithm:
		c.Epoch = old.Epoch // another algorithm's state means nothing: a new epoch
	default:
		c = c.WithNewEpoch()
	}
	kept := old != nil && old.Epoch == c.Epoch
	p, _ := s.intern(c) // c is normalized
	l.cfg.Store(p)
	l.since = 0 // a new epoch: its states are fresh
	if kept {
		l.since = now
	}
	if how == redlimit.SetKeepState && touches(p) && l.overall.State != nil && l.overall.epoch == c.Epoch {
		// The Overall state is brought to the change at once, as
		// redisstore does: another change before any call then does not
		// lose this one (algorithm.Limit.Since).
		l.overall.Release(now/p.unit, l.limit(p), 0)
	}
	s.done(sh, l, now)
	return c, true, nil
}

// touches reports whether a SetRate keeping the state brings c's Overall
// state to the change at once: the algorithms whose state counts time at
// the config it was last changed under (algorithm.Spec.Since: the buckets).
func touches(c *conf) bool {
	return c.Mode == redlimit.Overall && c.spec.Since
}

// Config implements redlimit.Store.
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.Config{}, err
	}
	sh := s.shard(name)
	l := s.open(sh, name, noCreate)
	if l == nil {
		return redlimit.Config{}, redlimit.ErrNotInitialized
	}
	now := s.nowUS()
	l.expireConfig(now)
	c := l.cfg.Load()
	s.done(sh, l, now)
	if c == nil {
		return redlimit.Config{}, redlimit.ErrNotInitialized
	}
	return c.Config, nil
}

// call is a locked limiter and what the call needs of it; end it with done.
type call struct {
	sh  *shard
	l   *limiter
	c   *conf
	lim algorithm.Limit // c's, with the instant it took effect
	now int64           // store time, µs
	t   int64           // now in the rules' unit
}

// end unlocks the call's limiter (see Store.done).
func (s *Store) end(k *call) { s.done(k.sh, k.l, k.now) }

// begin makes the checks every call on a log shares and locks key's
// limiter, restoring its config from known when it was lost. The errors
// come in a fixed order: name, known config, context, not initialized.
func (s *Store) begin(ctx context.Context, name string, known *redlimit.Config) (call, error) {
	return s.beginBound(ctx, name, known, nil)
}

// beginBound is begin, on h's limiter when h is not nil (h's name is name).
func (s *Store) beginBound(ctx context.Context, name string, known *redlimit.Config, h *handle) (call, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return call{}, err
	}
	// The clock is read before the lock, as x/time/rate's callers do, so
	// that contending callers hold the lock shorter; a call that then finds
	// a later instant in the state takes that one (time never runs
	// backwards for a state).
	now := s.nowUS()
	var sh *shard
	var l *limiter
	if h != nil {
		sh, l = h.sh, h.open(makingFor(known))
	} else {
		sh = s.shard(name)
		l = s.open(sh, name, makingFor(known))
	}
	var kc *conf // known, once checked
	if known.Rate != 0 {
		// A known config equal to the stored one needs no checking: the
		// hot path, since callers learn the stored config.
		if p := l.cfg.Load(); p != nil && (&p.Config == known || p.Config.Equal(known)) {
			kc = p
		} else {
			var err error
			if kc, err = s.intern(*known); err != nil {
				s.abandon(sh, name, l)
				return call{}, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		if l != nil {
			s.abandon(sh, name, l)
		}
		return call{}, err
	}
	if l == nil {
		return call{}, redlimit.ErrNotInitialized
	}
	if l.expiresAt != 0 {
		l.expireConfig(now)
	}
	c := l.cfg.Load()
	if c == nil {
		if kc == nil {
			s.done(sh, l, now)
			return call{}, redlimit.ErrNotInitialized
		}
		c = kc
		l.cfg.Store(c)
		l.since = now // the states left (a client's) count at their own config until now
	}
	return call{sh: sh, l: l, c: c, lim: l.limit(c), now: now, t: now / c.unit}, nil
}

// abandon unlocks l after a call that failed before touching it, dropping
// it if the call created it.
func (s *Store) abandon(sh *shard, name string, l *limiter) {
	if l.empty() {
		sh.drop(name, l)
	}
	l.mu.Unlock()
}

// Acquire implements redlimit.Store. It fills its named result in place:
// a Decision is large enough that copying it shows on the hot path.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (out redlimit.Decision, err error) {
	var a answer
	if err := s.acquire(ctx, key, &known, n, maxWait, &a, nil); err != nil {
		return out, err
	}
	out.Granted, out.Remaining, out.Wait, out.Now = a.Granted, a.Remaining, time.Duration(a.Wait)*time.Microsecond, time.UnixMicro(a.Now)
	if a.Granted {
		if out.At = out.Now; a.At != a.Now {
			out.At = time.UnixMicro(a.At)
		}
	}
	out.Full, out.Config = a.Full, *a.Config
	return out, nil
}

// answer is a decision as acquire makes it (direct.Answer).
type answer = direct.Answer[redlimit.Config]

// acquire is Acquire, filling *out (zero), on h's limiter when h is not
// nil.
func (s *Store) acquire(ctx context.Context, key redlimit.Key, known *redlimit.Config, n int64, maxWait time.Duration, out *answer, h *handle) error {
	if err := (redlimit.Config{}).ValidatePermits(n); err != nil {
		return err
	}
	k, err := s.beginBound(ctx, key.Name, known, h)
	if err != nil {
		return err
	}
	if n > k.c.max {
		s.end(&k)
		return k.c.Config.ValidatePermits(n)
	}
	lg := k.l.overallLog(k.c, k.now)
	if lg == nil {
		lg = k.l.log(k.c, key.Client, k.now)
	}
	u := k.c.unit
	d := lg.Acquire(k.t, k.lim, n, waitUnits(maxWait, u))
	out.Granted, out.Remaining, out.Wait, out.Now = d.Granted, d.Remaining, d.Wait*u, d.Now*u
	if d.Granted {
		out.At = d.At * u
	} else if full := k.c.spec.Full; full != nil && maxWait != 0 {
		// Full: refused even with no bound on the wait, which only a
		// call that may wait needs to know (Acquire's ErrQueueFull). An
		// unbounded wait's refusal is one already.
		if maxWait < 0 {
			out.Full = true
		} else {
			out.Full = full(lg.State, k.t, k.c.lim, n)
		}
	}
	out.Config = &k.c.Config
	s.end(&k)
	return nil
}

// handle is a name's limiter, bound (direct.Handle): found once, and again
// only when it left the store.
type handle struct {
	s   *Store
	sh  *shard
	key redlimit.Key
	l   atomic.Pointer[limiter]
}

// Bind implements direct.Binder, for package redlimit's Limiter: its calls
// then skip the name's lookup. It is not for use elsewhere.
func (s *Store) Bind(_ direct.Token, key redlimit.Key) direct.Handle[redlimit.Key, redlimit.Config] {
	return &handle{s: s, sh: s.shard(key.Name), key: key}
}

// Owner implements direct.Handle.
func (h *handle) Owner() any { return h.s }

// Acquire implements direct.Handle.
func (h *handle) Acquire(ctx context.Context, known *redlimit.Config, n int64, maxWait time.Duration) (answer, error) {
	// The common case, for a Limiter that knows the stored config by its
	// very pointer (the config it was last answered under): the limiter
	// found at once, its config neither expiring nor to be checked, its
	// Overall log in use and no sweep due. Anything else goes to acquire,
	// which makes the same checks in the same order.
	if l := h.l.Load(); l != nil && n > 0 && ctx.Err() == nil {
		now := h.s.nowUS()
		// The config is read under the lock: its cache line is then
		// fetched once, as the lock takes it, not shared first and
		// taken again (the line contending callers pass to each other).
		if !l.mu.TryLock() { // lock, inlined
			l.spinLock()
		}
		if c := l.cfg.Load(); c != nil && &c.Config == known && n <= c.max {
			if lg := h.overallLog(l, c, now); lg != nil {
				// A call that read the clock before another that
				// took the lock first finds a later instant in the
				// state, and decides at that one as Acquire would
				// (time never runs backwards for a state): under
				// contention the common case, kept on the short path
				// so that the lock is held no longer than needed.
				if tb, ok := lg.State.(*tokenbucket.State); ok {
					// The most common limit's grant, without the
					// interface call and the Decision (its unit is
					// the µs).
					t := max(now, tb.Last)
					if rem, ok := tb.Take(t, &c.lim, n); ok {
						h.s.done(h.sh, l, now)
						return answer{Granted: true, Remaining: rem, At: t, Now: t, Config: &c.Config}, nil
					}
				}
				if sl, ok := lg.State.(*slidinglog.State); ok {
					// The same for a sliding log (its unit is the ms).
					t := max(now/c.unit, sl.Last)
					if rem, ok := sl.Take(t, &c.lim, n); ok {
						h.s.done(h.sh, l, now)
						return answer{Granted: true, Remaining: rem, At: t * c.unit, Now: t * c.unit, Config: &c.Config}, nil
					}
				}
				var out answer
				h.decide(l, lg, c, now, n, maxWait, &out)
				return out, nil
			}
		}
		l.mu.Unlock()
	}
	var out answer
	err := h.s.acquire(ctx, h.key, known, n, maxWait, &out, h)
	return out, err
}

// overallLog is l's Overall log under c, l's config (read under the
// lock), when the call at now can use it as it is (Acquire's common
// case), else nil. l.mu is held.
func (h *handle) overallLog(l *limiter, c *conf, now int64) *log {
	if c.Mode != redlimit.Overall || l.overall.epoch != c.Epoch || l.overall.State == nil || l.dead.Load() || l.expiresAt != 0 {
		return nil
	}
	if now-l.swept >= c.every {
		// A sweep of the limiter's logs is due (log). With no log but a
		// token bucket's Overall state, about to be used, it would drop
		// nothing this call does not find as it would a fresh one: a
		// forgotten bucket is a full one.
		if _, ok := l.overall.State.(*tokenbucket.State); !ok || l.clients != nil {
			return nil
		}
		l.swept = now
	}
	return &l.overall
}

// decide is acquire's decision on lg, l's Overall log under c, into *out;
// it ends the call (l.mu is held).
func (h *handle) decide(l *limiter, lg *log, c *conf, now, n int64, maxWait time.Duration, out *answer) {
	u := c.unit
	d := lg.Acquire(now/u, l.limit(c), n, waitUnits(maxWait, u))
	out.Granted, out.Remaining, out.Wait, out.Now, out.Config = d.Granted, d.Remaining, d.Wait*u, d.Now*u, &c.Config
	if d.Granted {
		out.At = d.At * u
	} else if full := c.spec.Full; full != nil && maxWait != 0 {
		if maxWait < 0 {
			out.Full = true
		} else {
			out.Full = full(lg.State, now/u, c.lim, n)
		}
	}
	h.s.done(h.sh, l, now)
}

// open is Store.open for the bound name: its limiter, locked.
func (h *handle) open(mk making) *limiter {
	if l := h.l.Load(); l != nil && !l.dead.Load() {
		l.lock()
		if !l.dead.Load() {
			return l
		}
		l.mu.Unlock()
	}
	l := h.s.open(h.sh, h.key.Name, mk)
	if l != nil {
		h.l.Store(l)
	}
	return l
}

// waitUnits turns a maximum wait into whole units of unit µs (rounded
// down: a reservation never ends later than the caller allowed); negative
// is unlimited.
func waitUnits(d time.Duration, unit int64) int64 {
	if d < 0 {
		return algorithm.Unlimited
	}
	return d.Microseconds() / unit
}

// Cancel implements redlimit.Store.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	if n <= 0 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	k, err := s.begin(ctx, key.Name, &known)
	if err != nil {
		return 0, err
	}
	got := k.l.log(k.c, key.Client, k.now).Cancel(k.t, k.lim, at.UnixMicro()/k.c.unit, n)
	s.end(&k)
	return got, nil
}

// Release implements redlimit.Store.
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if n <= 0 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	k, err := s.begin(ctx, key.Name, &known)
	if err != nil {
		return 0, err
	}
	var got int64
	lg := k.l.log(k.c, key.Client, k.now)
	if upToer := k.c.spec.ReleaseUpTo; upToer != nil && !upTo.IsZero() {
		got = upToer(lg.State, k.t, k.lim, n, max(upTo.UnixMicro(), 0)/k.c.unit)
	} else {
		got = lg.Release(k.t, k.lim, n)
	}
	s.end(&k)
	return got, nil
}

// Available implements redlimit.Store.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	k, err := s.begin(ctx, key.Name, &known)
	if err != nil {
		return 0, redlimit.Config{}, err
	}
	got := k.l.log(k.c, key.Client, k.now).Available(k.t, k.lim)
	s.end(&k)
	return got, k.c.Config, nil
}

// admin runs f on name's limiter under its lock, after the checks that
// Delete, Expire and ClearExpire share; a name never used reports false.
func (s *Store) admin(ctx context.Context, name string, f func(sh *shard, l *limiter, now int64) bool) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh := s.shard(name)
	l := s.open(sh, name, noCreate)
	if l == nil {
		return false, nil
	}
	now := s.nowUS()
	l.expireConfig(now)
	ok := f(sh, l, now)
	s.done(sh, l, now)
	return ok, nil
}

// Delete implements redlimit.Store. As in Redis, the PerClient logs of other
// clients are left to expire on their own: they belong to the deleted
// config's epoch, which a new config never has.
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	return s.admin(ctx, name, func(sh *shard, l *limiter, now int64) bool {
		existed := l.cfg.Load() != nil
		l.cfg.Store(nil)
		l.expiresAt = 0
		l.overall = log{}
		if l.empty() {
			sh.drop(name, l)
		}
		return existed
	})
}

// Expire implements redlimit.Store.
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateTTL(ttl); err != nil {
		return false, err
	}
	return s.admin(ctx, name, func(sh *shard, l *limiter, now int64) bool {
		if l.cfg.Load() == nil {
			return false
		}
		l.expiresAt = now + ttl.Microseconds()
		return true
	})
}

// ClearExpire implements redlimit.Store.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	return s.admin(ctx, name, func(sh *shard, l *limiter, now int64) bool {
		had := l.expiresAt != 0
		l.expiresAt = 0
		return had
	})
}
