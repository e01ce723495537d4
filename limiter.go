package redlimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/clock"
)

// Limiter is one named rate limit in a Store, seen from one client. Every
// Limiter with the same name on the same store shares the limit (Overall) or
// gets its own (PerClient, by client ID). A Limiter is safe for concurrent use.
type Limiter struct {
	store  Store
	name   string
	client string
	clock  clock.Clock

	policy   FailurePolicy
	fallback Store
	share    float64

	// known is the last config seen, sent along so that a store that lost
	// it heals; nil until one is known.
	known atomic.Pointer[Config]
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
}

// Option configures a Limiter.
type Option func(*Limiter) error

// WithClientID sets the client ID that selects this client's own limit under
// PerClient mode. The default is a random ID per Limiter.
func WithClientID(id string) Option {
	return func(l *Limiter) error {
		if err := ValidateClientID(id); err != nil {
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
// that the store holds always wins over this one.
func WithConfig(cfg Config) Option {
	return func(l *Limiter) error {
		c, err := cfg.Normalize()
		if err != nil {
			return err
		}
		l.known.Store(&c)
		return nil
	}
}

// New returns the limiter called name in store. It does not touch the store.
func New(store Store, name string, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, &ArgumentError{Arg: "store", Reason: "must not be nil", Kind: ErrInvalidArgument}
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, name: name, clock: clock.Real}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.client == "" {
		l.client = NewClientID()
	}
	return l, nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// ClientID returns the ID of this client (its PerClient limit).
func (l *Limiter) ClientID() string { return l.client }

func (l *Limiter) key() Key { return Key{Name: l.name, Client: l.client} }

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
	if p := l.known.Load(); p != nil && p.Equal(c) {
		return
	}
	kept := *c // only a change allocates
	l.known.Store(&kept)
}

// TrySetRate stores cfg where no config exists yet and reports whether it did.
// If the same limit is already stored it returns false and no error; if a
// different one is, it returns false and a *MismatchError (errors.Is
// ErrConfigMismatch) naming both: Redisson keeps the old config silently.
func (l *Limiter) TrySetRate(ctx context.Context, cfg Config) (bool, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return false, err
	}
	stored, set, err := l.store.SetConfig(ctx, l.name, c, SetIfAbsent)
	if err != nil {
		return false, err
	}
	l.remember(&stored)
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
func (l *Limiter) SetRate(ctx context.Context, cfg Config, opts ...SetOption) error {
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
	l.remember(&stored)
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
	return l.acquire(ctx, n, 0)
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
	return l.acquire(ctx, n, maxWait)
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
//     back, so they are not lost to others, and gets ctx.Err().
//
// Store failures are errors as for every call (ErrUnavailable, ...), unless
// the failure policy or the fallback store grants.
func (l *Limiter) Acquire(ctx context.Context, n int64) (Result, error) {
	r, err := l.acquire(ctx, n, -1)
	if err == nil && !r.Allowed {
		// A refusal of the fallback store (the stores' own refusals
		// are errors already).
		return r, &RefusalError{Reason: ErrRefused, RetryAfter: r.RetryAfter}
	}
	return r, err
}

// handBackTimeout bounds the hand-back of a cancelled reservation.
const handBackTimeout = 2 * time.Second

// acquire asks the store for n permits, waiting at most maxWait (negative:
// Acquire, as long as ctx lasts, and a refusal is an error).
func (l *Limiter) acquire(ctx context.Context, n int64, maxWait time.Duration) (Result, error) {
	known := l.knownConfig()
	mustGrant := maxWait < 0
	if err := ValidatePermits(n); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left < 0 {
			left = 0
		}
		if maxWait < 0 || left < maxWait {
			maxWait = left
		}
	}
	d, err := l.store.Acquire(ctx, l.key(), known, n, maxWait)
	if err != nil {
		return l.degraded(ctx, n, maxWait, err)
	}
	l.remember(&d.Config)
	// The answers that need no sleep, as wait gives them, inline: passing
	// the Decision to a call, or a Result back from one, costs 8-15 ns here
	// (BenchmarkTryAcquire in memstore), a tenth of the whole call.
	if !d.Granted {
		r := Result{Remaining: d.Remaining, RetryAfter: d.Wait}
		if mustGrant {
			return r, refusal(ctx, &d)
		}
		return r, nil
	}
	if d.Wait <= 0 {
		return Result{Allowed: true, Remaining: d.Remaining, At: d.At, Waited: d.Wait}, nil
	}
	return l.wait(ctx, d, n)
}

// refusal is Acquire's error for a refused decision: a store refuses a
// wait bounded only by ctx when the queue is full or the grant would come
// after ctx's deadline.
func refusal(ctx context.Context, d *Decision) error {
	reason := ErrRefused
	if _, ok := ctx.Deadline(); d.Full {
		reason = ErrQueueFull
	} else if ok {
		reason = ErrWouldExceedDeadline
	}
	return &RefusalError{Reason: reason, RetryAfter: d.Wait}
}

// wait turns a decision into a Result, sleeping until a reservation is due
// and handing it back if ctx ends first.
func (l *Limiter) wait(ctx context.Context, d Decision, n int64) (Result, error) {
	if !d.Granted {
		return Result{Remaining: d.Remaining, RetryAfter: d.Wait}, nil
	}
	res := Result{Allowed: true, Remaining: d.Remaining, At: d.At, Waited: d.Wait}
	if d.Wait <= 0 {
		return res, nil
	}
	fired, stop := l.clock.NewTimer(d.Wait)
	select {
	case <-fired:
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

// Release hands back up to n permits this client was granted and did not
// use, newest first, so that others can have them before their interval
// ends. It returns how many were handed back (fewer than n when fewer are
// held).
func (l *Limiter) Release(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, &ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: "must be at least 1", Kind: ErrInvalidArgument}
	}
	return l.store.Release(ctx, l.key(), l.knownConfig(), n)
}

// AvailablePermits returns how many permits a request could be granted now.
func (l *Limiter) AvailablePermits(ctx context.Context) (int64, error) {
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
// never counts it. This Limiter forgets the config too; another Limiter that
// still knows it (WithConfig, or from earlier calls) restores it, epoch and
// all, on its next call, exactly as after a data loss.
func (l *Limiter) Delete(ctx context.Context) (bool, error) {
	l.known.Store(nil)
	return l.store.Delete(ctx, l.name)
}

// Expire makes the limiter disappear after ttl: its config and Overall state
// go then, as with Delete (PerClient state expires on its own once idle). It
// reports whether a config existed.
func (l *Limiter) Expire(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := ValidateTTL(ttl); err != nil {
		return false, err
	}
	return l.store.Expire(ctx, l.name, ttl)
}

// ClearExpire removes a TTL set by Expire; it reports whether there was one.
func (l *Limiter) ClearExpire(ctx context.Context) (bool, error) {
	return l.store.ClearExpire(ctx, l.name)
}
