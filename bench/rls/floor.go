package rls

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The gRPC floor is a baseline, not a rate limiter: a plain gRPC-go
// server with the options redlimit serve gives its own (its pool of stream
// workers, its bound on a request, gRPC's buffer sizes), whose
// ShouldRateLimit answers one constant OK without reading the request's
// values or touching Redis. Measured by the same load generator and the
// same CPU accounting as the two services, its CPU per call is what
// gRPC-go alone costs a service: no rate-limit service written on gRPC-go
// answers for less, so a goal below it is out of reach rather than just
// missed. It is never a peer: no ratio is taken against it or for it.
const (
	// FloorName labels the floor in reports.
	FloorName = "grpc-floor"
	// FloorWorkers is redlimit serve's default --grpc-workers
	// (serve.DefaultGRPCWorkers; a test keeps the two equal).
	FloorWorkers = 64
	// FloorMaxRequestBytes is redlimit serve's default bound on one
	// request (serve.Config.MaxRequestBytes).
	FloorMaxRequestBytes = 64 << 10
	// FloorGCPercent is redlimit serve's default --gc-percent
	// (serve.DefaultGCPercent), which a floor process should run at too.
	FloorGCPercent = 400
)

// Floor is the gRPC floor's service.
type Floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
	reply *rlsv3.RateLimitResponse
}

// NewFloor returns the floor and a gRPC server serving it with redlimit
// serve's options; the caller serves it (Serve) and stops it.
func NewFloor() (*Floor, *grpc.Server) {
	f := &Floor{reply: &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		// One descriptor's status, as a real answer to the load carries.
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1e9, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     1e9 - 1,
			DurationUntilReset: durationpb.New(1e9),
		}},
	}}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(FloorMaxRequestBytes), grpc.NumStreamWorkers(FloorWorkers))
	rlsv3.RegisterRateLimitServiceServer(gs, f)
	return f, gs
}

// ShouldRateLimit answers OK, the same reply to every call (messages are
// safe to marshal concurrently).
func (f *Floor) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.calls.Add(1)
	return f.reply, nil
}

// Calls is how many calls the floor has answered.
func (f *Floor) Calls() int64 { return f.calls.Load() }

// ServeFloor serves the floor on l until ctx ends, then stops it
// gracefully. It returns the calls answered and the heap allocations
// this process made per call meanwhile (the whole process: run it alone,
// as `rlscompare --serve-floor` does).
func ServeFloor(ctx context.Context, l net.Listener) (calls int64, allocsPerCall float64, err error) {
	f, gs := NewFloor()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(l) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		gs.GracefulStop()
		err = <-done
	}
	runtime.ReadMemStats(&after)
	calls = f.Calls()
	if calls > 0 {
		allocsPerCall = float64(after.Mallocs-before.Mallocs) / float64(calls)
	}
	return calls, allocsPerCall, err
}
