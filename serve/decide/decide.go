// Package decide answers rate-limit requests in envoyproxy/ratelimit's
// shape (a domain and descriptors of key/value entries) from a rules.Set,
// on any redlimit.PolicyStore: each rule is a redlimit.Policy named
// after it (Rule.ID), each descriptor one key of it (its values). The
// gRPC and HTTP servers of package serve are thin adapters around it.
package decide

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/serve/rules"
)

// ErrNoRules is returned by Decide before any rules were set.
var ErrNoRules = errors.New("decide: no rules loaded")

// Code is a descriptor's or a request's answer; the values are those of
// envoy's RateLimitResponse.Code.
type Code int

const (
	// Unknown is the zero value, never answered.
	Unknown Code = 0
	// OK: within the limits (or no limit applies).
	OK Code = 1
	// OverLimit: a limit refused.
	OverLimit Code = 2
)

// String returns "OK", "OVER_LIMIT" or "UNKNOWN", as envoy spells them.
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Request is one rate-limit request.
type Request struct {
	// Domain selects the rules file; required.
	Domain string
	// Descriptors are checked each on its own, 1..Options.MaxDescriptors.
	Descriptors []Descriptor
	// Hits is what each descriptor is charged; 0 means 1, as Envoy sends it.
	Hits uint32
}

// Descriptor is one descriptor of a request.
type Descriptor struct {
	// Entries, 1..Options.MaxEntries, each key non-empty.
	Entries []rules.Entry
	// Hits, when not nil, replaces the request's Hits for this
	// descriptor; 0 checks it without charging.
	Hits *uint64
	// Override, when not nil, is the limit the caller (Envoy's route
	// config) gives this descriptor instead of the rules': a fixed window
	// keyed by every entry, as envoyproxy/ratelimit applies it, on a
	// domain the rules know.
	Override *Override
}

// Override is a limit given in a request.
type Override struct {
	// RequestsPerUnit per Interval; 0 refuses every request.
	RequestsPerUnit int64
	// Interval is the unit times its multiplier (whole seconds).
	Interval time.Duration
}

// maxOverrides bounds the distinct overrides a Decider keeps a policy
// for: the limits of Envoy's route configs, not of its clients.
const maxOverrides = 4096

// Status is the answer for one descriptor.
type Status struct {
	Code Code
	// Rule is the rule that applied, nil when none did (Code OK).
	Rule *rules.Rule
	// Replaced: a rule matched but another matched rule replaces it.
	Replaced bool
	// Unlimited: the rule says unlimited.
	Unlimited bool
	// Shadowed: over a shadow-mode limit, answered OK.
	Shadowed bool
	// Limit is the limit that decided: the one that refused, else the one
	// with the least remaining; nil when no limit applied.
	Limit *Limit
	// Remaining is what a next request could be granted (the least of
	// the rule's limits).
	Remaining int64
	// ResetAfter is how long until Limit is whole again for this key.
	ResetAfter time.Duration
	// RetryAfter, when refused, is how long until the request would be
	// granted.
	RetryAfter time.Duration
	// Result is the policy's full answer (every limit), when one was asked.
	Result redlimit.Result
}

// Limit is a limit as responses show it.
type Limit struct {
	Name string
	// Config is the limit; a blocking rule's (requests_per_unit 0) has
	// Rate 0 and only Interval set.
	Config redlimit.Config
	// Unit and Multiplier express Config.Interval in envoy's units (Unit
	// empty when it has no whole seconds).
	Unit       rules.Unit
	Multiplier int64
}

// Response is the answer to a Request.
type Response struct {
	// Overall is OverLimit if any descriptor is, else OK.
	Overall  Code
	Statuses []Status
}

// Options tune a Decider; the zero value is envoyproxy/ratelimit's
// behaviour.
type Options struct {
	// AllOrNothing: when a descriptor is over its limit, the charges
	// made to the others are handed back (Keyed.Release), so a refused
	// request costs nothing. Like the middleware's hand-back it is best
	// effort: another caller may have been refused meanwhile because of
	// them. Off by default: every descriptor is charged, as
	// envoyproxy/ratelimit does.
	AllOrNothing bool
	// FailOpen answers OK (with the Result marked Degraded) when the
	// store is unavailable; by default such a request fails with an
	// error wrapping redlimit.ErrUnavailable, and Envoy's own
	// failure_mode_deny decides.
	FailOpen bool
	// MaxDescriptors bounds a request's descriptors; default 64.
	MaxDescriptors int
	// MaxEntries bounds one descriptor's entries; default 16.
	MaxEntries int
	// Clock is the policies' clock; default the real one.
	Clock clock.Clock
	// PolicyOptions are given to every policy the Decider makes, after
	// its own (clock, failure policy): an observer for metrics
	// (redlimit.WithObserver), a fallback store.
	PolicyOptions []redlimit.Option
}

// Decider answers requests from the rules last set. It is safe for
// concurrent use; SetRules may run while Decide does.
type Decider struct {
	store redlimit.PolicyStore
	opts  Options
	cur   atomic.Pointer[snapshot]
	mu    sync.Mutex // serializes SetRules

	overrideMu sync.RWMutex
	overrides  map[overrideKey]*overridePolicy // at most maxOverrides
}

type overrideKey struct {
	domain   string
	rate     int64
	interval time.Duration
}

type overridePolicy struct {
	rule   *rules.Rule
	policy *redlimit.Policy
}

type snapshot struct {
	set      *rules.Set
	policies map[*rules.Rule]*redlimit.Policy
	byID     map[string]*redlimit.Policy
	limits   map[string][]redlimit.Config
}

// New returns a Decider on store, without rules (SetRules gives them).
func New(store redlimit.PolicyStore, opts Options) (*Decider, error) {
	if store == nil {
		return nil, &redlimit.ArgumentError{Arg: "store", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	if opts.MaxDescriptors == 0 {
		opts.MaxDescriptors = 64
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = 16
	}
	if opts.MaxDescriptors < 0 || opts.MaxEntries < 0 {
		return nil, &redlimit.ArgumentError{Arg: "options", Reason: "MaxDescriptors and MaxEntries must not be negative", Kind: redlimit.ErrInvalidArgument}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	return &Decider{store: store, opts: opts, overrides: map[overrideKey]*overridePolicy{}}, nil
}

// Rules returns the rules in force, nil before the first SetRules.
func (d *Decider) Rules() *rules.Set {
	if s := d.cur.Load(); s != nil {
		return s.set
	}
	return nil
}

// SetRules puts set in force. Each rule's limits are stored in the store
// (Policy.SetLimits keeping the keys' states, so a changed limit goes on
// counting what was granted); a rule whose limits did not change keeps its
// policy untouched. If the store fails, the rules in force stay and the
// error is returned.
func (d *Decider) SetRules(ctx context.Context, set *rules.Set) error {
	if set == nil {
		return &redlimit.ArgumentError{Arg: "rules", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cur.Load()
	next := &snapshot{set: set, policies: map[*rules.Rule]*redlimit.Policy{}, byID: map[string]*redlimit.Policy{}, limits: map[string][]redlimit.Config{}}
	opts := []redlimit.Option{redlimit.WithClock(d.opts.Clock)}
	if d.opts.FailOpen {
		opts = append(opts, redlimit.WithFailurePolicy(redlimit.FailOpen))
	}
	opts = append(opts, d.opts.PolicyOptions...)
	for _, r := range set.Rules() {
		if len(r.Limits) == 0 {
			continue
		}
		limits := configs(r)
		id := "serve:" + r.ID()
		if old != nil {
			if p := old.byID[id]; p != nil && slices.Equal(old.limits[id], limits) {
				next.policies[r], next.byID[id], next.limits[id] = p, p, limits
				continue
			}
		}
		p, err := redlimit.NewPolicy(d.store, id, limits, opts...)
		if err != nil {
			return fmt.Errorf("decide: rule %s (%s:%d): %w", r, r.File, r.Line, err)
		}
		if err := p.SetLimits(ctx, limits); err != nil {
			return fmt.Errorf("decide: storing rule %s: %w", r, err)
		}
		next.policies[r], next.byID[id], next.limits[id] = p, p, limits
	}
	d.cur.Store(next)
	return nil
}

func configs(r *rules.Rule) []redlimit.Config {
	out := make([]redlimit.Config, len(r.Limits))
	for i, l := range r.Limits {
		out[i] = l.Config
	}
	return out
}

// RequestError is a malformed request; it matches
// redlimit.ErrInvalidArgument.
type RequestError struct {
	Reason string
}

func (e *RequestError) Error() string { return "decide: bad request: " + e.Reason }

// Is matches redlimit.ErrInvalidArgument.
func (e *RequestError) Is(target error) bool { return target == redlimit.ErrInvalidArgument }

func (d *Decider) validate(req *Request) error {
	if req.Domain == "" {
		return &RequestError{Reason: "the domain must not be empty"}
	}
	if n := len(req.Descriptors); n == 0 || n > d.opts.MaxDescriptors {
		return &RequestError{Reason: fmt.Sprintf("has %d descriptors, 1..%d allowed", n, d.opts.MaxDescriptors)}
	}
	for i, desc := range req.Descriptors {
		if n := len(desc.Entries); n == 0 || n > d.opts.MaxEntries {
			return &RequestError{Reason: fmt.Sprintf("descriptor %d has %d entries, 1..%d allowed", i, n, d.opts.MaxEntries)}
		}
		for _, e := range desc.Entries {
			if e.Key == "" {
				return &RequestError{Reason: fmt.Sprintf("descriptor %d has an entry with an empty key", i)}
			}
		}
		if o := desc.Override; o != nil {
			if o.RequestsPerUnit < 0 || o.Interval < time.Second || o.Interval%time.Second != 0 {
				return &RequestError{Reason: fmt.Sprintf("descriptor %d: the limit override needs a known unit and requests_per_unit of at least 0", i)}
			}
		}
	}
	return nil
}

// Decide answers req: every descriptor matching a rule is charged its
// hits on the rule's limits (keyed by the descriptor's values), and the
// request is OverLimit if any descriptor not in shadow or quota mode is,
// or if every quota-mode descriptor is. A bad
// request is a *RequestError; a store failure an error wrapping the
// store's (redlimit.ErrUnavailable...), unless FailOpen.
func (d *Decider) Decide(ctx context.Context, req Request) (Response, error) {
	if err := d.validate(&req); err != nil {
		return Response{}, err
	}
	snap := d.cur.Load()
	if snap == nil {
		return Response{}, ErrNoRules
	}
	resp := Response{Overall: OK}
	var limits []Limit // each status's Limit
	var matched []*rules.Rule
	var keys []string
	if len(req.Descriptors) == 1 {
		// The common request: everything it needs in one allocation.
		one := new(struct {
			st      [1]Status
			lim     [1]Limit
			matched [1]*rules.Rule
			key     [1]string
		})
		resp.Statuses, limits, matched, keys = one.st[:], one.lim[:], one.matched[:], one.key[:]
	} else {
		n := len(req.Descriptors)
		resp.Statuses, limits = make([]Status, n), make([]Limit, n)
		matched, keys = make([]*rules.Rule, n), make([]string, n)
	}
	var ovs map[int]*redlimit.Policy
	var replaced map[string]bool
	for i, desc := range req.Descriptors {
		var r *rules.Rule
		if desc.Override != nil {
			if snap.set.Domain(req.Domain) != nil {
				op, err := d.override(req.Domain, desc.Override)
				if err != nil {
					return Response{}, err
				}
				if ovs == nil {
					ovs = map[int]*redlimit.Policy{}
				}
				r, ovs[i] = op.rule, op.policy
			}
		} else {
			r, keys[i] = snap.set.MatchKey(req.Domain, desc.Entries)
		}
		matched[i] = r
		if r != nil && len(r.Replaces) > 0 {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, n := range r.Replaces {
				replaced[n] = true
			}
		}
	}
	hits := int64(req.Hits)
	if hits == 0 {
		hits = 1
	}
	var charged []charge
	quotas, quotasOver := 0, 0
	for i, desc := range req.Descriptors {
		st := &resp.Statuses[i]
		st.Code = OK
		r := matched[i]
		if r == nil {
			continue
		}
		st.Rule = r
		if isReplaced(r, replaced) {
			st.Replaced = true
			continue
		}
		n := hits
		if desc.Hits != nil {
			n = int64(min(*desc.Hits, math.MaxInt64))
		}
		switch {
		case r.Unlimited:
			st.Unlimited = true
		case r.Blocked:
			st.Code = OverLimit
			st.Limit = &limits[i]
			*st.Limit = Limit{Name: r.Name, Config: redlimit.Config{Interval: r.BlockedInterval}}
			st.Limit.Unit, st.Limit.Multiplier = rules.UnitOf(r.BlockedInterval)
		default:
			var k redlimit.Keyed
			if p := ovs[i]; p != nil {
				k = p.Key(fullKey(desc.Entries))
			} else {
				k = snap.policies[r].Key(keys[i])
			}
			if err := d.ask(ctx, k, n, st, &limits[i]); err != nil {
				d.handBack(ctx, charged)
				return Response{}, fmt.Errorf("decide: %s: %w", r, err)
			}
			if st.Code == OK && n > 0 && d.opts.AllOrNothing {
				charged = append(charged, charge{k, n})
			}
		}
		if st.Code == OverLimit && r.ShadowMode {
			st.Code, st.Shadowed = OK, true
		}
		switch {
		case r.QuotaMode:
			quotas++
			if st.Code == OverLimit {
				quotasOver++
			}
		case st.Code == OverLimit:
			resp.Overall = OverLimit
		}
	}
	if quotas > 0 && quotas == quotasOver {
		resp.Overall = OverLimit
	}
	if resp.Overall == OverLimit && d.opts.AllOrNothing {
		d.handBack(ctx, charged)
	}
	return resp, nil
}

type charge struct {
	k redlimit.Keyed
	n int64
}

// handBack releases the charges made by a request that is refused (or
// failed) as a whole; errors are ignored: the charges then expire as
// granted ones do.
func (d *Decider) handBack(ctx context.Context, charged []charge) {
	if !d.opts.AllOrNothing || len(charged) == 0 {
		return
	}
	// The caller may have gone: hand back all the same, within a bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, c := range charged {
		_, _ = c.k.Release(ctx, c.n)
	}
}

// ask charges n permits to k (0: only looks) and fills st, its Limit
// written to lim.
func (d *Decider) ask(ctx context.Context, k redlimit.Keyed, n int64, st *Status, lim *Limit) error {
	var r redlimit.Result
	var err error
	if n == 0 {
		r, err = k.Status(ctx)
		r.Allowed = true
	} else {
		r, err = k.TryAcquire(ctx, n)
		if errors.Is(err, redlimit.ErrPermitsExceedRate) {
			// More than the limit ever grants at once: over it, as
			// envoyproxy/ratelimit answers.
			r, err = k.Status(ctx)
			r.Allowed = false
			for i := range r.Limits {
				if r.Limits[i].Config.MaxPermits() < n {
					r.Limits[i].Refused = true
					break
				}
			}
		}
	}
	if err != nil {
		return err
	}
	st.Result = r
	if !r.Allowed {
		st.Code = OverLimit
		st.RetryAfter = r.RetryAfter
	}
	st.Remaining = r.Remaining
	var pick *redlimit.LimitStatus
	for i := range r.Limits {
		l := &r.Limits[i]
		if l.Refused {
			pick = l
			break
		}
		if pick == nil || l.Remaining < pick.Remaining {
			pick = l
		}
	}
	if pick != nil {
		*lim = limitOf(st.Rule, pick)
		st.Limit = lim
		st.ResetAfter = pick.ResetAfter
	}
	return nil
}

func limitOf(r *rules.Rule, ls *redlimit.LimitStatus) Limit {
	l := Limit{Config: ls.Config}
	l.Unit, l.Multiplier = rules.UnitOf(ls.Config.Interval)
	for _, rl := range r.Limits {
		if rl.Config == ls.Config {
			l.Name = rl.Name
			break
		}
	}
	if l.Name == "" {
		l.Name = r.Name
	}
	return l
}

func isReplaced(r *rules.Rule, replaced map[string]bool) bool {
	if replaced == nil {
		return false
	}
	for _, n := range r.Names() {
		if replaced[n] {
			return true
		}
	}
	return false
}

// override returns the policy of an override, made on first use. The
// domain is copied where kept, so that a request's strings stay its own.
func (d *Decider) override(domain string, o *Override) (*overridePolicy, error) {
	k := overrideKey{domain: domain, rate: o.RequestsPerUnit, interval: o.Interval}
	d.overrideMu.RLock()
	op := d.overrides[k]
	d.overrideMu.RUnlock()
	if op != nil {
		return op, nil
	}
	d.overrideMu.Lock()
	defer d.overrideMu.Unlock()
	if op := d.overrides[k]; op != nil {
		return op, nil
	}
	if len(d.overrides) >= maxOverrides {
		return nil, &RequestError{Reason: fmt.Sprintf("more than %d distinct limit overrides", maxOverrides)}
	}
	kept := overrideKey{domain: strings.Clone(domain), rate: k.rate, interval: k.interval}
	r := &rules.Rule{Domain: kept.domain, Path: "(override)", File: "(request)"}
	op = &overridePolicy{rule: r}
	if o.RequestsPerUnit == 0 {
		r.Blocked, r.BlockedInterval = true, o.Interval
	} else {
		cfg, err := redlimit.Config{Algorithm: redlimit.FixedWindow, Rate: o.RequestsPerUnit, Interval: o.Interval}.Normalize()
		if err != nil {
			return nil, &RequestError{Reason: "the limit override: " + err.Error()}
		}
		r.Limits = []rules.Limit{{Config: cfg}}
		opts := []redlimit.Option{redlimit.WithClock(d.opts.Clock)}
		if d.opts.FailOpen {
			opts = append(opts, redlimit.WithFailurePolicy(redlimit.FailOpen))
		}
		opts = append(opts, d.opts.PolicyOptions...)
		p, err := redlimit.NewPolicy(d.store, "serve:override:"+rules.Escape(kept.domain)+"/"+redlimit.LimitName(cfg), []redlimit.Config{cfg}, opts...)
		if err != nil {
			return nil, &RequestError{Reason: "the limit override: " + err.Error()}
		}
		op.policy = p
	}
	d.overrides[kept] = op
	return op, nil
}

// fullKey is a descriptor's key under an override: its keys and values,
// each escaped, "k=v/k2=v2" (no rule fixes the keys).
func fullKey(entries []rules.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(rules.Escape(e.Key))
		b.WriteByte('=')
		b.WriteString(rules.Escape(e.Value))
	}
	return b.String()
}
