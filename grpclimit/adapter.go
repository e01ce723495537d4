package grpclimit

import (
	"context"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

var _ ratelimit.Limiter = (*Limiter)(nil)

// Limit applies the rules to the call in ctx, for go-grpc-middleware v2's
// ratelimit interceptors (ratelimit.UnaryServerInterceptor(l)): nil lets
// the call through. The method comes from grpc.Method(ctx), which a
// server sets; elsewhere it is "" and only rules for every method apply.
//
// Those interceptors answer every error with codes.ResourceExhausted and
// its text in their own message: the retry delay and the policy are in the
// text, but the RetryInfo and QuotaFailure details, and the difference
// between a refusal, a missing key (InvalidArgument) and a store failure
// (Unavailable), are lost. Use UnaryServerInterceptor and
// StreamServerInterceptor to keep them.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	degraded, err := l.check(ctx, method)
	if err != nil {
		return err
	}
	if degraded != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(DegradedHeader, degraded))
	}
	return nil
}
