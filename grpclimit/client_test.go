package grpclimit_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/grpclimit"
)

// A client's interceptors refuse before sending: the server, which
// counts what reaches it (an allow-all Limiter), sees only granted calls.
func TestClientInterceptors(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	counter := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "server", "1/1m")}}, grpclimit.WithAllow(grpclimit.AllowMethods("/grpc.health.v1.Health/")))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(counter.UnaryServerInterceptor()), grpc.StreamInterceptor(counter.StreamServerInterceptor()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() {
		hs.Shutdown()
		srv.Stop()
		<-done
	}()
	client := newLimiter(t, []grpclimit.Rule{
		{Policy: f.policy(t, "client-method", "1/1m"), Key: grpclimit.FullMethod()},
		{Policy: f.policy(t, "client-tenant", "5/1m"), Key: grpclimit.OutgoingMetadata("x-tenant"), OnKeyError: grpclimit.SkipRule},
		{Policy: f.policy(t, "client-all", "10/1m"), Key: grpclimit.Static("all")},
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(client.UnaryClientInterceptor()), grpc.WithStreamInterceptor(client.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	tctx := metadata.AppendToOutgoingContext(ctx, "x-tenant", "t1")
	if err := check(tctx, c); err != nil {
		t.Fatal(err)
	}
	details(t, check(tctx, c))
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if _, err := c.Watch(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted before sending", err)
	}
	if got := counter.Stats().Exempt; got != 2 {
		t.Errorf("the server saw %d calls, want 2", got)
	}
	if s := client.Stats(); s.Allowed != 2 || s.Refused != 2 {
		t.Errorf("client stats %+v, want 2 allowed, 2 refused", s)
	}
}
