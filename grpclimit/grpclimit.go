package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// DegradedHeader is the response header (metadata) entry a call answered
// without the store gets: the names of the policies whose store could not
// be reached and whose failure policy (redlimit.FailOpen) let the call
// through, comma-separated.
const DegradedHeader = "ratelimit-degraded"

// handBackTimeout bounds handing back what rules granted a refused call.
const handBackTimeout = time.Second

// Rule applies one policy to the calls of some methods, each call charged
// to the key Key derives from it.
type Rule struct {
	// Policy is the policy applied; required.
	Policy *redlimit.Policy
	// Key derives the key a call is charged to; nil: PeerIP().
	Key KeyFunc
	// Methods are the full methods the rule applies to
	// ("/package.Service/Method"); an entry ending in "/" names a whole
	// service ("/package.Service/"). None: every method.
	Methods []string
	// OnKeyError says what a call whose key Key cannot derive gets:
	// RejectInvalid (the default) or SkipRule.
	OnKeyError KeyErrorAction
}

// KeyErrorAction is what a rule does with a call whose key it cannot derive.
type KeyErrorAction int

const (
	// RejectInvalid answers codes.InvalidArgument: the call lacks what
	// the service requires (an API key), and is not served.
	RejectInvalid KeyErrorAction = iota
	// SkipRule lets the rule pass the call uncharged; the other rules
	// still apply. To charge such calls to another key instead, give
	// First(key, fallback) as the rule's Key.
	SkipRule
)

func (r *Rule) applies(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if m == method || (strings.HasSuffix(m, "/") && strings.HasPrefix(method, m)) {
			return true
		}
	}
	return false
}

// Limiter holds the rules and makes the interceptors. A call is served
// only if every rule that applies to its method grants it; when one
// refuses, what the rules before it granted is handed back (Keyed.Release).
// Rules on different keys are separate store calls, not one atomic step:
// between a grant and its hand-back, a concurrent call may find those
// permits taken and be refused. The several limits of one policy, on one
// key, are decided atomically.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	rules   []Rule
	costs   map[string]int64
	allow   []func(ctx context.Context, fullMethod string) bool
	shadow  bool
	wait    time.Duration
	report  func(context.Context, Report)
	allowed atomic.Uint64
	refused atomic.Uint64
	shadowd atomic.Uint64
	degrade atomic.Uint64
	failed  atomic.Uint64
	keyErrs atomic.Uint64
	exempt  atomic.Uint64
}

// Option configures a Limiter.
type Option func(*Limiter) error

// New returns a Limiter applying rules, in their order, to every call.
func New(rules []Rule, opts ...Option) (*Limiter, error) {
	if len(rules) == 0 {
		return nil, &redlimit.ArgumentError{Arg: "rules", Reason: "at least one is needed", Kind: redlimit.ErrInvalidArgument}
	}
	l := &Limiter{rules: make([]Rule, len(rules)), costs: map[string]int64{}}
	for i, r := range rules {
		if r.Policy == nil {
			return nil, &redlimit.ArgumentError{Arg: "rules", Value: strconv.Itoa(i), Reason: "a rule needs a Policy", Kind: redlimit.ErrInvalidArgument}
		}
		if r.Key == nil {
			r.Key = PeerIP()
		}
		if r.OnKeyError != RejectInvalid && r.OnKeyError != SkipRule {
			return nil, &redlimit.ArgumentError{Arg: "OnKeyError", Value: strconv.Itoa(int(r.OnKeyError)), Reason: "must be RejectInvalid or SkipRule", Kind: redlimit.ErrInvalidArgument}
		}
		r.Methods = append([]string(nil), r.Methods...)
		l.rules[i] = r
	}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// WithCost charges calls of fullMethod permits each instead of one: an
// expensive method counts for more. Zero exempts the method from every
// rule. A cost above what a policy can grant in one interval is refused
// by that policy's store as redlimit.ErrPermitsExceedRate (codes.Internal):
// a misconfiguration, not a refusal.
func WithCost(fullMethod string, permits int64) Option {
	return func(l *Limiter) error {
		if permits < 0 {
			return &redlimit.ArgumentError{Arg: "permits", Value: strconv.FormatInt(permits, 10), Reason: "must not be negative", Kind: redlimit.ErrInvalidArgument}
		}
		l.costs[fullMethod] = permits
		return nil
	}
}

// WithAllow lets through, uncharged, every call allow reports true for
// (health checks, internal callers); several WithAllow options add up.
// AllowPeers and AllowMethods make the common ones.
func WithAllow(allow func(ctx context.Context, fullMethod string) bool) Option {
	return func(l *Limiter) error {
		if allow == nil {
			return &redlimit.ArgumentError{Arg: "allow", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
		}
		l.allow = append(l.allow, allow)
		return nil
	}
}

// AllowPeers reports calls from peers inside any of prefixes, for WithAllow.
func AllowPeers(prefixes ...netip.Prefix) func(context.Context, string) bool {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(ctx context.Context, _ string) bool {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return false
		}
		ip, err := peerAddr(p.Addr)
		if err != nil {
			return false
		}
		for _, pf := range ps {
			if pf.Contains(ip) {
				return true
			}
		}
		return false
	}
}

// AllowMethods reports calls of the given full methods (an entry ending in
// "/" names a whole service), for WithAllow.
func AllowMethods(methods ...string) func(context.Context, string) bool {
	r := Rule{Methods: append([]string(nil), methods...)}
	return func(_ context.Context, fullMethod string) bool {
		return len(r.Methods) > 0 && r.applies(fullMethod)
	}
}

// WithShadow runs the rules without enforcing them (a dry run): calls are
// charged as usual, but a refusal, a key error or a store failure lets the
// call through, reported (WithReport) and counted (Stats.ShadowRefused)
// instead. Use it to see what a new limit would refuse before it does.
func WithShadow() Option {
	return func(l *Limiter) error { l.shadow = true; return nil }
}

// WithWait lets a call wait up to max in all for its permits
// (Keyed.TryAcquireWait) instead of being refused at once, shaping bursts
// rather than rejecting them. The call's deadline bounds the wait too: a
// call that could be served only after it is refused at once. A call
// waiting on a later rule holds what earlier rules granted it meanwhile.
// In shadow mode calls never wait.
func WithWait(max time.Duration) Option {
	return func(l *Limiter) error {
		if max < 0 {
			return &redlimit.ArgumentError{Arg: "wait", Value: max.String(), Reason: "must not be negative", Kind: redlimit.ErrInvalidArgument}
		}
		l.wait = max
		return nil
	}
}

// WithReport calls report with every rule's decision on a call (for logs
// and metrics), in the calling goroutine: keep it fast.
func WithReport(report func(context.Context, Report)) Option {
	return func(l *Limiter) error {
		if report == nil {
			return &redlimit.ArgumentError{Arg: "report", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
		}
		l.report = report
		return nil
	}
}

// Report is one rule's decision on one call.
type Report struct {
	// FullMethod is the call's method.
	FullMethod string
	// Policy is the rule's policy name.
	Policy string
	// Key is the key the call was charged to ("" on a key error).
	Key string
	// Permits is the call's cost.
	Permits int64
	// Result is the policy's answer (zero on an error).
	Result redlimit.Result
	// Err is a key error or the store's error.
	Err error
	// Shadow is set when WithShadow let through a call this decision
	// would have stopped.
	Shadow bool
}

// Stats counts calls by outcome since New.
type Stats struct {
	// Allowed calls passed every rule (including degraded answers).
	Allowed uint64
	// Refused calls got codes.ResourceExhausted.
	Refused uint64
	// ShadowRefused calls would have been stopped but for WithShadow.
	ShadowRefused uint64
	// Degraded calls were let through by a policy's failure policy
	// because its store could not be reached.
	Degraded uint64
	// Failed calls got an error from a store (codes.Unavailable when it
	// could not be reached and the failure policy is FailClosed).
	Failed uint64
	// KeyErrors calls were rejected with codes.InvalidArgument because a
	// rule could not derive their key.
	KeyErrors uint64
	// Exempt calls were let through uncharged (WithAllow, a zero cost).
	Exempt uint64
}

// Stats returns the counts so far.
func (l *Limiter) Stats() Stats {
	return Stats{
		Allowed: l.allowed.Load(), Refused: l.refused.Load(), ShadowRefused: l.shadowd.Load(),
		Degraded: l.degrade.Load(), Failed: l.failed.Load(), KeyErrors: l.keyErrs.Load(), Exempt: l.exempt.Load(),
	}
}

// UnaryServerInterceptor limits unary calls.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		degraded, err := l.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if degraded != "" {
			// The call goes on whether or not the header can be set.
			_ = grpc.SetHeader(ctx, metadata.Pairs(DegradedHeader, degraded))
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams: a stream is one call, charged
// when it opens, whatever number of messages it carries.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		degraded, err := l.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if degraded != "" {
			_ = ss.SetHeader(metadata.Pairs(DegradedHeader, degraded))
		}
		return handler(srv, ss)
	}
}

// granted is one rule's grant, handed back if a later rule refuses.
type granted struct {
	k redlimit.Keyed
	n int64
}

// check applies the rules to one call. It returns the names of the
// policies that answered degraded, or the call's status error.
func (l *Limiter) check(ctx context.Context, method string) (string, error) {
	n, ok := l.costs[method]
	if !ok {
		n = 1
	}
	if n == 0 || l.allowedCall(ctx, method) {
		l.exempt.Add(1)
		return "", nil
	}
	var (
		grants   []granted
		degraded []string
		shadowed bool
		wait     = l.wait
	)
	stop := func(counter *atomic.Uint64, err error) (string, error) {
		counter.Add(1)
		l.handBack(ctx, grants)
		return "", err
	}
	for i := range l.rules {
		r := &l.rules[i]
		if !r.applies(method) {
			continue
		}
		rep := Report{FullMethod: method, Policy: r.Policy.Name(), Permits: n}
		key, err := r.Key(ctx, method)
		if err == nil && (key == "" || len(key) > maxKeyLen) {
			err = fmt.Errorf("%w: a key must be 1..%d bytes, not %d", ErrNoKey, maxKeyLen, len(key))
		}
		if err != nil {
			rep.Err = err
			if r.OnKeyError == SkipRule {
				l.emit(ctx, rep)
				continue
			}
			if l.shadow {
				rep.Shadow, shadowed = true, true
				l.emit(ctx, rep)
				continue
			}
			l.emit(ctx, rep)
			return stop(&l.keyErrs, status.Errorf(codes.InvalidArgument, "grpclimit: policy %q: %v", r.Policy.Name(), err))
		}
		rep.Key = key
		k := r.Policy.Key(key)
		var res redlimit.Result
		if wait > 0 && !l.shadow {
			res, err = k.TryAcquireWait(ctx, n, wait)
			wait = max(0, wait-res.Waited)
		} else {
			res, err = k.TryAcquire(ctx, n)
		}
		rep.Result, rep.Err = res, err
		switch {
		case err != nil:
			if l.shadow && ctx.Err() == nil {
				rep.Shadow, shadowed = true, true
				l.emit(ctx, rep)
				continue
			}
			l.emit(ctx, rep)
			if ctx.Err() != nil {
				// The caller gave up: no failure of the store's.
				l.handBack(ctx, grants)
				return "", status.FromContextError(ctx.Err()).Err()
			}
			return stop(&l.failed, storeStatus(r.Policy.Name(), err))
		case res.Allowed:
			if res.Degraded {
				degraded = append(degraded, r.Policy.Name())
			} else {
				grants = append(grants, granted{k, n})
			}
			l.emit(ctx, rep)
		case l.shadow:
			rep.Shadow, shadowed = true, true
			l.emit(ctx, rep)
		default:
			l.emit(ctx, rep)
			return stop(&l.refused, refusal(r.Policy.Name(), res))
		}
	}
	if shadowed {
		l.shadowd.Add(1)
	}
	if len(degraded) > 0 {
		l.degrade.Add(1)
	}
	l.allowed.Add(1)
	return strings.Join(degraded, ","), nil
}

func (l *Limiter) allowedCall(ctx context.Context, method string) bool {
	for _, a := range l.allow {
		if a(ctx, method) {
			return true
		}
	}
	return false
}

func (l *Limiter) emit(ctx context.Context, r Report) {
	if l.report != nil {
		l.report(ctx, r)
	}
}

// handBack releases what earlier rules granted a call that is not served.
// It runs even if the call's context has ended, briefly; a failed
// hand-back leaves the permits counted until their interval passes.
func (l *Limiter) handBack(ctx context.Context, grants []granted) {
	if len(grants) == 0 {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	for _, g := range grants {
		_, _ = g.k.Release(hctx, g.n)
	}
}

// storeStatus turns a policy's error into the call's status.
func storeStatus(policy string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, redlimit.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "grpclimit: policy %q: %v", policy, err)
	case errors.Is(err, redlimit.ErrPermitsExceedRate), errors.Is(err, redlimit.ErrNotInitialized):
		return status.Errorf(codes.Internal, "grpclimit: policy %q: %v", policy, err)
	case errors.Is(err, redlimit.ErrInvalidArgument):
		return status.Errorf(codes.InvalidArgument, "grpclimit: policy %q: %v", policy, err)
	default:
		return status.Errorf(codes.Internal, "grpclimit: policy %q: %v", policy, err)
	}
}

// RetryDelay is the delay a refusal's RetryInfo carries: the Result's
// RetryAfter rounded up to the millisecond, so that a client that waits
// it is never early.
func RetryDelay(retryAfter time.Duration) time.Duration {
	if retryAfter <= 0 {
		return 0
	}
	if retryAfter > math.MaxInt64-time.Millisecond {
		return retryAfter
	}
	return (retryAfter + time.Millisecond - 1).Truncate(time.Millisecond)
}

// refusal is a refused call's status: ResourceExhausted, with a RetryInfo
// and a QuotaFailure naming the policy and each limit that refused.
func refusal(policy string, res redlimit.Result) error {
	delay := RetryDelay(res.RetryAfter)
	what := policy
	if ls, ok := res.RefusedBy(); ok {
		what = fmt.Sprintf("%s (limit %s)", policy, ls.Name)
	}
	st := status.Newf(codes.ResourceExhausted, "grpclimit: rate limited by policy %s; retry after %v", what, delay)
	qf := &errdetails.QuotaFailure{}
	for _, ls := range res.Limits {
		if !ls.Refused && ls.RetryAfter <= 0 {
			continue
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + policy,
			Description: fmt.Sprintf("limit %s exhausted; retry after %v", ls.Name, RetryDelay(ls.RetryAfter)),
			QuotaId:     ls.Name,
			QuotaValue:  ls.Config.Rate,
		})
	}
	if len(qf.Violations) == 0 {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + policy,
			Description: fmt.Sprintf("rate limited; retry after %v", delay),
		})
	}
	withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}, qf)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// UnaryClientInterceptor limits the calls a client makes, before they are
// sent: a refused call fails locally with the same ResourceExhausted
// status a server would send. A client's calls have no peer: key its
// rules with FullMethod, OutgoingMetadata or Static.
func (l *Limiter) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, err := l.check(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor limits the streams a client opens, each charged
// once when it opens.
func (l *Limiter) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if _, err := l.check(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}
