package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// go-redis redials a failed connection in the background and notices its
// client was closed only after its next sleep: not a leak of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// epoch is the fake clocks' start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The health service's methods: a unary call and a server stream.
const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// fixture is a memory store and its fake clock.
type fixture struct {
	clk   *clock.Fake
	store *memstore.Store
}

func newFixture() *fixture {
	clk := clock.NewFake(epoch)
	return &fixture{clk: clk, store: memstore.New(memstore.WithTimeSource(clk))}
}

// policy makes a policy on the fixture's store with the given limits.
func (f *fixture) policy(t *testing.T, name string, limits ...string) *redlimit.Policy {
	t.Helper()
	return newPolicy(t, f.store, f.clk, name, limits...)
}

func newPolicy(t *testing.T, store redlimit.PolicyStore, clk clock.Clock, name string, limits ...string) *redlimit.Policy {
	t.Helper()
	var cfgs []redlimit.Config
	for _, s := range limits {
		c, err := redlimit.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, c)
	}
	p, err := redlimit.NewPolicy(store, name, cfgs, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts a gRPC server with the health service on a loopback TCP
// port (network "tcp" or "tcp6"), guarded by the interceptors given, and
// returns a health client connected to it.
func serve(t *testing.T, network string, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "tcp6" {
		addr = "[::1]:0"
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hs.Shutdown()
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return healthpb.NewHealthClient(conn)
}

// serveLimited serves the health service behind l's interceptors.
func serveLimited(t *testing.T, l interface {
	UnaryServerInterceptor() grpc.UnaryServerInterceptor
	StreamServerInterceptor() grpc.StreamServerInterceptor
}) healthpb.HealthClient {
	t.Helper()
	return serve(t, "tcp", grpc.UnaryInterceptor(l.UnaryServerInterceptor()), grpc.StreamInterceptor(l.StreamServerInterceptor()))
}

func check(ctx context.Context, c healthpb.HealthClient, opts ...grpc.CallOption) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}
