package redlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/direct"
)

// Policy is one rule applied to many keys: a named list of one or more
// limits, stored once (so that SetLimits reaches every client), applied
// to any number of keys given per call (a user, an API key, a client IP,
// a tenant). Each key's state is made on its first use and expires on its
// own once it can no longer change an answer: nothing is stored per key
// but state. With several limits (10 per second and 1000 per hour) a
// request is granted only if every limit grants it, and then charged to
// all of them at once; a refusal charges none.
//
// Keyed policies and PerClient limiters: a PerClient Limiter keeps one
// state per client ID under one stored config, as a policy keeps one per
// key; it is the layout Redisson's PER_CLIENT rate type shares with Java
// services, with a client ID fixed per Limiter. A Policy takes the key
// per call, any bytes, several limits, and spreads its keys over a Redis
// Cluster's slots (a PerClient limiter's clients share its slot).
//
// A Policy is safe for concurrent use.
type Policy struct {
	store PolicyStore
	name  string
	clock clock.Clock
	// policy: FailOpen or FailClosed (WithFailurePolicy).
	policy  FailurePolicy
	maxWait time.Duration
	logger  *slog.Logger
	// known is the policy last seen (or NewPolicy's limits), sent with
	// every call; nil until one is known.
	known atomic.Pointer[PolicyConfig]
	// names are the LimitNames of the limits a Result showed last: every
	// Result of a policy names the same limits, until they change.
	names atomic.Pointer[limitNames]
	// statuses is room for the Limits of Results to come (statusSlab).
	statuses atomic.Pointer[statusSlab]
	// obs is WithObserver's; nil: none.
	obs Observer
	// handle is the policy in a store of this process bound (NewPolicy),
	// which makes the common grants without PolicyStore's whole path;
	// nil: none.
	handle direct.KeyHandle[PolicyConfig, LimitStatus]
}

// NewPolicy returns the policy called name in store. limits, when not nil,
// is the policy it should have: it is sent with every call, so that a
// store without the policy stores it then (a store that holds one keeps
// its own; SetLimits changes it). NewPolicy does not touch the store.
// The options that apply are WithFailurePolicy, WithMaxWait, WithClock,
// WithLogger and WithObserver.
func NewPolicy(store PolicyStore, name string, limits []Config, opts ...Option) (*Policy, error) {
	if store == nil {
		return nil, &ArgumentError{Arg: "store", Reason: "must not be nil", Kind: ErrInvalidArgument}
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	// The options are Limiter options: they are applied to one, and what
	// a Policy takes of it is copied.
	l := &Limiter{clock: clock.Real, maxWait: -1}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	if l.client != "" || l.wanted.Load() != nil || l.override || l.fallback != nil || l.storeShare != 0 {
		return nil, &ArgumentError{Arg: "option", Reason: "a Policy takes WithFailurePolicy, WithMaxWait, WithClock, WithLogger and WithObserver only (its limits are NewPolicy's)", Kind: ErrInvalidArgument}
	}
	p := &Policy{store: store, name: name, clock: l.clock, policy: l.policy, maxWait: l.maxWait, logger: l.logger, obs: l.obs}
	if b, ok := store.(direct.KeyBinder[PolicyConfig, LimitStatus]); ok {
		// Not a type that embeds the store, whose own AcquireKey would
		// be skipped.
		if h := b.BindPolicy(direct.Token{}, name); h.Owner() == any(store) {
			p.handle = h
		}
	}
	if limits != nil {
		norm, err := NormalizePolicy(limits)
		if err != nil {
			return nil, err
		}
		p.known.Store(&PolicyConfig{Limits: norm})
	}
	return p, nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

func (p *Policy) knownPolicy() PolicyConfig {
	if k := p.known.Load(); k != nil {
		return *k
	}
	return PolicyConfig{}
}

// remember keeps the stored policy a store answered with, if it is newer.
func (p *Policy) remember(c *PolicyConfig) {
	if len(c.Limits) == 0 {
		return
	}
	for {
		old := p.known.Load()
		if old != nil && old.Epoch == c.Epoch && old.Version >= c.Version {
			return
		}
		cc := *c
		if p.known.CompareAndSwap(old, &cc) {
			return
		}
	}
}

// rememberShared is remember for a bound store's policy, which the store
// never writes: the known policy becomes that very one, so that the next
// calls compare pointers only.
func (p *Policy) rememberShared(c *PolicyConfig) {
	if old := p.known.Load(); old != c {
		p.rememberOther(old, c)
	}
}

// rememberOther is rememberShared for a policy other than the known one.
func (p *Policy) rememberOther(old, c *PolicyConfig) {
	if old == nil || old.Epoch != c.Epoch || old.Version <= c.Version {
		p.known.CompareAndSwap(old, c)
	}
}

// SetLimits stores the policy's limits, replacing any. Keys' states keep
// counting what they were granted (each limit by its algorithm's rules for
// a config change; a limit added starts empty), unless ResetState is given.
func (p *Policy) SetLimits(ctx context.Context, limits []Config, opts ...SetOption) (err error) {
	if p.obs != nil {
		defer p.observeResult(ctx, OpSet, "", p.clock.Now(), 0, &Result{}, &err)
	}
	how := SetKeepState
	for _, o := range opts {
		o(&how)
	}
	norm, err := NormalizePolicy(limits)
	if err != nil {
		return err
	}
	stored, _, err := p.store.SetPolicy(ctx, p.name, PolicyConfig{Limits: norm}, how)
	if err != nil {
		return err
	}
	p.remember(&stored)
	return nil
}

// TrySetLimits stores the limits only if the policy has none; it reports
// whether it stored them. A different policy already stored is an
// ErrConfigMismatch.
func (p *Policy) TrySetLimits(ctx context.Context, limits []Config) (_ bool, err error) {
	if p.obs != nil {
		defer p.observeResult(ctx, OpSet, "", p.clock.Now(), 0, &Result{}, &err)
	}
	norm, err := NormalizePolicy(limits)
	if err != nil {
		return false, err
	}
	want := PolicyConfig{Limits: norm}
	stored, set, err := p.store.SetPolicy(ctx, p.name, want, SetIfAbsent)
	if err != nil {
		return false, err
	}
	p.remember(&stored)
	if !set && !stored.SameLimits(want) {
		return false, &ArgumentError{Arg: "limits", Reason: "a different policy is stored", Kind: ErrConfigMismatch}
	}
	return set, nil
}

// Limits reads the stored limits back (ErrNotInitialized if there are none).
func (p *Policy) Limits(ctx context.Context) ([]Config, error) {
	c, err := p.store.Policy(ctx, p.name)
	if err != nil {
		return nil, err
	}
	p.remember(&c)
	return c.Limits, nil
}

// Delete removes the policy; its keys' states expire on their own and
// never count for a policy stored again later.
func (p *Policy) Delete(ctx context.Context) (bool, error) {
	p.known.Store(nil)
	return p.store.DeletePolicy(ctx, p.name)
}

// Key returns the policy applied to key: any bytes, 1..1024 of them (a bad
// key is reported by the Keyed's calls, as ErrInvalidArgument). It does
// not allocate.
func (p *Policy) Key(key string) Keyed { return Keyed{p: p, key: key} }

// Keyed is a policy applied to one key: the Limiter calls, for that key.
// It is a small value; make one per call or keep it.
type Keyed struct {
	p   *Policy
	key string
}

// Key returns the key.
func (k Keyed) Key() string { return k.key }

func (k Keyed) pk() PolicyKey { return PolicyKey{Policy: k.p.name, Key: k.key} }

// TryAcquire grants n permits now on every limit of the policy, or refuses
// at once (a Result with Allowed false and a nil error).
func (k Keyed) TryAcquire(ctx context.Context, n int64) (Result, error) {
	p := k.p
	if p.obs != nil {
		return k.observedAcquire(ctx, n, 0)
	}
	if h := p.handle; h != nil && validateKey(k.key) == nil && validatePermits(n) == nil && ctx.Err() == nil {
		// acquire's first case, without its frame: a Result is large
		// to copy.
		var r Result
		if p.takeBound(h, k.key, n, &r) {
			return r, nil
		}
	}
	return k.acquire(ctx, n, 0)
}

// takeBound asks h, the bound store's policy, for n permits on key now,
// and on a grant fills r, zero, with it. false: nothing changed, for the
// whole path to answer.
func (p *Policy) takeBound(h direct.KeyHandle[PolicyConfig, LimitStatus], key string, n int64, r *Result) bool {
	limits, rem, reset, now, pc, ok := h.Take(key, n)
	if !ok {
		return false
	}
	p.rememberShared(pc)
	r.Allowed, r.Remaining, r.At, r.Limits = true, rem, time.UnixMicro(now), limits
	r.ResetAfter = time.Duration(reset) * time.Microsecond
	return true
}

// TryAcquireWait grants n permits, waiting up to maxWait for them; if they
// cannot be had within that time it refuses at once. The caller's turn is
// reserved in one round trip, as a Limiter's: with several limits, on all
// of them at one instant, the latest of their earliest
// (algorithm.AcquireAll), so that later callers queue after it. A caller
// whose ctx ends before that instant hands all of it back (CancelKey).
func (k Keyed) TryAcquireWait(ctx context.Context, n int64, maxWait time.Duration) (Result, error) {
	if maxWait < 0 {
		return Result{}, &ArgumentError{Arg: "wait", Value: maxWait.String(), Reason: "must not be negative", Kind: ErrInvalidArgument}
	}
	if k.p.obs != nil {
		return k.observedAcquire(ctx, n, maxWait)
	}
	return k.acquire(ctx, n, maxWait)
}

// Acquire waits until n permits are granted or ctx ends, and returns a nil
// error if and only if they were granted, as Limiter.Acquire does (a
// *RefusalError matching ErrWouldExceedDeadline or ErrQueueFull when
// waiting cannot help).
func (k Keyed) Acquire(ctx context.Context, n int64) (Result, error) {
	if k.p.obs != nil {
		return k.observedAcquire(ctx, n, -1)
	}
	return k.acquire(ctx, n, -1)
}

// acquire asks for n permits, waiting at most maxWait (negative: as long
// as ctx lasts, and a refusal is an error).
func (k Keyed) acquire(ctx context.Context, n int64, maxWait time.Duration) (Result, error) {
	p := k.p
	// NewPolicy checked the name.
	if err := validateKey(k.key); err != nil {
		return Result{}, err
	}
	if err := validatePermits(n); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if h := p.handle; h != nil {
		// A grant at once: the same whatever the wait.
		var r Result
		if p.takeBound(h, k.key, n, &r) {
			return r, nil
		}
	}
	mustGrant := maxWait < 0
	bounded := false
	if p.maxWait >= 0 && (maxWait < 0 || p.maxWait < maxWait) {
		maxWait, bounded = p.maxWait, true
	}
	wait := maxWait
	if wait != 0 { // no deadline shortens no wait
		if dl, ok := ctx.Deadline(); ok {
			left := max(0, time.Until(dl))
			if wait < 0 || left < wait {
				wait, bounded = left, false
			}
		}
	}
	d, err := p.store.AcquireKey(ctx, k.pk(), p.knownPolicy(), n, wait)
	if err != nil {
		if errors.Is(err, ErrUnavailable) && p.policy == FailOpen {
			logFailure(ctx, p.logger, p.clock.Now(), "policy", p.name, err, "FailOpen")
			return Result{Allowed: true, Degraded: true}, nil
		}
		logFailure(ctx, p.logger, p.clock.Now(), "policy", p.name, err, "")
		return Result{}, err
	}
	p.remember(&d.Policy)
	r := p.result(&d)
	if d.Granted {
		if d.Wait <= 0 {
			return r, nil
		}
		return k.sleep(ctx, &d, r, n)
	}
	if mustGrant {
		reason := ErrRefused
		if _, ok := ctx.Deadline(); d.Full {
			reason = ErrQueueFull
		} else if ok && !bounded {
			reason = ErrWouldExceedDeadline
		}
		return r, &RefusalError{Reason: reason, RetryAfter: d.Wait}
	}
	return r, nil
}

// sleep waits for a reservation, handing it back if ctx ends first.
func (k Keyed) sleep(ctx context.Context, d *PolicyDecision, r Result, n int64) (Result, error) {
	fired, stop := k.p.clock.NewTimer(d.Wait)
	select {
	case <-fired:
		return r, nil
	case <-ctx.Done():
		stop()
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		defer cancel()
		if _, herr := k.p.store.CancelKey(hctx, k.pk(), d.Policy, d.At, n); herr != nil {
			return Result{}, errors.Join(ctx.Err(), fmt.Errorf("redlimit: handing back a reservation: %w", herr))
		}
		return Result{}, ctx.Err()
	}
}

// Release hands back up to n permits granted to the key on every limit,
// so that others can have them before their interval ends, and returns
// the fewest a limit handed back. Unlike a Limiter's, a Policy keeps no
// record of its grants in process memory (there may be millions of
// keys): the store bounds the hand-back by what it counts for the key,
// whoever was granted it, so release only what this caller was granted
// and did not use.
func (k Keyed) Release(ctx context.Context, n int64) (_ int64, err error) {
	if k.p.obs != nil {
		defer k.p.observeResult(ctx, OpRelease, k.key, k.p.clock.Now(), n, &Result{}, &err)
	}
	if err := k.pk().Validate(); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, &ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: "must be at least 1", Kind: ErrInvalidArgument}
	}
	return k.p.store.ReleaseKey(ctx, k.pk(), k.p.knownPolicy(), n)
}

// Status returns the key's state on every limit without charging it:
// Allowed reports whether one permit would be granted now, Remaining and
// Limits what each limit has left.
func (k Keyed) Status(ctx context.Context) (r Result, err error) {
	if k.p.obs != nil {
		defer k.p.observeResult(ctx, OpStatus, k.key, k.p.clock.Now(), 0, &r, &err)
	}
	if err := k.pk().Validate(); err != nil {
		return Result{}, err
	}
	d, err := k.p.store.StatusKey(ctx, k.pk(), k.p.knownPolicy())
	if err != nil {
		return Result{}, err
	}
	k.p.remember(&d.Policy)
	r = k.p.result(&d)
	r.At = time.Time{}
	return r, nil
}

// AvailablePermits returns how many permits a request for the key could be
// granted now: the least of its limits'.
func (k Keyed) AvailablePermits(ctx context.Context) (int64, error) {
	r, err := k.Status(ctx)
	return r.Remaining, err
}

// limitNames pairs limits with their LimitNames.
type limitNames struct {
	// from is the first element of a store's slice found equal to
	// limits: a store that answers with the same slice every time (the
	// memory store) is known without comparing. A store never writes a
	// slice it answered with: known keeps it and sends it back with every
	// call (remember).
	from   atomic.Pointer[Config]
	limits []Config
	names  []string
	// last, for one limit, are the Limits of the Results made last under
	// it, in turn (next counts them), shown again by the Results that
	// show the same (result): a hot key shows a few states by turns.
	last [4]atomic.Pointer[[1]LimitStatus]
	next atomic.Uint32
}

// limitNames returns limits with the LimitName of each, made once for the
// limits a Result shows until they change rather than on every call.
func (p *Policy) limitNames(limits []Config) *limitNames {
	c := p.names.Load()
	if c != nil && len(limits) > 0 && len(limits) == len(c.limits) && c.from.Load() == &limits[0] {
		return c
	}
	if c != nil && slices.Equal(c.limits, limits) {
		if len(limits) > 0 {
			c.from.Store(&limits[0])
		}
		return c
	}
	c = &limitNames{limits: slices.Clone(limits), names: make([]string, len(limits))}
	if len(limits) > 0 {
		c.from.Store(&limits[0])
	}
	for i, l := range limits {
		c.names[i] = LimitName(l)
	}
	p.names.Store(c)
	return c
}

// result is d as a Result.
func (p *Policy) result(d *PolicyDecision) Result {
	c := p.limitNames(d.Policy.Limits)
	if len(d.Limits) != 1 || len(c.limits) != 1 {
		statuses := p.limitStatuses(len(d.Limits))
		for i := range statuses {
			limitStatus(&statuses[i], d, i, c.names)
		}
		return policyResult(d, statuses)
	}
	// One limit, the common policy: a status equal to one shown last
	// under these limits (one permit taken from a full bucket, key after
	// key) is shown again, from the same array, allocating nothing. No
	// Result's Limits are written once made.
	for i := range c.last {
		if one := c.last[i].Load(); one != nil && shows(&one[0], d) {
			return policyResult(d, one[:])
		}
	}
	one := (*[1]LimitStatus)(p.limitStatuses(1))
	limitStatus(&one[0], d, 0, c.names)
	c.last[c.next.Add(1)%uint32(len(c.last))].Store(one)
	return policyResult(d, one[:])
}

// shows reports whether st, a status under d's limit, is d's.
func shows(st *LimitStatus, d *PolicyDecision) bool {
	ls := &d.Limits[0]
	retry := ls.Wait
	if d.Granted {
		retry = 0
	}
	return st.Remaining == ls.Remaining && st.ResetAfter == ls.ResetAfter && st.RetryAfter == retry && st.Refused == (d.Refused == 0)
}

// statusSlab is room for the Limits of several Results, handed out in
// turn: one allocation serves several calls. A caller that keeps a Result
// keeps its slab alive, so the slab is small: 8 LimitStatus, under 1 KiB.
type statusSlab struct {
	buf  [8]LimitStatus
	next atomic.Int64 // LimitStatus handed out (may run past len(buf))
}

// limitStatuses returns n zero LimitStatus for a Result's Limits.
func (p *Policy) limitStatuses(n int) []LimitStatus {
	if n > 4 {
		return make([]LimitStatus, n)
	}
	for {
		s := p.statuses.Load()
		if s != nil {
			if end := s.next.Add(int64(n)); end <= int64(len(s.buf)) {
				return s.buf[end-int64(n) : end : end]
			}
		}
		fresh := new(statusSlab)
		fresh.next.Store(int64(n))
		if p.statuses.CompareAndSwap(s, fresh) {
			return fresh.buf[:n:n]
		}
	}
}

// limitStatus fills st, zero, with limit i of d; names are the LimitNames
// of d's limits. Filled in place: a LimitStatus built aside would be
// copied whole.
func limitStatus(st *LimitStatus, d *PolicyDecision, i int, names []string) {
	ls := &d.Limits[i]
	if i < len(d.Policy.Limits) {
		st.Name, st.Config = names[i], d.Policy.Limits[i]
	} else {
		st.Name = LimitName(Config{})
	}
	st.Remaining, st.ResetAfter, st.Refused = ls.Remaining, ls.ResetAfter, i == d.Refused
	if !d.Granted {
		st.RetryAfter = ls.Wait
	}
}

// policyResult is d as a Result, statuses its Limits (limitStatus).
func policyResult(d *PolicyDecision, statuses []LimitStatus) Result {
	r := Result{Allowed: d.Granted, Limits: statuses, cached: d.Cached}
	if d.Granted {
		r.At, r.Waited = d.At, d.Wait
	} else {
		r.RetryAfter = d.Wait
	}
	for i := range d.Limits {
		ls := &d.Limits[i]
		if i == 0 || ls.Remaining < r.Remaining {
			r.Remaining = ls.Remaining
		}
		r.ResetAfter = max(r.ResetAfter, ls.ResetAfter)
	}
	return r
}

// LimitStatus is one limit of a policy as a Result shows it.
type LimitStatus struct {
	// Name is the limit's short name (LimitName): "10/1s".
	Name string
	// Config is the limit: its quota is Config.Rate (Burst, Capacity),
	// its window Config.Interval.
	Config Config
	// Remaining is what a new request could be granted after the decision.
	Remaining int64
	// ResetAfter is how long until the limit is whole again for the key.
	ResetAfter time.Duration
	// RetryAfter, on a refusal, is how long until this limit would grant
	// the request (0: it would now).
	RetryAfter time.Duration
	// Refused marks the limit that refused the request.
	Refused bool
}

// RefusedBy returns the limit that refused the request, if one did.
func (r Result) RefusedBy() (LimitStatus, bool) {
	for _, l := range r.Limits {
		if l.Refused {
			return l, true
		}
	}
	return LimitStatus{}, false
}
