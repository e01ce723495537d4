package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// rls is Envoy's rate-limit service on a Server.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

func (g rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	growStack(0)
	resp, err := g.s.shouldRateLimit(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// growStack grows the calling goroutine's stack, at once and while it is
// shallow, to what a decision needs. A call beyond the gRPC workers
// (Config.GRPCWorkers), or on a worker whose stack the collector shrank,
// runs on a small stack that would else grow (copied, each frame
// adjusted) more than once deep in the store's call.
//
//go:noinline
func growStack(i int) byte {
	var pad [8 << 10]byte
	return pad[i]
}

// shouldRateLimit answers one envoy request, for gRPC and HTTP alike.
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	w := wirePool.Get().(*wireRequest)
	defer w.release()
	if err := w.fromProto(req); err != nil {
		return nil, err
	}
	return s.decideRequest(ctx, w.request())
}

// decideRequest decides dr and answers it as envoy's response.
func (s *Server) decideRequest(ctx context.Context, dr decide.Request) (*rlsv3.RateLimitResponse, error) {
	r, err := s.dec.Decide(ctx, dr)
	s.countRequest(dr.Domain, r.Overall, err)
	if err != nil {
		return nil, err
	}
	return s.response(&r), nil
}

// overrideOf is the limit override o of envoy's i-th descriptor.
func overrideOf(i int, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (decide.Override, error) {
	u := overrideUnit(o.GetUnit())
	if u == 0 {
		return decide.Override{}, &decide.RequestError{Reason: fmt.Sprintf("descriptor %d: the limit override's unit %v is unknown", i, o.GetUnit())}
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = int64(m.GetValue())
	}
	return decide.Override{RequestsPerUnit: int64(o.GetRequestsPerUnit()), Interval: u * time.Duration(mult)}, nil
}

// answer is a response to one descriptor, made in one allocation.
type answer struct {
	resp rlsv3.RateLimitResponse
	ptrs [1]*rlsv3.RateLimitResponse_DescriptorStatus
	st   [1]statusParts
}

// statusParts are the messages of one descriptor's status.
type statusParts struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// response is r as envoy's response.
func (s *Server) response(r *decide.Response) *rlsv3.RateLimitResponse {
	var out *rlsv3.RateLimitResponse
	var parts []statusParts
	if len(r.Statuses) == 1 {
		a := new(answer)
		out, parts = &a.resp, a.st[:]
		out.Statuses = a.ptrs[:]
	} else {
		out, parts = new(rlsv3.RateLimitResponse), make([]statusParts, len(r.Statuses))
		out.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses))
	}
	out.OverallCode = rlsv3.RateLimitResponse_Code(r.Overall)
	for i := range r.Statuses {
		out.Statuses[i] = descriptorStatus(&r.Statuses[i], &parts[i])
	}
	if s.cfg.ResponseHeaders {
		out.ResponseHeadersToAdd = headers(r)
	}
	return out
}

// overrideUnit is the length of an override's unit, 0 for one unknown.
func overrideUnit(u typev3.RateLimitUnit) time.Duration {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return rules.Second.Duration()
	case typev3.RateLimitUnit_MINUTE:
		return rules.Minute.Duration()
	case typev3.RateLimitUnit_HOUR:
		return rules.Hour.Duration()
	case typev3.RateLimitUnit_DAY:
		return rules.Day.Duration()
	case typev3.RateLimitUnit_MONTH:
		return rules.Month.Duration()
	case typev3.RateLimitUnit_YEAR:
		return rules.Year.Duration()
	}
	return 0
}

// unit is u in envoy's units (UNKNOWN for none).
func unit(u rules.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case rules.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case rules.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case rules.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case rules.Day:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case rules.Week:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case rules.Month:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case rules.Year:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func clamp32(n int64) uint32 {
	return uint32(max(0, min(n, math.MaxUint32)))
}

// descriptorStatus is st as envoy's status, made in p.
func descriptorStatus(st *decide.Status, p *statusParts) *rlsv3.RateLimitResponse_DescriptorStatus {
	out := &p.st
	out.Code = rlsv3.RateLimitResponse_Code(st.Code)
	if st.Unlimited {
		out.LimitRemaining = math.MaxUint32
	}
	if st.Limit == nil {
		return out
	}
	l := &p.limit
	l.Name, l.RequestsPerUnit, l.Unit = st.Limit.Name, clamp32(st.Limit.Config.Rate), unit(st.Limit.Unit)
	if st.Limit.Multiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(clamp32(st.Limit.Multiplier))
	}
	out.CurrentLimit = l
	out.LimitRemaining = clamp32(st.Remaining)
	if st.Limit.Config.Rate > 0 {
		// durationpb.New's fields, without its allocation.
		p.reset.Seconds, p.reset.Nanos = int64(st.ResetAfter/time.Second), int32(st.ResetAfter%time.Second)
		out.DurationUntilReset = &p.reset
	}
	return out
}

// headers are the IETF RateLimit-Policy and RateLimit fields (and
// Retry-After when over) of the status with the least remaining.
func headers(r *decide.Response) []*corev3.HeaderValue {
	var pick *decide.Status
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Limit == nil || st.Shadowed {
			continue
		}
		if pick == nil || st.Code == decide.OverLimit && pick.Code != decide.OverLimit || st.Code == pick.Code && st.Remaining < pick.Remaining {
			pick = st
		}
	}
	if pick == nil {
		return nil
	}
	name := pick.Limit.Name
	if name == "" {
		name = "default"
	}
	secs := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	// Built with strconv (fmt's %q is strconv.Quote): a response per call.
	q := strconv.Quote(name)
	field := func(k1 string, v1 int64, k2 string, v2 int64) string {
		b := make([]byte, 0, len(q)+48)
		b = append(b, q...)
		b = strconv.AppendInt(append(b, k1...), v1, 10)
		b = strconv.AppendInt(append(b, k2...), v2, 10)
		return string(b)
	}
	n := 2
	if pick.Code == decide.OverLimit && pick.RetryAfter > 0 {
		n = 3
	}
	vals := make([]corev3.HeaderValue, n)
	h := make([]*corev3.HeaderValue, n)
	vals[0].Key, vals[0].Value = "RateLimit-Policy", field(";q=", pick.Limit.Config.Rate, ";w=", secs(pick.Limit.Config.Interval))
	vals[1].Key, vals[1].Value = "RateLimit", field(";r=", max(0, pick.Remaining), ";t=", secs(pick.ResetAfter))
	if n == 3 {
		vals[2].Key, vals[2].Value = "Retry-After", strconv.FormatInt(secs(pick.RetryAfter), 10)
	}
	for i := range vals {
		h[i] = &vals[i]
	}
	return h
}

// grpcError maps an error to a gRPC status: a bad request is
// InvalidArgument, a store outage Unavailable.
func grpcError(err error) error {
	switch {
	case errors.Is(err, redlimit.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, decide.ErrNoRules), errors.Is(err, redlimit.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
