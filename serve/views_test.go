package serve_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/traffic"
)

// runCfg starts serve.Run with cfg on loopback until the test ends and
// returns its HTTP address.
func runCfg(t *testing.T, cfg serve.Config) string {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "-", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := make(chan net.Addr, 1)
	cfg.OnListen = func(_, h net.Addr) { addr <- h }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.Run(ctx, cfg) }()
	select {
	case err := <-done:
		cancel()
		t.Fatal(err)
	case a := <-addr:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return a.String()
	}
	return ""
}

// TestTrafficOfEveryInstance: calls made on two instances sharing a
// Redis show up, added up, in the traffic either one serves; the
// dashboard is served where it is turned on.
func TestTrafficOfEveryInstance(t *testing.T) {
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	rules := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token-bucket}\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	a := runCfg(t, serve.Config{Rules: file, Redis: "redis://" + rs.Addr, Dashboard: true})
	b := runCfg(t, serve.Config{Rules: file, Redis: "redis://" + rs.Addr})
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.9"}]}]}`
	for _, h := range []string{a, b, a, b, a} {
		post(t, "http://"+h+"/json", body)
	}
	// Each instance flushes every second: wait for both counts.
	var got traffic.Series
	for {
		code, text := get(t, "http://"+b+"/v1/traffic?seconds=120")
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, text)
		}
		if err := json.Unmarshal([]byte(text), &got); err != nil {
			t.Fatal(err)
		}
		var granted, refused int64
		for _, p := range got.Policies {
			for i := range p.Granted {
				granted += p.Granted[i]
				refused += p.Refused[i]
			}
		}
		if granted+refused == 5 {
			if granted != 3 || refused != 2 || got.Policies[0].Policy != "edge/remote_address" {
				t.Fatalf("granted %d refused %d: %+v", granted, refused, got)
			}
			break
		}
		if granted+refused > 5 {
			t.Fatalf("counted %d calls of 5", granted+refused)
		}
		time.Sleep(50 * time.Millisecond) // polling for the flushes, not a wait standing in for one
	}
	code, text := get(t, "http://"+a+"/v1/traffic/top?policy=edge/remote_address&n=5")
	if code != http.StatusOK || !strings.Contains(text, `"hits":5`) {
		t.Fatalf("top: %d %s", code, text)
	}
	if code, text := get(t, "http://"+a+"/dashboard/"); code != http.StatusOK || !strings.Contains(text, "redlimit dashboard") {
		t.Fatalf("dashboard on A: %d", code)
	}
	if code, _ := get(t, "http://"+b+"/dashboard/"); code != http.StatusNotFound {
		t.Fatalf("dashboard on B, not turned on: %d", code)
	}
	if code, text := get(t, "http://"+b+"/v1/redisson"); code != http.StatusOK || !strings.Contains(text, `"limiters":[]`) {
		t.Fatalf("redisson: %d %s", code, text)
	}
}

// TestStreamEndsOnDrain: an open event stream does not hold a shutdown
// up until ShutdownTimeout: the server ends it when it drains.
func TestStreamEndsOnDrain(t *testing.T) {
	cfg := serve.Config{Rules: "testdata/edge.yaml", GRPCAddr: "-", HTTPAddr: "127.0.0.1:0", ShutdownTimeout: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	addr := make(chan net.Addr, 1)
	cfg.OnListen = func(_, h net.Addr) { addr <- h }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve.Run(ctx, cfg) }()
	resp, err := http.Get("http://" + (<-addr).String() + "/v1/traffic/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: " {
		t.Fatalf("first event %q %v", first, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
}

// TestTrafficOff: --traffic=false counts nothing and serves no traffic.
func TestTrafficOff(t *testing.T) {
	var cfg serve.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--rules=testdata/edge.yaml", "--traffic=false"}); err != nil || !cfg.NoTraffic {
		t.Fatalf("--traffic=false: NoTraffic %v, %v", cfg.NoTraffic, err)
	}
	h := runCfg(t, cfg)
	if code, _ := get(t, "http://"+h+"/v1/traffic"); code != http.StatusNotFound {
		t.Fatalf("/v1/traffic with counting off: %d", code)
	}
}

// TestTrafficKeysOff: --traffic-keys=false counts the traffic per policy
// but keeps its keys out of Redis and the dashboard's views.
func TestTrafficKeysOff(t *testing.T) {
	rs := redistest.Start(t)
	var cfg serve.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--rules=testdata/edge.yaml", "--redis=redis://" + rs.Addr, "--traffic-keys=false"}); err != nil || !cfg.NoTrafficKeys {
		t.Fatalf("--traffic-keys=false: NoTrafficKeys %v, %v", cfg.NoTrafficKeys, err)
	}
	h := runCfg(t, cfg)
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.9"}]}]}`
	for range 3 {
		post(t, "http://"+h+"/json", body)
	}
	for counted := int64(0); counted != 3; {
		code, text := get(t, "http://"+h+"/v1/traffic?seconds=120")
		var got traffic.Series
		if err := json.Unmarshal([]byte(text), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s %v", code, text, err)
		}
		counted = 0
		for _, p := range got.Policies {
			for i := range p.Granted {
				counted += p.Granted[i] + p.Refused[i]
			}
		}
		if counted > 3 {
			t.Fatalf("counted %d calls of 3", counted)
		}
		time.Sleep(50 * time.Millisecond) // polling for the flush, not a wait standing in for one
	}
	if code, text := get(t, "http://"+h+"/v1/traffic/top?policy=edge/remote_address"); code != http.StatusNotFound || !strings.Contains(text, "not recorded") {
		t.Fatalf("top with keys off: %d %s", code, text)
	}
	rdb := rs.Client(t)
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "traffic:top") {
			t.Errorf("%s kept with keys off", k)
		}
	}
}
