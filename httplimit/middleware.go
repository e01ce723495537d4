package httplimit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit/internal/ratelimitheader"
)

// A Rule applies one policy to each request, keyed by Key.
type Rule struct {
	// Policy is the keyed policy; its limits (one or several, applied
	// atomically per key) and its failure policy (redlimit.FailOpen or
	// FailClosed) are its own.
	Policy *redlimit.Policy
	// Key says whose limit a request counts against.
	Key KeyFunc
	// OnKeyError, when Key fails, gives the key instead (say, the client
	// IP for requests without an API key). Nil: the request is answered
	// 400 Bad Request (through the error handler).
	OnKeyError KeyFunc
}

// maxKeyLen is the longest key a policy takes.
const maxKeyLen = 1024

// handBackTimeout bounds the calls that hand permits back after a refusal,
// made even if the client has gone.
const handBackTimeout = 5 * time.Second

// ErrBadRequest is matched by the errors the error handler gets for a
// request the middleware cannot count: no key (also ErrNoKey), a key
// longer than a policy takes, a cost function's error.
var ErrBadRequest = errors.New("httplimit: bad request")

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use.
//
// With several rules a request passes only if every rule grants it. The
// rules are asked in order; when one refuses, the permits the earlier ones
// granted are handed back (Keyed.Release) and the later ones are not
// asked. This is reserve-then-hand-back, not one atomic step across keys
// (which may live in different Redis Cluster slots): between the grant and
// the hand-back, a concurrent request for the same key of an earlier rule
// sees those permits taken and may be refused, even though the request
// that took them is refused in the end. A refusal therefore never lets
// more through than the limits allow, but may briefly refuse a little
// more than needed. The limits of one policy, on one key, are charged
// together atomically.
//
// The RateLimit headers of a refusal show the quotas of the rules asked
// (the later ones were not), each as its rule answered: an earlier rule's
// remaining quota is shown before its permits were handed back, lower
// than it is by the request's cost at most, never higher.
type Middleware struct {
	rules          []Rule
	cost           func(*http.Request) (int64, error)
	allow          func(*http.Request) bool
	shadow         bool
	report         func(*http.Request, *Decision)
	wait           time.Duration
	refuse         func(http.ResponseWriter, *http.Request, *Decision)
	onError        func(http.ResponseWriter, *http.Request, error)
	legacy         bool
	partitionKey   bool
	degradedHeader string

	allowed, refused, shadowRefused, allowListed atomic.Int64
	degraded, badRequests, storeErrors, handBack atomic.Int64
}

// Stats counts what a Middleware answered since it was made.
type Stats struct {
	// Allowed counts requests passed on after every rule granted them
	// (in shadow mode, every request the rules were asked about).
	Allowed int64
	// Refused counts requests refused by a rule.
	Refused int64
	// ShadowRefused counts requests that a rule refused in shadow mode,
	// passed on all the same.
	ShadowRefused int64
	// AllowListed counts requests passed on unasked (WithAllowList).
	AllowListed int64
	// Degraded counts requests answered while a store could not be
	// reached, by a rule's failure policy (redlimit.FailOpen).
	Degraded int64
	// BadRequests counts requests without a usable key or cost.
	BadRequests int64
	// StoreErrors counts requests that a store failure stopped
	// (redlimit.FailClosed) or, in shadow mode, left unlimited.
	StoreErrors int64
	// HandBackErrors counts permits that could not be handed back after
	// another rule refused.
	HandBackErrors int64
}

// Decision is what the rules answered for one request: what a refusal
// handler and a shadow-mode report get.
type Decision struct {
	// Allowed reports whether every rule granted the request.
	Allowed bool
	// Rules holds each rule's answer, in order, up to the one that
	// refused (the later rules were not asked).
	Rules []RuleResult
	// RetryAfter, on a refusal, is how long until the refusing rule could
	// grant the request.
	RetryAfter time.Duration
	// Err, on a refusal by a waiting call (WithWait), says why waiting
	// could not help: redlimit.ErrWouldExceedDeadline or ErrQueueFull.
	Err error
	// Degraded is set when a rule's store could not be reached and its
	// failure policy answered.
	Degraded bool
}

// RuleResult is one rule's answer.
type RuleResult struct {
	// Policy is the rule's policy name, Key the request's key.
	Policy, Key string
	// Result is the policy's answer (Result.Limits per limit).
	Result redlimit.Result
}

// Violated returns the names of the quotas that refused the request, as
// the RateLimit headers and the problem body's "violated-policies" call
// them.
func (d *Decision) Violated() []string {
	var names []string
	for _, rr := range d.Rules {
		for _, l := range rr.Result.Limits {
			if l.Refused {
				names = append(names, quotaName(rr.Policy, len(rr.Result.Limits), l))
			}
		}
	}
	if len(names) == 0 && !d.Allowed && len(d.Rules) > 0 {
		// A refusal without a limit's status (a wait cut short): the
		// refusing rule's policy.
		names = append(names, d.Rules[len(d.Rules)-1].Policy)
	}
	return names
}

// quotaName names a limit in the headers: the policy's name when it has
// one limit, else "policy:10/1s".
func quotaName(policy string, limits int, l redlimit.LimitStatus) string {
	if limits == 1 {
		return policy
	}
	return policy + ":" + l.Name
}

// An Option configures a Middleware.
type Option func(*Middleware) error

func badOption(arg, value, reason string) error {
	return &redlimit.ArgumentError{Arg: arg, Value: value, Reason: reason, Kind: redlimit.ErrInvalidArgument}
}

// WithCost charges every request n permits (default 1): an expensive
// route costs more.
func WithCost(n int64) Option {
	return func(m *Middleware) error {
		if n < 1 {
			return badOption("cost", fmt.Sprint(n), "must be at least 1")
		}
		m.cost = func(*http.Request) (int64, error) { return n, nil }
		return nil
	}
}

// WithCostFunc charges each request what f says (a batch request its
// size). An error or a cost below 1 makes the request a bad request.
func WithCostFunc(f func(*http.Request) (int64, error)) Option {
	return func(m *Middleware) error {
		if f == nil {
			return badOption("cost function", "nil", "must not be nil")
		}
		m.cost = f
		return nil
	}
}

// WithAllowList passes the requests for which allow reports true without
// asking any rule (health checks, internal callers). They get no
// rate-limit headers.
func WithAllowList(allow func(*http.Request) bool) Option {
	return func(m *Middleware) error {
		if allow == nil {
			return badOption("allow list", "nil", "must not be nil")
		}
		m.allow = allow
		return nil
	}
}

// WithShadow asks the rules and counts their answers, but passes every
// request on, without rate-limit headers: a dry run, to see what limits
// would do before enforcing them. report, if not nil, is called with each
// refusal that enforcing would have made (before the request is passed
// on). Permits are charged as if enforced, and handed back on a refusal,
// so that the counts match what enforcing would see. Store failures and
// requests without a key are counted and passed on.
func WithShadow(report func(*http.Request, *Decision)) Option {
	return func(m *Middleware) error {
		m.shadow, m.report = true, report
		return nil
	}
}

// WithWait makes a request that would be refused wait, up to max (and
// within its own context), for its permits instead: shaping rather than
// policing. A request that cannot be granted within max is refused at
// once, not after waiting (Keyed.Acquire's ErrWouldExceedDeadline, or
// ErrQueueFull for a full leaky bucket).
func WithWait(max time.Duration) Option {
	return func(m *Middleware) error {
		if max <= 0 {
			return badOption("wait", max.String(), "must be positive")
		}
		m.wait = max
		return nil
	}
}

// WithRefusalHandler answers refused requests with h instead of the
// default 429 problem+json body. The RateLimit and Retry-After headers
// are already set on w when h is called; h writes the status and body.
func WithRefusalHandler(h func(w http.ResponseWriter, r *http.Request, d *Decision)) Option {
	return func(m *Middleware) error {
		if h == nil {
			return badOption("refusal handler", "nil", "must not be nil")
		}
		m.refuse = h
		return nil
	}
}

// WithErrorHandler answers requests the middleware could not decide with
// h instead of the default problem+json body: err matches ErrBadRequest
// (400 by default) or is a store's error (redlimit.ErrUnavailable under
// FailClosed: 503 by default; anything else: 500).
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(m *Middleware) error {
		if h == nil {
			return badOption("error handler", "nil", "must not be nil")
		}
		m.onError = h
		return nil
	}
}

// WithLegacyHeaders also sends X-RateLimit-Limit, X-RateLimit-Remaining
// and X-RateLimit-Reset (seconds from now), which many existing clients
// read, for the quota with the least remaining.
func WithLegacyHeaders() Option {
	return func(m *Middleware) error { m.legacy = true; return nil }
}

// WithPartitionKey adds the draft's pk parameter to each quota in the
// headers: an opaque digest of the policy and key (never the key itself,
// which may be an API key), so that a client can tell which of its
// requests share a quota.
func WithPartitionKey() Option {
	return func(m *Middleware) error { m.partitionKey = true; return nil }
}

// WithDegradedHeader sets the named header to the structured-field
// boolean ?1 on responses answered while a store could not be reached
// (redlimit.FailOpen): the client, or a test, can see that the limits
// were not applied. Stats counts these answers either way.
func WithDegradedHeader(name string) Option {
	return func(m *Middleware) error {
		if name == "" {
			return badOption("degraded header", name, "must not be empty")
		}
		m.degradedHeader = http.CanonicalHeaderKey(name)
		return nil
	}
}

// New returns a Middleware applying rules to every request, in order.
// A rule without a policy or key function, or a bad option, is an
// ErrInvalidArgument.
func New(rules []Rule, opts ...Option) (*Middleware, error) {
	if len(rules) == 0 {
		return nil, badOption("rules", "none", "at least one rule is needed")
	}
	for i, r := range rules {
		if r.Policy == nil || r.Key == nil {
			return nil, badOption("rule", fmt.Sprint(i), "needs a Policy and a Key")
		}
	}
	m := &Middleware{
		rules:   append([]Rule(nil), rules...),
		cost:    func(*http.Request) (int64, error) { return 1, nil },
		refuse:  defaultRefusal,
		onError: defaultError,
	}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Stats returns the counts so far.
func (m *Middleware) Stats() Stats {
	return Stats{
		Allowed:        m.allowed.Load(),
		Refused:        m.refused.Load(),
		ShadowRefused:  m.shadowRefused.Load(),
		AllowListed:    m.allowListed.Load(),
		Degraded:       m.degraded.Load(),
		BadRequests:    m.badRequests.Load(),
		StoreErrors:    m.storeErrors.Load(),
		HandBackErrors: m.handBack.Load(),
	}
}

// Handler wraps next: m.Handler is the func(http.Handler) http.Handler
// that routers take as middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// granted is a permit grant that a later refusal hands back.
type granted struct {
	k    redlimit.Keyed
	cost int64
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.allow != nil && m.allow(r) {
		m.allowListed.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	cost, err := m.cost(r)
	if err == nil && cost < 1 {
		err = fmt.Errorf("cost %d is below 1", cost)
	}
	if err != nil {
		m.fail(w, r, next, fmt.Errorf("%w: %w", ErrBadRequest, err), &m.badRequests)
		return
	}
	ctx := r.Context()
	if m.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.wait)
		defer cancel()
	}
	d := Decision{Allowed: true, Rules: make([]RuleResult, 0, len(m.rules))}
	var grants []granted
	for _, rule := range m.rules {
		key, err := m.key(rule, r)
		if err != nil {
			m.giveBack(r, grants)
			m.fail(w, r, next, err, &m.badRequests)
			return
		}
		k := rule.Policy.Key(key)
		var res redlimit.Result
		if m.wait > 0 {
			res, err = k.Acquire(ctx, cost)
		} else {
			res, err = k.TryAcquire(ctx, cost)
		}
		var refusal *redlimit.RefusalError
		if errors.As(err, &refusal) {
			res.Allowed = false
			res.RetryAfter = max(res.RetryAfter, refusal.RetryAfter)
			d.Err, err = refusal.Reason, nil
		}
		if err != nil && r.Context().Err() != nil {
			m.giveBack(r, grants) // the client has gone: nobody to answer
			return
		}
		if errors.Is(err, context.DeadlineExceeded) && m.wait > 0 {
			// The wait's bound passed while waiting: a refusal.
			res, d.Err, err = redlimit.Result{}, redlimit.ErrWouldExceedDeadline, nil
		}
		if err != nil {
			m.giveBack(r, grants)
			if errors.Is(err, redlimit.ErrInvalidArgument) || errors.Is(err, redlimit.ErrPermitsExceedRate) {
				m.fail(w, r, next, fmt.Errorf("%w: %w", ErrBadRequest, err), &m.badRequests)
			} else {
				m.fail(w, r, next, err, &m.storeErrors)
			}
			return
		}
		d.Rules = append(d.Rules, RuleResult{Policy: rule.Policy.Name(), Key: key, Result: res})
		d.Degraded = d.Degraded || res.Degraded
		if !res.Allowed {
			d.Allowed, d.RetryAfter = false, res.RetryAfter
			break
		}
		if !res.Degraded {
			grants = append(grants, granted{k, cost})
		}
	}
	if d.Degraded {
		m.degraded.Add(1)
	}
	if !d.Allowed {
		m.giveBack(r, grants)
	}
	if m.shadow {
		if d.Allowed {
			m.allowed.Add(1)
		} else {
			m.shadowRefused.Add(1)
			if m.report != nil {
				m.report(r, &d)
			}
		}
		next.ServeHTTP(w, r)
		return
	}
	m.setHeaders(w.Header(), &d)
	if !d.Allowed {
		m.refused.Add(1)
		ratelimitheader.SetRetryAfter(w.Header(), d.RetryAfter)
		m.refuse(w, r, &d)
		return
	}
	m.allowed.Add(1)
	next.ServeHTTP(w, r)
}

// key returns the rule's key for r, or an error matching ErrBadRequest.
func (m *Middleware) key(rule Rule, r *http.Request) (string, error) {
	key, err := rule.Key(r)
	if err == nil {
		err = checkKey(key)
	}
	if err != nil && rule.OnKeyError != nil {
		if key, err = rule.OnKeyError(r); err == nil {
			err = checkKey(key)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w: policy %q: %w", ErrBadRequest, rule.Policy.Name(), err)
	}
	return key, nil
}

func checkKey(key string) error {
	if key == "" {
		return noKey("empty key")
	}
	if len(key) > maxKeyLen {
		return noKey("key of %d bytes, at most %d taken", len(key), maxKeyLen)
	}
	return nil
}

// fail answers a request the middleware could not decide, counting it in
// c; in shadow mode it is passed on.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, err error, c *atomic.Int64) {
	c.Add(1)
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	m.onError(w, r, err)
}

// giveBack hands back what earlier rules granted a refused request, even
// if the client has gone.
func (m *Middleware) giveBack(r *http.Request, grants []granted) {
	if len(grants) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), handBackTimeout)
	defer cancel()
	for _, g := range grants {
		if _, err := g.k.Release(ctx, g.cost); err != nil {
			m.handBack.Add(1)
		}
	}
}

// setHeaders writes the rate-limit fields for d's results.
func (m *Middleware) setHeaders(h http.Header, d *Decision) {
	if d.Degraded && m.degradedHeader != "" {
		h.Set(m.degradedHeader, "?1")
	}
	var qs []ratelimitheader.Quota
	for _, rr := range d.Rules {
		var pk []byte
		if m.partitionKey && len(rr.Result.Limits) > 0 {
			sum := sha256.Sum256([]byte(rr.Policy + "\x00" + rr.Key))
			pk = sum[:8]
		}
		for _, l := range rr.Result.Limits {
			qs = append(qs, ratelimitheader.Quota{
				Name:         quotaName(rr.Policy, len(rr.Result.Limits), l),
				Quota:        l.Config.Rate,
				Window:       l.Config.Interval,
				Remaining:    l.Remaining,
				Reset:        max(l.ResetAfter, l.RetryAfter),
				PartitionKey: pk,
			})
		}
	}
	ratelimitheader.Set(h, qs)
	if m.legacy {
		ratelimitheader.SetLegacy(h, qs)
	}
}
