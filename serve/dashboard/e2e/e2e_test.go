package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redissonstore"
	"github.com/redlimit/redlimit/serve"
)

// tools finds node, chromium and the web folder's node_modules, failing
// (never skipping) with what to install when one is missing.
func tools(t *testing.T) (node, chromium, web string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("the dashboard's browser test needs node (apt-get install -y nodejs npm): ", err)
	}
	chromium = os.Getenv("CHROMIUM_PATH")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("the dashboard's browser test needs Debian's chromium (apt-get install -y chromium) or CHROMIUM_PATH: ", err)
		}
	}
	web, err = filepath.Abs("../web")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("the dashboard's browser test needs playwright-core and axe-core: run npm ci in %s (%v)", web, err)
	}
	return node, chromium, web
}

// config is serve's configuration from command-line flags, as the
// command builds it.
func config(t *testing.T, args ...string) serve.Config {
	t.Helper()
	var cfg serve.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// instance runs serve.Run with cfg on loopback until stop is called (or
// the test ends) and returns its HTTP address.
func instance(t *testing.T, cfg serve.Config) (addr string, stop func()) {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "-", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs := make(chan net.Addr, 1)
	cfg.OnListen = func(_, h net.Addr) { addrs <- h }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve.Run(ctx, cfg) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	select {
	case err := <-done:
		cancel()
		t.Fatal(err)
	case a := <-addrs:
		t.Cleanup(stop)
		addr = a.String()
	}
	return addr, stop
}

const rules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: token-bucket}
  - key: tenant
    limits:
      - {name: per-second, unit: second, requests_per_unit: 20}
      - {name: per-hour, unit: hour, requests_per_unit: 1000, algorithm: sliding-log}
`

// TestDashboard: the page, served by one of two instances on one Redis,
// lists the policies and both instances, streams the traffic sent to
// both, shows the hottest keys, a Redisson limiter and a key's state, is
// accessible and fits 1366x768; writes without the token are refused; a
// rate edited in the page reaches both instances and their answers
// follow it; a stopped instance leaves the list after its heartbeat TTL.
// SCREENSHOT=path saves a screenshot (the README's docs/dashboard.png).
func TestDashboard(t *testing.T) {
	node, chromium, web := tools(t)
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	const token = "e2e-admin-token-7f3a"
	if err := os.WriteFile(tokenFile, []byte("admin:"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A short heartbeat TTL, so that a stopped instance leaves soon, and
	// an admin token.
	base := []string{"--rules=" + file, "--redis=redis://" + rs.Addr, "--dashboard", "--heartbeat-ttl=1500ms", "--token-file=" + tokenFile}
	cfgA, cfgB := config(t, base...), config(t, base...)
	redissonLimiter(t, rs.Client(t))
	a, _ := instance(t, cfgA)
	b, stopB := instance(t, cfgB)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "browser.mjs")
	cmd.Env = append(os.Environ(), "DASHBOARD_URL=http://"+a+"/dashboard/", "CHROMIUM_PATH="+chromium, "WEB_DIR="+web,
		"ADMIN_TOKEN="+token, "NEW_RATE=2", "EXPECT_INSTANCES=2", "EDIT=1", "LEAVE=1")
	if shot := os.Getenv("SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "SCREENSHOT="+abs)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out := bufio.NewScanner(stdout)
	var okSeen bool
	for out.Scan() {
		line := out.Text()
		t.Logf("browser (%s): %s", time.Since(began).Round(time.Millisecond), line)
		switch line {
		case "ready":
			// 6 calls on the key's 4 per hour, over both instances: 4
			// granted, 2 refused.
			body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.2.3"}]}]}`
			for i, h := range []string{a, b, a, b, a, b} {
				resp, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if want := map[bool]int{true: 200, false: 429}[i < 4]; resp.StatusCode != want {
					t.Fatalf("call %d: %d, want %d", i, resp.StatusCode, want)
				}
			}
			fmt.Fprintln(stdin, "sent 6")
		case "ok":
			okSeen = true
		case "stop b":
			stopB()
			fmt.Fprintln(stdin, "stopped")
		default:
			if version, ok := strings.CutPrefix(line, "edited "); ok {
				followed(t, version, a, b)
				fmt.Fprintln(stdin, "followed")
			}
		}
	}
	if err := cmd.Wait(); err != nil || !okSeen {
		t.Fatalf("browser test: %v\n%s", err, stderr.String())
	}
}

// redissonLimiter makes a Redisson limiter "orders" on rdb, 3 of its 10
// a minute taken, as a Java service would.
func redissonLimiter(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	rs, err := redissonstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlimit.New(rs, "orders", redlimit.WithClientID("java"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetRate(ctx, redlimit.PerInterval(10, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.TryAcquire(ctx, 3); err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
}

// followed waits until each instance runs the rules of version (the
// page's edit: 2 per hour on remote_address), then checks that their
// answers follow it: a new key has 2 calls over both instances.
func followed(t *testing.T, version string, addrs ...string) {
	t.Helper()
	for _, h := range addrs {
		for {
			resp, err := http.Get("http://" + h + "/v1/rules")
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Version string `json:"version"`
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if out.Version == version {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling the instance, not waiting in its place
		}
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.7.7.7"}]}]}`
	for i, h := range []string{addrs[0], addrs[1], addrs[0], addrs[1]} {
		resp, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
			t.Fatalf("after the edit, call %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	t.Logf("both instances run rules version %s and grant 2 calls of a new key", version[:12])
}
