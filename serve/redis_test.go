package serve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
)

// runOn starts serve.Run on url until the test ends and returns its
// gRPC and HTTP addresses, or Run's error if it failed to start.
func runOn(t testing.TB, rulesFile, url string) (string, string, error) {
	t.Helper()
	return runConfig(t, serve.Config{Rules: rulesFile, Redis: url})
}

// runConfig starts serve.Run with cfg on loopback ports until the test
// ends.
func runConfig(t testing.TB, cfg serve.Config) (string, string, error) {
	t.Helper()
	addrs := make(chan net.Addr, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.OnListen = func(g, h net.Addr) { addrs <- g; addrs <- h }
	go func() { done <- serve.Run(ctx, cfg) }()
	select {
	case err := <-done:
		cancel()
		return "", "", err
	case g := <-addrs:
		h := <-addrs
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return g.String(), h.String(), nil
	}
}

// TestRunOnRedis runs two instances on one real Redis: they share one
// key's count; /readyz follows Redis.
func TestRunOnRedis(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	file := filepath.Join(t.TempDir(), "rules.yaml")
	// A token bucket: no window to turn during the test.
	rules := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token-bucket}\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	ga, ha, err := runOn(t, file, url)
	if err != nil {
		t.Fatal(err)
	}
	gb, _, err := runOn(t, file, url)
	if err != nil {
		t.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "shared")}}
	ca, cb := rlsClient(t, ga), rlsClient(t, gb)
	for i, c := range []rlsv3.RateLimitServiceClient{ca, cb, ca} {
		if resp := call(t, c, req); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	if resp := call(t, cb, req); resp.OverallCode != over {
		t.Fatalf("4th call, on B: %v", resp)
	}
	if code, body := get(t, "http://"+ha+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz %d %s", code, body)
	}
	rs.Stop()
	if code, _ := get(t, "http://"+ha+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Redis gone: %d", code)
	}
}

func TestRunBadRedisURL(t *testing.T) {
	_, _, err := runOn(t, "testdata/edge.yaml", "http://nowhere")
	if !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
}

// TestRunGCPercent: Run puts Config.GCPercent in force while it serves
// and the previous target back when it returns.
func TestRunGCPercent(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: Run leaves the collector alone")
	}
	gcPercent := func() int {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	before := gcPercent()
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Config{Rules: "testdata/edge.yaml", GRPCAddr: "127.0.0.1:0", HTTPAddr: "-", GCPercent: before + 150,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnListen: func(net.Addr, net.Addr) { close(listening) }})
	}()
	select {
	case <-listening:
	case err := <-done:
		t.Fatal(err)
	}
	if got := gcPercent(); got != before+150 {
		t.Errorf("while serving: %d, want %d", got, before+150)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := gcPercent(); got != before {
		t.Errorf("after: %d, want %d", got, before)
	}
}
