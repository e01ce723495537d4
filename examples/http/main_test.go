package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs the server with args on a free loopback port and returns its
// URL; the server is stopped, and run's error checked, at cleanup.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), pw, io.Discard)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no address printed: %v (run: %v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	url, _, _ := strings.Cut(strings.TrimPrefix(line, "listening on "), " ")
	return url
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestServer(t *testing.T) {
	url := start(t, "--limit", "2/1m", "--limit", "100/1h")
	for i := range 2 {
		resp, body := get(t, url+"/")
		if resp.StatusCode != 200 || body != "hello\n" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	resp, body := get(t, url+"/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"http-example:2/1m";q=2;w=60, "http-example:100/1h";q=100;w=3600` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(body, `"violated-policies":["http-example:2/1m"]`) {
		t.Errorf("refusal: %v %s", resp.Header, body)
	}
	// /metrics is not limited, and counts what / answered.
	for range 3 {
		resp, body = get(t, url+"/metrics")
		if resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d", resp.StatusCode)
		}
	}
	for _, want := range []string{`httplimit_requests_total{result="allowed"} 2`, `httplimit_requests_total{result="refused"} 1`, `redlimit_decisions_total{`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	ctx := context.Background()
	if err := run(ctx, []string{"--limit", "ten/1s"}, io.Discard, io.Discard); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("bad --limit: %v", err)
	}
	if err := run(ctx, []string{"--redis", "memcached://x"}, io.Discard, io.Discard); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("bad --redis: %v", err)
	}
	if err := run(ctx, []string{"--trusted-proxy", "proxy.local"}, io.Discard, io.Discard); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("bad --trusted-proxy: %v", err)
	}
	if err := run(ctx, []string{"extra"}, io.Discard, io.Discard); err == nil {
		t.Error("an extra argument was accepted")
	}
}

// TestRedis runs the server on a real Redis: its policy is kept there.
func TestRedis(t *testing.T) {
	srv := redistest.Start(t)
	url := start(t, "--redis", "redis://"+srv.Addr+"/0", "--limit", "1/1m")
	if resp, _ := get(t, url+"/"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	if resp, _ := get(t, url+"/"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second: %d", resp.StatusCode)
	}
}
