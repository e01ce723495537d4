package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
)

// gatedStore is the memory store with AcquireKey held at a gate, or
// failing as a store that cannot be reached.
type gatedStore struct {
	redlimit.PolicyStore
	entered chan struct{}
	gate    chan struct{}
	down    bool
}

func (g *gatedStore) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	if g.down {
		return redlimit.PolicyDecision{}, fmt.Errorf("dial tcp: connection refused: %w", redlimit.ErrUnavailable)
	}
	if g.gate != nil {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.PolicyStore.AcquireKey(ctx, k, known, n, maxWait)
}

var edgeReq = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0.1")}}

func TestShutdownDrainsInFlightCalls(t *testing.T) {
	store := &gatedStore{PolicyStore: memstore.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	srv, err := serve.New(context.Background(), serve.Config{Rules: "testdata/edge.yaml", Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, gl, nil) }()
	c := rlsClient(t, gl.Addr().String())
	answered := make(chan error, 1)
	go func() {
		resp, err := c.ShouldRateLimit(context.Background(), edgeReq)
		if err == nil && resp.OverallCode != ok {
			err = fmt.Errorf("answer %v", resp)
		}
		answered <- err
	}()
	<-store.entered // the call is in flight
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned with a call in flight: %v", err)
	default:
	}
	close(store.gate)
	if err := <-answered; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestStoreUnavailable(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		ts := start(t, serve.Config{Rules: "testdata/edge.yaml", Store: &gatedStore{PolicyStore: memstore.New(), down: true}, Decide: decide.Options{FailOpen: failOpen}})
		resp, err := rlsClient(t, ts.grpcAddr).ShouldRateLimit(context.Background(), edgeReq)
		if failOpen {
			if err != nil || resp.OverallCode != ok {
				t.Errorf("fail-open: %v %v", resp, err)
			}
		} else if status.Code(err) != codes.Unavailable {
			t.Errorf("fail-closed: %v, want Unavailable", err)
		}
	}
}

func TestRun(t *testing.T) {
	addrs := make(chan net.Addr, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Config{Rules: "testdata/edge.yaml", GRPCAddr: "127.0.0.1:0", HTTPAddr: "-",
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnListen: func(g, h net.Addr) { addrs <- g; addrs <- h }})
	}()
	g, h := <-addrs, <-addrs
	if h != nil {
		t.Errorf("HTTP turned off but listening on %v", h)
	}
	if resp, err := rlsClient(t, g.String()).ShouldRateLimit(context.Background(), edgeReq); err != nil || resp.OverallCode != ok {
		t.Fatalf("%v %v", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
