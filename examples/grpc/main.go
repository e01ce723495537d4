// Command grpc is a gRPC server guarded per client IP by redlimit: the
// health service (grpc.health.v1.Health), each client IP (IPv6 by /64)
// held to the given limits, on the memory store or on Redis, so that
// every instance shares them. Server reflection is served unlimited, for
// grpcurl.
//
//	go run . --addr 127.0.0.1:9090 [--redis URL] [--limit 10/1s]...
//	grpcurl -plaintext 127.0.0.1:9090 grpc.health.v1.Health/Check
//
// A refused call gets ResourceExhausted with RetryInfo and QuotaFailure
// details; a store that cannot be reached lets calls through (FailOpen)
// with a "ratelimit-degraded" response header.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

// limits collects repeated --limit flags.
type limits []redlimit.Config

func (l *limits) String() string {
	names := make([]string, len(*l))
	for i, c := range *l {
		names[i] = redlimit.LimitName(c)
	}
	return strings.Join(names, " ")
}

func (l *limits) Set(s string) error {
	c, err := redlimit.ParseLimit(s)
	if err != nil {
		return err
	}
	*l = append(*l, c)
	return nil
}

// run serves until ctx ends, writing "listening on ADDR" to stdout once
// it accepts calls.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9090", "the `host:port` to listen on")
	redisURL := fs.String("redis", "", "a Redis `URL` (redis://host:6379/0) to keep the limits in; none: in memory")
	var lims limits
	fs.Var(&lims, "limit", "a limit per client IP, `RATE/INTERVAL[,algorithm=A][,burst=N]`, as redlimit set-rate takes it; repeat for several (default 10/1s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(lims) == 0 {
		_ = lims.Set("10/1s")
	}

	var store redlimit.PolicyStore = memstore.New()
	if *redisURL != "" {
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
		opts.MaxRetries = -1 // a command is never sent twice (a resent script could grant twice)
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		rs, err := redisstore.New(rdb)
		if err != nil {
			return err
		}
		defer rs.Close() // before the client's
		store = rs
	}
	perIP, err := redlimit.NewPolicy(store, "grpc-per-ip", lims, redlimit.WithFailurePolicy(redlimit.FailOpen))
	if err != nil {
		return err
	}
	lim, err := grpclimit.New([]grpclimit.Rule{{Policy: perIP, Key: grpclimit.PeerIP()}},
		grpclimit.WithAllow(grpclimit.AllowMethods("/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/")))
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.StreamInterceptor(lim.StreamServerInterceptor()),
		grpc.MaxRecvMsgSize(64<<10),    // health requests are tiny
		grpc.MaxHeaderListSize(16<<10), // and so is their metadata
	)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintf(stdout, "listening on %s, %s per client IP\n", lis.Addr(), lims.String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		hs.Shutdown() // ends Watch streams, so that GracefulStop can finish
		srv.GracefulStop()
		<-served
		s := lim.Stats()
		fmt.Fprintf(stdout, "served %d calls, refused %d, degraded %d\n", s.Allowed, s.Refused, s.Degraded)
		return nil
	}
}
