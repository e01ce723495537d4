package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/memstore"
)

// exampleServer serves the health service on a loopback port behind lim
// and returns a client of it and a function that stops both.
func exampleServer(lim *grpclimit.Limiter) (healthpb.HealthClient, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.StreamInterceptor(lim.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return healthpb.NewHealthClient(conn), func() { conn.Close(); srv.Stop() }
}

// examplePolicy makes a policy on a memory store whose time stands still,
// so that the examples' output does not depend on the machine's speed.
func examplePolicy(name, limit string) *redlimit.Policy {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg, err := redlimit.ParseLimit(limit)
	if err != nil {
		panic(err)
	}
	p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), name, []redlimit.Config{cfg}, redlimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	return p
}

// Each client IP may call twice a minute; the third call is refused with
// when to retry and which limit refused.
func ExampleNew() {
	lim, err := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("per-ip", "2/1m"), Key: grpclimit.PeerIP()}})
	if err != nil {
		panic(err)
	}
	client, stop := exampleServer(lim)
	defer stop()
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					fmt.Println(v.GetSubject(), v.GetQuotaId())
				}
			}
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
	// retry in 1m0s
	// policy:per-ip 2/1m
}

// Calls are charged per API key, or per client IP when they carry none;
// a rule whose key is required (the default OnKeyError) answers
// InvalidArgument instead.
func ExampleFirst() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{
		Policy: examplePolicy("per-client", "1/1m"),
		Key:    grpclimit.First(grpclimit.Metadata("x-api-key"), grpclimit.PeerIP()),
	}})
	client, stop := exampleServer(lim)
	defer stop()
	for _, key := range []string{"alice", "bob", "alice", ""} {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Printf("%q: %v\n", key, status.Code(err))
	}
	// Output:
	// "alice": OK
	// "bob": OK
	// "alice": ResourceExhausted
	// "": OK
}

// An expensive method costs more permits; a cost of zero exempts one.
func ExampleWithCost() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("cost", "5/1m")}},
		grpclimit.WithCost("/grpc.health.v1.Health/Check", 3))
	client, stop := exampleServer(lim)
	defer stop()
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted
}

// Internal callers and health checks pass uncharged.
func ExampleWithAllow() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("allow", "1/1m")}},
		grpclimit.WithAllow(grpclimit.AllowPeers(netip.MustParsePrefix("127.0.0.0/8"))),
		grpclimit.WithAllow(grpclimit.AllowMethods("/grpc.health.v1.Health/")))
	client, stop := exampleServer(lim)
	defer stop()
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	fmt.Println("exempt:", lim.Stats().Exempt)
	// Output:
	// OK
	// OK
	// OK
	// exempt: 3
}

// A shadow run serves every call and reports what it would refuse.
func ExampleWithShadow() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("shadow", "1/1m")}},
		grpclimit.WithShadow(),
		grpclimit.WithReport(func(_ context.Context, r grpclimit.Report) {
			if r.Shadow {
				fmt.Printf("would refuse %s (retry after %v)\n", r.FullMethod, r.Result.RetryAfter)
			}
		}))
	client, stop := exampleServer(lim)
	defer stop()
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	fmt.Println("shadow-refused:", lim.Stats().ShadowRefused)
	// Output:
	// OK
	// would refuse /grpc.health.v1.Health/Check (retry after 1m0s)
	// OK
	// shadow-refused: 1
}

// A call may wait for its turn, up to a bound, instead of being refused:
// with 1 per second and a bound of 1.5s, the second call waits (on the
// real clock here) for the next permit, under a second away.
func ExampleWithWait() {
	cfg, _ := redlimit.ParseLimit("1/1s,algorithm=token-bucket")
	p, _ := redlimit.NewPolicy(memstore.New(), "shaped", []redlimit.Config{cfg})
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: p}}, grpclimit.WithWait(1500*time.Millisecond))
	client, stop := exampleServer(lim)
	defer stop()
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
}

// Several rules apply together: a call is served only if each grants it,
// and what one granted is handed back when another refuses.
func ExampleRule() {
	lim, _ := grpclimit.New([]grpclimit.Rule{
		{Policy: examplePolicy("per-key", "100/1m"), Key: grpclimit.Metadata("x-api-key")},
		{Policy: examplePolicy("per-method", "1/1m"), Key: grpclimit.FullMethod(),
			Methods: []string{"/grpc.health.v1.Health/Check"}},
	})
	client, stop := exampleServer(lim)
	defer stop()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k")
	for range 2 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted
}

// A Limiter is a go-grpc-middleware v2 ratelimit.Limiter, for servers
// built on that package's interceptors.
func ExampleLimiter_Limit() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("mw", "1/1m")}})
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(lim)),
		grpc.StreamInterceptor(ratelimit.StreamServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted
}

// A client can hold itself to a limit: refused calls fail locally, before
// they are sent.
func ExampleLimiter_UnaryClientInterceptor() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: examplePolicy("outgoing", "1/1m"), Key: grpclimit.FullMethod()}})
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(lim.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(lim.StreamClientInterceptor()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 2 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted
}

// Behind a proxy (here the loopback address stands for it), each client
// is keyed by the address the proxy saw, not the proxy's own.
func ExampleForwardedIP() {
	lim, _ := grpclimit.New([]grpclimit.Rule{{
		Policy: examplePolicy("per-client-ip", "1/1m"),
		Key:    grpclimit.ForwardedIP(netip.MustParsePrefix("127.0.0.0/8")),
	}})
	client, stop := exampleServer(lim)
	defer stop()
	for _, ip := range []string{"203.0.113.9", "198.51.100.7", "203.0.113.9"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", ip)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Println(ip, status.Code(err))
	}
	// Output:
	// 203.0.113.9 OK
	// 198.51.100.7 OK
	// 203.0.113.9 ResourceExhausted
}
