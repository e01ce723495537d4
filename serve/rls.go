package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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
	resp, err := g.s.shouldRateLimit(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// shouldRateLimit answers one envoy request, for gRPC and HTTP alike.
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	dr := decide.Request{Domain: req.GetDomain(), Hits: req.GetHitsAddend(), Descriptors: make([]decide.Descriptor, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		dd := &dr.Descriptors[i]
		if o := d.GetLimit(); o != nil {
			u := overrideUnits[o.GetUnit()]
			if u == 0 {
				return nil, &decide.RequestError{Reason: fmt.Sprintf("descriptor %d: the limit override's unit %v is unknown", i, o.GetUnit())}
			}
			mult := int64(1)
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
				mult = int64(m.GetValue())
			}
			dd.Override = &decide.Override{RequestsPerUnit: int64(o.GetRequestsPerUnit()), Interval: u * time.Duration(mult)}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			dd.Hits = &v
		}
		dd.Entries = make([]rules.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			dd.Entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
	}
	r, err := s.dec.Decide(ctx, dr)
	s.countRequest(dr.Domain, r.Overall, err)
	if err != nil {
		return nil, err
	}
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(r.Overall), Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses))}
	for i := range r.Statuses {
		out.Statuses[i] = descriptorStatus(&r.Statuses[i])
	}
	if s.cfg.ResponseHeaders {
		out.ResponseHeadersToAdd = headers(&r)
	}
	return out, nil
}

var overrideUnits = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: rules.Second.Duration(),
	typev3.RateLimitUnit_MINUTE: rules.Minute.Duration(),
	typev3.RateLimitUnit_HOUR:   rules.Hour.Duration(),
	typev3.RateLimitUnit_DAY:    rules.Day.Duration(),
	typev3.RateLimitUnit_MONTH:  rules.Month.Duration(),
	typev3.RateLimitUnit_YEAR:   rules.Year.Duration(),
}

var units = map[rules.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	rules.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	rules.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	rules.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	rules.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	rules.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	rules.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	rules.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

func clamp32(n int64) uint32 {
	return uint32(max(0, min(n, math.MaxUint32)))
}

func descriptorStatus(st *decide.Status) *rlsv3.RateLimitResponse_DescriptorStatus {
	out := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(st.Code)}
	if st.Unlimited {
		out.LimitRemaining = math.MaxUint32
	}
	if st.Limit == nil {
		return out
	}
	l := &rlsv3.RateLimitResponse_RateLimit{Name: st.Limit.Name, RequestsPerUnit: clamp32(st.Limit.Config.Rate), Unit: units[st.Limit.Unit]}
	if st.Limit.Multiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(clamp32(st.Limit.Multiplier))
	}
	out.CurrentLimit = l
	out.LimitRemaining = clamp32(st.Remaining)
	if st.Limit.Config.Rate > 0 {
		out.DurationUntilReset = durationpb.New(st.ResetAfter)
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
	secs := func(d time.Duration) string { return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) }
	h := []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: fmt.Sprintf("%q;q=%d;w=%s", name, pick.Limit.Config.Rate, secs(pick.Limit.Config.Interval))},
		{Key: "RateLimit", Value: fmt.Sprintf("%q;r=%d;t=%s", name, max(0, pick.Remaining), secs(pick.ResetAfter))},
	}
	if pick.Code == decide.OverLimit && pick.RetryAfter > 0 {
		h = append(h, &corev3.HeaderValue{Key: "Retry-After", Value: secs(pick.RetryAfter)})
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
