package redlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/direct"
)

// Limiter is one named rate limit in a Store, seen from one client. Every
// Limiter with the same name on the same store shares the limit (Overall) or
// gets its own (PerClient, by client ID). A Limiter is safe for concurrent use.
type Limiter struct {
	// The fields every acquire call reads come first, within the first
	// cache line, followed by the held record's current slot: with many
	// Limiters, a call on a cold one misses once per cache line it
	// touches.

	// obs is WithObserver's; nil: none, and nothing is measured.
	obs Observer
	// bound is handle when acquire calls go to it as they are, with no
	// share of the deadline to apply (storeAcquire's first case).
	bound direct.Handle[Key, Config]
	// known is the last config seen, sent along so that a store that lost
	// it heals; nil until one is known. Never written once stored.
	known atomic.Pointer[Config]
	// overridePending: WithConfigOverride's, until it has been applied.
	overridePending atomic.Bool
	// drifting: the stored config last seen differs from wanted.
	drifting atomic.Bool
	clock    clock.Clock
	// held records the grants this Limiter may still hand back (Release).
	held held

	// handle is store's own handle on this Limiter's key, when it has
	// one (a memory store): store calls go through it.
	handle direct.Handle[Key, Config]
	name   string
	client string
	// maxWait bounds every call's wait (WithMaxWait); negative: none.
	maxWait time.Duration
	// storeShare: the part of a deadline the store may use when something
	// else can answer (failure.go); 0 is the default.
	storeShare float64
	policy     FailurePolicy
	fallback   Store

	store Store
	share float64
	// wanted is WithConfig's config (or this Limiter's last SetRate's),
	// against which stored configs are checked; nil: none.
	wanted atomic.Pointer[Config]
	stats  struct{ drift, overrides atomic.Int64 }
	logger *slog.Logger
	// override: WithConfigOverride.
	override bool
	// overrideMu is held by the one call applying the override; others
	// do not wait for it.
	overrideMu sync.Mutex
	// overrideNext: after a failed attempt, no other is made before this
	// instant of the Limiter's clock (Unix ns; 0: none failed).
	overrideNext atomic.Int64
	// overrideBackoff is the wait after the last failure (under
	// overrideMu).
	overrideBackoff time.Duration
}

// The wait after a failed WithConfigOverride attempt doubles from
// overrideMinBackoff up to overrideMaxBackoff: a store that is down is not
// asked once per call.
const (
	overrideMinBackoff = 100 * time.Millisecond
	overrideMaxBackoff = 10 * time.Second
)

// held is a Limiter's record of its own recent grants, in process memory:
// Release hands back no more than it holds. Grants close together share a
// slot (holdSlices per hold span), so the record stays small whatever the
// rate, and a grant in the current slot is one atomic compare-and-swap.
// Slots the record no longer needs are kept for reuse, so that a Limiter
// called less often than a slot is wide (one of many keys) does not
// allocate one per call.
type held struct {
	// cur is the slot grants are added to while they fall in its slice.
	cur atomic.Pointer[heldSlot]
	// The fields a new slot needs share cur's cache line: a call on a
	// Limiter called seldom (one key among many) takes the lock path.
	mu sync.Mutex
	// The slots in the order made, a list from oldest to newest, of
	// count slots (under mu).
	oldest, newest *heldSlot
	count          int
	// free lists the slots dropped from the record, to reuse (under mu).
	free *heldSlot
	// inline are the record's first slots, made with the Limiter: one
	// used seldom, whose grants stop holding before a third comes, never
	// allocates.
	inline [heldInline]heldSlot
	// unused are slots made and not used yet; made counts the slots made
	// (under mu).
	unused []heldSlot
	made   int
}

// heldInline is how many slots a record has without allocating.
const heldInline = 2

// minHeldChunk is the fewest slots a record makes at once, past its inline
// ones.
const minHeldChunk = 8

// heldSlot counts the permits of grants made in [start, end) (store time,
// ms; a slot never spans a window boundary). They count as held until
// until (the Limiter's clock, Unix ns), when the first of them stops
// counting against the limit.
//
// A slot is reused once dropped, while add may still be reading it
// without the lock: word's generation tells add whether start and end
// are the ones it checked its grant against (a sequence lock).
type heldSlot struct {
	// word is the slot's generation (the top slotGenBits bits) and its
	// permits (the others).
	word atomic.Uint64
	// start, end, until are written under held.mu while word's
	// generation is odd (the slot being filled).
	start, end atomic.Int64
	// next links the record's slots, oldest first, and the free ones
	// (under held.mu). Next to what add reads: linking a new slot after
	// the current one touches no other cache line. There is no link
	// back: unlinking the oldest slot touches none but it.
	next  *heldSlot
	until atomic.Int64
	// out is what Releases in flight took from the permits and may put
	// back (under held.mu).
	out int64
}

// slotGenShift places a slot's generation above its permits: 2^48 is far
// above what one slot can count (a slot is a thirty-second of the span in
// which the store grants at most about twice the limit, itself at most
// algorithm.MaxRate, 2^40).
const slotGenShift = 48

func slotPermits(w uint64) int64 { return int64(w & (1<<slotGenShift - 1)) }

func (s *heldSlot) permits() int64 { return slotPermits(s.word.Load()) }

// addPermits adds n (negative: takes) to the slot's permits, keeping its
// generation; a take never takes more than the slot holds.
func (s *heldSlot) addPermits(n int64) { s.word.Add(uint64(n)) }

// holdSlices is how many slots a hold span is cut into.
const holdSlices = 32

// heldUntil is the store time (ms) until which a grant made at ms counts
// as held under cfg, or ms if it never does. The window algorithms' stores
// hand back permits of the current window (a sliding counter's, of the
// previous one only when the current has none): a grant of an earlier
// window may no longer count at all, or count less, there, so it is held
// until its own window ends. A sliding log's is held one Interval; a token
// bucket's for the time an empty bucket takes to refill (Burst / Rate x
// Interval), after which its tokens are back whatever happens; a leaky
// bucket's not at all: its permits have left the queue.
func heldUntil(cfg *Config, ms int64) int64 {
	iv := cfg.Interval.Milliseconds()
	switch cfg.Algorithm {
	case LeakyBucket:
		return ms
	case TokenBucket:
		return ms + (cfg.Burst*iv+cfg.Rate-1)/cfg.Rate
	case FixedWindow, SlidingCounter:
		return ms - ms%iv + iv
	}
	return ms + iv
}

// add records a grant of n permits made at store time ms (Unix ms), under
// cfg; clk is the Limiter's clock, read only for a new slot.
func (h *held) add(cfg *Config, ms, n int64, clk clock.Clock) {
	for s := h.cur.Load(); s != nil; s = h.cur.Load() {
		w := s.word.Load()
		if w>>slotGenShift&1 != 0 || ms < s.start.Load() || ms >= s.end.Load() {
			break // being filled, or not this slot's slice
		}
		// Unchanged since start and end were read: still the slot
		// they belong to (a reused slot has another generation).
		if s.word.CompareAndSwap(w, w+uint64(n)) {
			return
		}
	}
	h.addSlot(cfg, ms, n, clk.Now())
}

func (h *held) addSlot(cfg *Config, ms, n int64, now time.Time) {
	until := heldUntil(cfg, ms)
	if until <= ms {
		return
	}
	// The span left to the grant, from when its answer arrived, in the
	// Limiter's own clock: the store's clock may differ from it. The
	// first grant of a slot is its earliest, so the slot is held no
	// longer than any of its grants.
	nowNS := now.UnixNano()
	local := nowNS + (until-ms)*int64(time.Millisecond)
	h.mu.Lock()
	if h.count >= 2*holdSlices {
		h.prune(nowNS)
	}
	// Slots are a thirty-second of an Interval (of the hold span for a
	// token bucket) wide, and end at a window's end: a window holds at
	// most holdSlices+1 of them.
	span := cfg.Interval.Milliseconds()
	if cfg.Algorithm == TokenBucket {
		span = until - ms
	}
	width := max(1, span/holdSlices)
	if cfg.Algorithm == SlidingLog && h.count < holdSlices {
		// One millisecond, as the log's entries, while the record is
		// small: its grants are then at its start exactly, the bound a
		// Release hands back entries up to (see Release).
		width = 1
	}
	var s *heldSlot
	switch {
	case h.free != nil:
		s, h.free = h.free, h.free.next
	case h.oldest != nil && h.droppable(h.oldest, nowNS):
		// The oldest slot is the first to stop holding: reused at once,
		// the record of a Limiter called seldom stays a few slots.
		s = h.oldest
		h.oldest = s.next
		h.count--
	default:
		if len(h.unused) == 0 {
			h.grow()
		}
		s, h.unused = &h.unused[0], h.unused[1:]
	}
	// An odd generation while filling: add, reading it meanwhile, goes
	// to the lock; its compare-and-swap fails on a word read before.
	gen := s.word.Load()>>slotGenShift | 1
	s.word.Store(gen << slotGenShift)
	s.start.Store(ms)
	s.end.Store(min(until, ms+width))
	s.until.Store(local)
	s.word.Store((gen+1)<<slotGenShift | uint64(n))
	s.next = nil
	if h.newest != nil {
		h.newest.next = s
	} else {
		h.oldest = s
	}
	h.newest = s
	h.count++
	h.cur.Store(s)
	h.mu.Unlock()
}

// grow makes slots: the inline ones first, then in chunks of as many as
// made before, at least minHeldChunk, one allocation each: a record that
// grows to k slots allocates about log2(k) times in all. h.mu is held.
func (h *held) grow() {
	if h.made == 0 {
		h.unused, h.made = h.inline[:], heldInline
		return
	}
	size := max(minHeldChunk, h.made)
	h.unused = make([]heldSlot, size)
	h.made += size
}

// prune drops the slots that hold nothing at now (Unix ns) and can get
// nothing, keeping them for reuse: the current slot stays (add's fast
// path adds to it without the lock), and so does one a Release in flight
// may put permits back in. h.mu is held.
func (h *held) prune(now int64) {
	var prev *heldSlot
	for s := h.oldest; s != nil; {
		next := s.next
		if !h.droppable(s, now) {
			prev, s = s, next
			continue
		}
		if prev != nil {
			prev.next = next
		} else {
			h.oldest = next
		}
		if next == nil {
			h.newest = prev
		}
		h.count--
		s.next, h.free = h.free, s
		s = next
	}
}

// droppable reports whether s holds nothing at now (Unix ns) and can get
// nothing: neither the current slot nor one a Release in flight may put
// permits back in. h.mu is held.
func (h *held) droppable(s *heldSlot, now int64) bool {
	return s != h.cur.Load() && s.out == 0 && (s.until.Load() <= now || s.permits() == 0)
}

// taken is what one Release took from the record: per slot, newest first.
type taken []struct {
	s *heldSlot
	n int64
}

// take removes up to n permits held at now, newest first (as the stores
// hand them back), and returns what it took, how many, and the store time
// (ms) of the oldest grant among them (a slot's start is its earliest). A
// concurrent Release cannot take them too; putBack returns what the store
// did not hand back.
func (h *held) take(now time.Time, n int64) (taken, int64, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := now.UnixNano()
	h.prune(t)
	// The list runs oldest first: what is held is counted first, and as
	// much of it as is not taken is skipped from the oldest. Permits only
	// grow meanwhile (add, without the lock), so the second pass takes no
	// more than n.
	var avail int64
	for s := h.oldest; s != nil; s = s.next {
		if s.until.Load() > t {
			avail += s.permits()
		}
	}
	skip := max(0, avail-n)
	var tk taken
	var sum, oldest int64
	for s := h.oldest; s != nil && sum < n; s = s.next {
		if s.until.Load() <= t {
			continue
		}
		p := s.permits()
		sk := min(p, skip)
		skip -= sk
		got := min(p-sk, n-sum)
		if got <= 0 {
			continue
		}
		s.addPermits(-got)
		s.out += got
		tk = append(tk, struct {
			s *heldSlot
			n int64
		}{s, got})
		sum += got
		if start := s.start.Load(); len(tk) == 1 || start < oldest {
			oldest = start
		}
	}
	slices.Reverse(tk) // newest first
	return tk, sum, oldest
}

// putBack settles a take after the store handed back released of its
// permits: the newest were handed back, the rest are held again.
func (h *held) putBack(tk taken, released int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range tk {
		back := e.n - min(released, e.n)
		released -= e.n - back
		e.s.out -= e.n
		e.s.addPermits(back)
	}
}

// reset forgets every grant (the state was reset or deleted).
func (h *held) reset() {
	h.mu.Lock()
	h.oldest, h.newest, h.count = nil, nil, 0
	// made stays: the inline slots are not made again, as a Release in
	// flight may still put permits back in them.
	h.free, h.unused = nil, nil
	h.cur.Store(nil)
	h.mu.Unlock()
}

// Result is the answer to an acquire call. TryAcquire and TryAcquireWait
// report a refusal as a Result with Allowed false and a nil error; Acquire
// returns it with a *RefusalError (errors.Is ErrRefused).
type Result struct {
	// Allowed reports whether the permits were granted.
	Allowed bool
	// Remaining is the number of permits a new request could have been
	// granted when the store decided (after this grant).
	Remaining int64
	// RetryAfter, when refused, is how long until the permits could be
	// granted (assuming nobody else takes them first).
	RetryAfter time.Duration
	// At is the store's time of the grant; zero when refused.
	At time.Time
	// Waited is how long the call waited for its turn.
	Waited time.Duration
	// Degraded is set when the store could not be reached and the failure
	// policy (or the fallback store) answered instead.
	Degraded bool
	// cached: a refusal cache answered (Decision.Cached), for Observers.
	cached bool
	// Limits is each limit's status after the decision, in the policy's
	// order: what rate-limit headers show. Set by a Policy's calls (one
	// entry per limit); nil for a Limiter's. Results that show the same
	// may share it: read it, never write it.
	Limits []LimitStatus
	// ResetAfter is how long until every limit is whole again for the key
	// (the latest of the Limits'), nobody asking meanwhile. Set by a
	// Policy's calls.
	ResetAfter time.Duration
	// why is a refusal's reason for Acquire's error, when the Result is
	// made before Acquire sees it (the fallback store's).
	why error
}

// Option configures a Limiter.
type Option func(*Limiter) error

// WithClientID sets the client ID that selects this client's own limit under
// PerClient mode. The default is a random ID per Limiter.
func WithClientID(id string) Option {
	return func(l *Limiter) error {
		if err := validateClientID(id); err != nil {
			return err
		}
		l.client = id
		return nil
	}
}

// WithClock sets the clock used to wait for reservations (tests pass a
// *clock.Fake). The default is clock.Real.
func WithClock(c clock.Clock) Option {
	return func(l *Limiter) error { l.clock = c; return nil }
}

// WithConfig tells the Limiter the config it should have. It is not written
// by New: it is sent along with every call so that a store that lost its data
// (a Redis restart without persistence, FLUSHALL, eviction) is restored in
// the same round trip instead of failing with ErrNotInitialized. A config
// that the store holds wins over this one, but not silently: a call
// answered under another stored config counts in Stats().ConfigDrift, and
// each such stored config is logged at Warn once per process (at most ten
// such lines a minute per logger). WithConfigOverride makes
// this one win instead.
func WithConfig(cfg Config) Option {
	return func(l *Limiter) error {
		c, err := cfg.Normalize()
		if err != nil {
			return err
		}
		l.known.Store(&c)
		w := c
		l.wanted.Store(&w)
		return nil
	}
}

// WithConfigOverride makes WithConfig's config win over a different one
// the store holds, as a deploy's config should: the Limiter's first call
// (acquire, Release or AvailablePermits) stores it with SetRate's default
// semantics (permits already granted keep counting) if the store holds
// another, and counts that in Stats().ConfigOverrides. It does so once per
// Limiter: a config changed later by someone else (an operator's SetRate)
// stands, counted as drift. One call at a time tries; calls meanwhile, and
// after a failed try (the store could not be reached) for a back-off that
// doubles from 100ms up to 10s, go on under the stored config. It needs
// WithConfig.
//
// Without it, a service deployed with a new WithConfig keeps the stored
// limit until someone calls SetRate.
func WithConfigOverride() Option {
	return func(l *Limiter) error { l.override = true; return nil }
}

// WithLogger sets where the Limiter (or the Policy) logs what it notices:
// a stored config other than WithConfig's and an override (once each, at
// Warn and Info), and store failures: answers given in the store's place
// (FailOpen, the fallback store) at Warn, errors handed to callers at Warn
// (store unavailable) or Error (corrupt data, access denied), at most one
// line a minute per kind, saying how many were held back. The default is
// slog.Default().
func WithLogger(lg *slog.Logger) Option {
	return func(l *Limiter) error {
		if lg == nil {
			return &ArgumentError{Arg: "logger", Reason: "must not be nil", Kind: ErrInvalidArgument}
		}
		l.logger = lg
		return nil
	}
}

// WithMaxWait bounds how long any call of this Limiter waits for its turn,
// whatever its context allows: a call whose permits would come later is
// refused at once instead of reserving them. It bounds the queue of
// waiters (and how far ahead their reservations reach) to d's worth of
// permits, so that even waiters whose hand-back never reached the store
// (a store that went away as they gave up) hold permits for at most d.
// Without it a call waits as long as its context allows; Acquire with a
// context that has no deadline, as long as it takes. Acquire refused by
// this bound (not by its deadline) returns a *RefusalError whose Reason is
// ErrRefused itself. d must not be negative; 0 makes Acquire a TryAcquire.
func WithMaxWait(d time.Duration) Option {
	return func(l *Limiter) error {
		if d < 0 {
			return &ArgumentError{Arg: "max wait", Value: d.String(), Reason: "must not be negative", Kind: ErrInvalidArgument}
		}
		l.maxWait = d
		return nil
	}
}

// Stats counts what a Limiter noticed since it was made.
type Stats struct {
	// ConfigDrift counts the acquire calls (TryAcquire, TryAcquireWait,
	// Acquire) answered under a stored config that is not WithConfig's
	// (nor this Limiter's last SetRate's): the stored one applies. Zero
	// without WithConfig.
	ConfigDrift int64
	// Drifting reports whether the stored config last seen is such a one.
	Drifting bool
	// ConfigOverrides counts the stored configs WithConfigOverride replaced
	// (0 or 1).
	ConfigOverrides int64
}

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	return Stats{ConfigDrift: l.stats.drift.Load(), Drifting: l.drifting.Load(), ConfigOverrides: l.stats.overrides.Load()}
}

// New returns the limiter called name in store. It does not touch the store.
func New(store Store, name string, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, &ArgumentError{Arg: "store", Reason: "must not be nil", Kind: ErrInvalidArgument}
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, name: name, clock: clock.Real, maxWait: -1}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.client == "" {
		l.client = newClientID()
	}
	if b, ok := store.(direct.Binder[Key, Config]); ok {
		// Not a type that embeds the store, whose own Acquire would be
		// skipped.
		if h := b.Bind(direct.Token{}, l.key()); h.Owner() == any(store) {
			l.handle = h
			if l.storeShare >= 1 || l.fallback == nil && l.policy != FailOpen {
				l.bound = h
			}
		}
	}
	if l.override {
		if l.wanted.Load() == nil {
			return nil, &ArgumentError{Arg: "config override", Reason: "needs WithConfig", Kind: ErrInvalidArgument}
		}
		l.overridePending.Store(true)
	}
	return l, nil
}

func (l *Limiter) log() *slog.Logger {
	if l.logger != nil {
		return l.logger
	}
	return slog.Default()
}

// checkDrift compares a stored config the Limiter has not seen before with
// the wanted one, and logs a drifted one (see driftLogs).
func (l *Limiter) checkDrift(stored *Config) {
	w := l.wanted.Load()
	if w == nil || stored.SameLimit(*w) {
		l.drifting.Store(false)
		return
	}
	l.drifting.Store(true)
	text, want := stored.String(), w.String()
	log, suppressed := driftLog.shouldLog(l.logger, l.store, l.name+"\x00"+text+"\x00"+want, l.clock.Now())
	if !log {
		return
	}
	args := []any{"limiter", l.name, "stored", text, "configured", want}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	l.log().Warn("redlimit: the store holds another config than WithConfig's; the stored one applies (SetRate or WithConfigOverride makes the configured one win)", args...)
}

// driftLog de-duplicates the drift warnings of all the process's Limiters:
// a service that makes a Limiter per request (with a logger of its own or
// not) logs a drifted config once, not once per request. Each (store,
// limiter name, stored config, configured config) is logged once (the
// memory of them is bounded by maxDriftSeen, then starts afresh), and at
// most driftLogsPerMinute lines per logger are written in a minute (of the
// Limiter's clock); the next line written says how many were suppressed.
var driftLog = driftLogs{seen: map[driftKey]struct{}{}, budgets: map[*slog.Logger]*driftBudget{}}

const (
	maxDriftSeen       = 1024
	maxDriftLoggers    = 64
	driftLogsPerMinute = 10
)

type driftLogs struct {
	mu      sync.Mutex
	seen    map[driftKey]struct{}
	budgets map[*slog.Logger]*driftBudget
}

// driftKey names one drift. store is the Limiter's store where it can be
// a map key (a pointer, as redlimit's stores are), else nil.
type driftKey struct {
	store any
	text  string
}

// driftBudget is one logger's lines in the current minute.
type driftBudget struct {
	minute     time.Time
	lines      int
	suppressed int64
}

// shouldLog reports whether the drift is to be logged to lg now, and how
// many lines were suppressed before it.
func (d *driftLogs) shouldLog(lg *slog.Logger, store Store, text string, now time.Time) (bool, int64) {
	k := driftKey{text: text}
	if t := reflect.TypeOf(store); t != nil && t.Kind() == reflect.Pointer {
		k.store = store
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[k]; ok {
		return false, 0
	}
	if len(d.seen) >= maxDriftSeen {
		clear(d.seen)
	}
	d.seen[k] = struct{}{}
	b := d.budgets[lg]
	if b == nil {
		if len(d.budgets) >= maxDriftLoggers {
			clear(d.budgets)
		}
		b = &driftBudget{}
		d.budgets[lg] = b
	}
	if now.Sub(b.minute) >= time.Minute || now.Before(b.minute) {
		b.minute, b.lines = now, 0
	}
	if b.lines >= driftLogsPerMinute {
		b.suppressed++
		return false, 0
	}
	b.lines++
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// applyOverride is WithConfigOverride's first call: it stores the wanted
// config (keeping state) where the store holds another. One call at a time
// tries, and none for a while after a failure: the others go on under the
// stored config rather than queue behind a store that does not answer.
func (l *Limiter) applyOverride(ctx context.Context) {
	if next := l.overrideNext.Load(); next != 0 && l.clock.Now().UnixNano() < next {
		return
	}
	if !l.overrideMu.TryLock() {
		return
	}
	defer l.overrideMu.Unlock()
	if !l.overridePending.Load() {
		return
	}
	w := *l.wanted.Load()
	stored, set, err := l.store.SetConfig(ctx, l.name, w, SetIfAbsent)
	if err != nil {
		l.overrideFailed()
		return
	}
	if !set && !stored.SameLimit(w) {
		old := stored
		if stored, _, err = l.store.SetConfig(ctx, l.name, w, SetKeepState); err != nil {
			l.overrideFailed()
			return
		}
		l.stats.overrides.Add(1)
		l.log().Info("redlimit: WithConfigOverride replaced the stored config", "limiter", l.name, "stored", old.String(), "configured", w.String())
	}
	l.overridePending.Store(false)
	l.remember(&stored)
}

// overrideFailed puts the next override attempt off. l.overrideMu is held.
func (l *Limiter) overrideFailed() {
	l.overrideBackoff = min(max(2*l.overrideBackoff, overrideMinBackoff), overrideMaxBackoff)
	l.overrideNext.Store(l.clock.Now().Add(l.overrideBackoff).UnixNano())
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// ClientID returns the ID of this client (its PerClient limit).
func (l *Limiter) ClientID() string { return l.client }

func (l *Limiter) key() Key { return Key{Name: l.name, Client: l.client} }

// noConfig is the known config of a Limiter that knows none.
var noConfig Config

func (l *Limiter) knownConfig() Config {
	if p := l.known.Load(); p != nil {
		return *p
	}
	return Config{}
}

// remember keeps c as the known config; the hot path only compares.
func (l *Limiter) remember(c *Config) {
	if c.Rate <= 0 {
		return
	}
	if p := l.known.Load(); p == nil || !p.Equal(c) {
		kept := *c // only a change allocates
		l.known.Store(&kept)
		l.checkDrift(&kept)
	}
}

// rememberAcquired is remember for an acquire call's config, which counts
// in Stats().ConfigDrift when it drifts.
func (l *Limiter) rememberAcquired(c *Config) {
	l.remember(c)
	if l.drifting.Load() {
		l.stats.drift.Add(1)
	}
}

// rememberShared is rememberAcquired for a bound store's config, which
// the store never writes: the known config becomes that very one, so that
// the next calls compare pointers only.
func (l *Limiter) rememberShared(c *Config) {
	if p := l.known.Load(); p != c && c.Rate > 0 {
		l.known.Store(c)
		if p == nil || !p.Equal(c) {
			l.checkDrift(c)
		}
	}
	if l.drifting.Load() {
		l.stats.drift.Add(1)
	}
}

// decisionOf is a bound store's answer as a Decision.
func decisionOf(a *direct.Answer[Config]) Decision {
	d := Decision{Granted: a.Granted, Remaining: a.Remaining, Wait: time.Duration(a.Wait) * time.Microsecond, Now: time.UnixMicro(a.Now), Full: a.Full, Config: *a.Config}
	if a.Granted {
		d.At = time.UnixMicro(a.At)
	}
	return d
}

// recheckDrift re-runs the drift check after a SetRate or TrySetRate: the
// stored or wanted config may have changed without the known one changing.
func (l *Limiter) recheckDrift(stored *Config) {
	if stored.Rate > 0 {
		l.checkDrift(stored)
	}
}

// TrySetRate stores cfg where no config exists yet and reports whether it did.
// If the same limit is already stored it returns false and no error; if a
// different one is, it returns false and a *MismatchError (errors.Is
// ErrConfigMismatch) naming both: Redisson keeps the old config silently.
func (l *Limiter) TrySetRate(ctx context.Context, cfg Config) (_ bool, err error) {
	if l.obs != nil {
		defer l.observeErr(ctx, OpSet, l.clock.Now(), 0, &err)
	}
	c, err := cfg.Normalize()
	if err != nil {
		return false, err
	}
	stored, set, err := l.store.SetConfig(ctx, l.name, c, SetIfAbsent)
	if err != nil {
		return false, err
	}
	l.remember(&stored)
	l.recheckDrift(&stored)
	if !set && !stored.SameLimit(c) {
		return false, &MismatchError{Stored: stored, Requested: c}
	}
	return set, nil
}

// SetOption changes what SetRate does.
type SetOption func(*SetMode)

// ResetState makes SetRate start the limiter afresh: permits already granted
// (and reservations of waiting callers) no longer count, for every client.
func ResetState() SetOption { return func(m *SetMode) { *m = SetResetState } }

// SetRate stores cfg for every client of the limiter at once. By default the
// permits already granted still count under the new config (a change never
// hands out a fresh window; each algorithm's package says how its state
// carries over); pass ResetState() to start from nothing. A change of
// algorithm always starts afresh: one algorithm's state means nothing to
// another.
func (l *Limiter) SetRate(ctx context.Context, cfg Config, opts ...SetOption) (err error) {
	if l.obs != nil {
		defer l.observeErr(ctx, OpSet, l.clock.Now(), 0, &err)
	}
	c, err := cfg.Normalize()
	if err != nil {
		return err
	}
	how := SetKeepState
	for _, o := range opts {
		o(&how)
	}
	stored, _, err := l.store.SetConfig(ctx, l.name, c, how)
	if err != nil {
		return err
	}
	if l.wanted.Load() != nil {
		l.wanted.Store(&c) // this Limiter's own choice: no drift
		l.overridePending.Store(false)
	}
	if how == SetResetState || stored.Algorithm != l.knownConfig().Algorithm {
		l.held.reset() // the grants no longer count
	}
	l.remember(&stored)
	l.recheckDrift(&stored)
	return nil
}

// Config reads the stored config back (ErrNotInitialized if there is none).
func (l *Limiter) Config(ctx context.Context) (Config, error) {
	c, err := l.store.Config(ctx, l.name)
	if err != nil {
		return Config{}, err
	}
	l.remember(&c)
	return c, nil
}

// TryAcquire grants n permits now or refuses at once.
func (l *Limiter) TryAcquire(ctx context.Context, n int64) (Result, error) {
	return l.acquire(ctx, n, 0, true) // inlined: the Result is copied once
}

// TryAcquireWait grants n permits, waiting up to maxWait (and no longer than
// ctx allows) for them. If they cannot be had within that time it refuses at
// once, without waiting. On redlimit's own stores waiters are served in the
// order they asked, across all clients: one round trip reserves the caller's
// turn and the call sleeps until then, without polling.
func (l *Limiter) TryAcquireWait(ctx context.Context, n int64, maxWait time.Duration) (Result, error) {
	if maxWait < 0 {
		return Result{}, &ArgumentError{Arg: "wait", Value: maxWait.String(), Reason: "must not be negative", Kind: ErrInvalidArgument}
	}
	return l.acquire(ctx, n, maxWait, true)
}

// Acquire waits until n permits are granted or ctx ends. It returns a nil
// error if and only if the permits were granted (as x/time/rate's WaitN), so
// code that checks only the error never goes on without a permit:
//
//   - When the store can grant them only after ctx's deadline, Acquire does
//     not sleep in vain: it returns at once a *RefusalError matching
//     ErrWouldExceedDeadline (and ErrRefused, not context.DeadlineExceeded),
//     with the Result's RetryAfter set.
//   - When a leaky bucket's queue has no room, it returns at once a
//     *RefusalError matching ErrQueueFull (and ErrRefused).
//   - A caller whose context ends while it waits hands its reserved permits
//     back, so they are not lost to others, and gets ctx.Err() (a store
//     whose call was still in flight then hands back what that call is
//     granted itself: the redis store's package doc says how). Once every
//     waiter of a queue has gone, the limit is as if they had never asked,
//     whatever the order in which they gave up.
//
// Store failures are errors as for every call (ErrUnavailable, ...), unless
// the failure policy or the fallback store grants.
func (l *Limiter) Acquire(ctx context.Context, n int64) (Result, error) {
	if l.obs != nil {
		return l.observedAcquire(ctx, n, -1, true)
	}
	return l.mustAcquire(ctx, n)
}

// mustAcquire is Acquire.
func (l *Limiter) mustAcquire(ctx context.Context, n int64) (Result, error) {
	r, err := l.acquire(ctx, n, -1, false)
	if err == nil && !r.Allowed {
		// A refusal of the fallback store (the stores' own refusals
		// are errors already), with its reason where it has one.
		why := r.why
		if why == nil {
			why = ErrRefused
		}
		r.why = nil
		return r, &RefusalError{Reason: why, RetryAfter: r.RetryAfter}
	}
	return r, err
}

// handBackTimeout bounds the hand-back of a cancelled reservation.
const handBackTimeout = 2 * time.Second

// acquire asks the store for n permits, waiting at most maxWait (negative:
// Acquire, as long as ctx lasts, and a refusal is an error); observed: the
// Observer, if any, is told (observedAcquire).
func (l *Limiter) acquire(ctx context.Context, n int64, maxWait time.Duration, observed bool) (Result, error) {
	if observed && l.obs != nil {
		return l.observedAcquire(ctx, n, maxWait, false)
	}
	if l.overridePending.Load() {
		l.applyOverride(ctx)
	}
	known := l.known.Load() // never written once stored: no copy
	if known == nil {
		known = &noConfig
	}
	mustGrant := maxWait < 0
	if err := validatePermits(n); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	bounded := false // WithMaxWait's bound, not the deadline, applies
	if maxWait != 0 {
		// A wait of zero (TryAcquire) is bounded by neither.
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left < 0 {
				left = 0
			}
			if maxWait < 0 || left < maxWait {
				maxWait = left
			}
		}
		if l.maxWait >= 0 && (maxWait < 0 || l.maxWait < maxWait) {
			maxWait, bounded = l.maxWait, true
		}
	}
	if l.bound != nil {
		// A bound store (storeAcquire's first case): its short answer,
		// the common outcomes taken from it directly.
		a, err := l.bound.Acquire(ctx, known, n, maxWait)
		if err != nil {
			return l.degraded(ctx, n, maxWait, err)
		}
		l.rememberShared(a.Config)
		if a.Granted && a.Wait <= 0 {
			l.held.add(a.Config, a.At/1000, n, l.clock)
			return Result{Allowed: true, Remaining: a.Remaining, At: time.UnixMicro(a.At), Waited: time.Duration(a.Wait) * time.Microsecond}, nil
		}
		if !a.Granted && !mustGrant {
			return Result{Remaining: a.Remaining, RetryAfter: time.Duration(a.Wait) * time.Microsecond}, nil
		}
		d := decisionOf(&a)
		return l.decided(ctx, &d, n, mustGrant, bounded)
	}
	var d Decision
	if err := l.storeAcquire(ctx, known, n, maxWait, &d); err != nil {
		return l.degraded(ctx, n, maxWait, err)
	}
	l.rememberAcquired(&d.Config)
	return l.decided(ctx, &d, n, mustGrant, bounded)
}

// decided is acquire's Result for the store's Decision: the answers that
// need no sleep as wait gives them, without copying the Decision (measure
// with BenchmarkTryAcquire in memstore).
func (l *Limiter) decided(ctx context.Context, d *Decision, n int64, mustGrant, bounded bool) (Result, error) {
	if !d.Granted {
		r := Result{Remaining: d.Remaining, RetryAfter: d.Wait, cached: d.Cached}
		if mustGrant {
			return r, refusal(ctx, d, bounded)
		}
		return r, nil
	}
	if d.Wait <= 0 {
		l.held.add(&d.Config, d.At.UnixMilli(), n, l.clock)
		return Result{Allowed: true, Remaining: d.Remaining, At: d.At, Waited: d.Wait}, nil
	}
	return l.wait(ctx, *d, n)
}

// refusal is Acquire's error for a refused decision: a store refuses a
// wait bounded only by ctx when the queue is full or the grant would come
// after ctx's deadline; bounded says WithMaxWait's bound, shorter than the
// deadline, refused it (ErrRefused itself: the deadline was not the cause).
func refusal(ctx context.Context, d *Decision, bounded bool) error {
	return &RefusalError{Reason: refusalReason(ctx, d, bounded), RetryAfter: d.Wait}
}

// refusalReason is refusal's Reason.
func refusalReason(ctx context.Context, d *Decision, bounded bool) error {
	if _, ok := ctx.Deadline(); d.Full {
		return ErrQueueFull
	} else if ok && !bounded {
		return ErrWouldExceedDeadline
	}
	return ErrRefused
}

// wait turns a decision into a Result, sleeping until a reservation is due
// and handing it back if ctx ends first.
func (l *Limiter) wait(ctx context.Context, d Decision, n int64) (Result, error) {
	if !d.Granted {
		return Result{Remaining: d.Remaining, RetryAfter: d.Wait, why: refusalReason(ctx, &d, false)}, nil
	}
	res := Result{Allowed: true, Remaining: d.Remaining, At: d.At, Waited: d.Wait}
	if d.Wait <= 0 {
		l.held.add(&d.Config, d.At.UnixMilli(), n, l.clock)
		return res, nil
	}
	fired, stop := l.clock.NewTimer(d.Wait)
	select {
	case <-fired:
		l.held.add(&d.Config, d.At.UnixMilli(), n, l.clock)
		return res, nil
	case <-ctx.Done():
		stop()
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		defer cancel()
		if _, herr := l.store.Cancel(hctx, l.key(), d.Config, d.At, n); herr != nil {
			return Result{}, errors.Join(ctx.Err(), fmt.Errorf("redlimit: handing back a reservation: %w", herr))
		}
		return Result{}, ctx.Err()
	}
}

// Release hands back up to n permits this Limiter was granted and did not
// use, newest first, so that others can have them before their interval
// ends. It returns how many were handed back: fewer than n when fewer are
// held, 0 without asking the store when none are.
//
// What is held is recorded by this Limiter in process memory, not in the
// store (which costs nothing per key at rest): the grants it was given by
// the store (not by a fallback store or FailOpen) that still count against
// the limit where the store hands permits back. A sliding log's grant is
// held one Interval after it was made; a fixed window's or a sliding
// counter's only until its own window ends (the store hands back permits
// of the current window); a token bucket's for Burst/Rate x Interval, when
// an empty bucket has refilled; a leaky bucket's not at all: its permits
// have left the queue. Close grants share one record, held until the
// earliest of them stops (up to a thirty-second of the span earlier). The
// span is timed by this Limiter's clock from when the grant's answer
// arrived, so a store clock set differently does not stretch it. Releases
// running at once never hand back more, together, than is held. Another
// Limiter, even with the same client ID, holds none of them, and neither
// does this client after a restart: the record is lost with the process,
// so a restarted client can release nothing it took before. The store then
// bounds the hand-back again by what it still counts. Under Overall the
// store hands back the newest grants of any client, as many as this
// Limiter holds; on a sliding log, for each of this Limiter's grants
// released, one made no later than it, so a Release never frees another
// client's newer grant in its place (which would let a window admit more
// than Rate). The record keeps its grants' instants to the millisecond
// while it is small (up to 32 of them); beyond that, grants within a
// thirty-second of the Interval share the instant of the earliest, and a
// Release may then hand back fewer than held, when the log holds fewer
// entries made up to that instant. A Release spanning several records
// makes one store call for each.
func (l *Limiter) Release(ctx context.Context, n int64) (_ int64, err error) {
	if l.obs != nil {
		defer l.observeErr(ctx, OpRelease, l.clock.Now(), n, &err)
	}
	if n <= 0 {
		return 0, &ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: "must be at least 1", Kind: ErrInvalidArgument}
	}
	if l.overridePending.Load() {
		l.applyOverride(ctx)
	}
	// Taken from the record before the store call, so that concurrent
	// Releases never hand back more than is held together.
	tk, n, oldest := l.held.take(l.clock.Now(), n)
	if n == 0 {
		return 0, nil
	}
	// A sliding log hands back only entries made no later than the
	// grants released: each entry removed then frees its permit no later
	// than one of this Limiter's own would have, so no window counts fewer
	// grants than were used, whoever made the entries. Each slot's permits
	// go with its start as the bound (its earliest grant), one store call
	// per slot, newest first; other algorithms' permits are
	// interchangeable, and go in one call.
	known := l.knownConfig()
	if known.Algorithm != SlidingLog || len(tk) == 1 {
		got, err := l.store.Release(ctx, l.key(), known, n, time.UnixMilli(oldest))
		l.held.putBack(tk, got)
		return got, err
	}
	var sum int64
	for i := range tk {
		got, err := l.store.Release(ctx, l.key(), known, tk[i].n, time.UnixMilli(tk[i].s.start.Load()))
		l.held.putBack(tk[i:i+1], got)
		sum += got
		if err != nil {
			l.held.putBack(tk[i+1:], 0)
			return sum, err
		}
	}
	return sum, nil
}

// AvailablePermits returns how many permits a request could be granted now.
func (l *Limiter) AvailablePermits(ctx context.Context) (_ int64, err error) {
	if l.obs != nil {
		defer l.observeErr(ctx, OpStatus, l.clock.Now(), 0, &err)
	}
	if l.overridePending.Load() {
		l.applyOverride(ctx)
	}
	n, cfg, err := l.store.Available(ctx, l.key(), l.knownConfig())
	if err != nil {
		return 0, err
	}
	l.remember(&cfg)
	return n, nil
}

// Delete removes the limiter's config and its Overall state, and reports
// whether a config existed. PerClient state is left to expire on its own
// (within one interval): a config set afterwards starts a new epoch that
// never counts it; on Redis, clients' keys holding data redlimit did not
// write are removed. This Limiter forgets the config too; another Limiter that
// still knows it (WithConfig, or from earlier calls) restores it, epoch and
// all, on its next call, exactly as after a data loss.
func (l *Limiter) Delete(ctx context.Context) (bool, error) {
	l.known.Store(nil)
	l.held.reset()
	return l.store.Delete(ctx, l.name)
}

// Expire makes the limiter disappear after ttl: its config and Overall state
// go then, as with Delete (PerClient state expires on its own once idle). It
// reports whether a config existed.
func (l *Limiter) Expire(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := validateTTL(ttl); err != nil {
		return false, err
	}
	return l.store.Expire(ctx, l.name, ttl)
}

// ClearExpire removes a TTL set by Expire; it reports whether there was one.
func (l *Limiter) ClearExpire(ctx context.Context) (bool, error) {
	return l.store.ClearExpire(ctx, l.name)
}
