package grpclimit_test

import (
	"strings"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/grpclimit"
)

// go-grpc-middleware's interceptors run the rules through Limit, with the
// method known, and refuse with the retry delay in their message.
func TestMiddlewareAdapter(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{
		{Policy: f.policy(t, "mw-check", "1/1m"), Methods: []string{checkMethod}},
		{Policy: f.policy(t, "mw-watch", "1/1m"), Methods: []string{watchMethod}},
	})
	c := serve(t, "tcp", grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(l)), grpc.StreamInterceptor(ratelimit.StreamServerInterceptor(l)))
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	err := check(ctx, c)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `policy mw-check (limit 1/1m); retry after 1m0s`) {
		t.Fatalf("second call: %v, want ResourceExhausted naming the policy and the delay", err)
	}
	// The stream has its own rule, still whole.
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
}
