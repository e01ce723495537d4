package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
	"github.com/redlimit/redlimit/serve"
)

// eventually polls cond until it holds; the deadline bounds a failure,
// it is not a wait the test relies on.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s", what, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// instances is GET /v1/instances on addr.
func instances(t *testing.T, addr string) []serve.Instance {
	t.Helper()
	code, body := get(t, "http://"+addr+"/v1/instances")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/instances: %d %s", code, body)
	}
	var out struct{ Instances []serve.Instance }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return out.Instances
}

func describe(list []serve.Instance) string {
	var b strings.Builder
	for _, in := range list {
		fmt.Fprintf(&b, "[%s grpc=%s http=%s rules=%.12s] ", in.ID, in.GRPCAddr, in.HTTPAddr, in.RulesVersion)
	}
	return fmt.Sprintf("%d instances: %s", len(list), b.String())
}

// lists reports whether list holds exactly the servers, each with its
// addresses and its rules version.
func lists(list []serve.Instance, servers ...*testServer) bool {
	if len(list) != len(servers) {
		return false
	}
	for _, ts := range servers {
		i := slices.IndexFunc(list, func(in serve.Instance) bool { return in.ID == ts.srv.ID() })
		if i < 0 {
			return false
		}
		in := list[i]
		if in.GRPCAddr != ts.grpcAddr || in.HTTPAddr != ts.httpAddr || in.RulesVersion != ts.srv.RulesVersion() || in.Version == "" || in.StartedAt.IsZero() || in.LastHeartbeat.IsZero() {
			return false
		}
	}
	return true
}

// startStoppable serves cfg on loopback until the test ends or it calls
// the stop returned (a graceful stop).
func startStoppable(t testing.TB, cfg serve.Config) (*testServer, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := serve.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return &testServer{srv: srv, grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String()}, stop
}

// TestRegistryTwoInstances runs two servers on one real Redis: each
// lists both, with their addresses and rules versions; a reload's new
// version shows at once; a server stopped gracefully leaves at once.
func TestRegistryTwoInstances(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, file, limitRules(3))
	evA, evB := make(reloads, 16), make(reloads, 16)
	a, _ := startStoppable(t, serve.Config{Rules: file, RedisClient: rdb, OnReload: func(r serve.Reload) { evA <- r }})
	b, stopB := startStoppable(t, serve.Config{Rules: file, RedisClient: rdb, OnReload: func(r serve.Reload) { evB <- r }})
	if a.srv.ID() == b.srv.ID() {
		t.Fatalf("two servers, one id %q", a.srv.ID())
	}
	for _, ts := range []*testServer{a, b} {
		eventually(t, "both listed on "+ts.httpAddr, func() (bool, string) {
			list := instances(t, ts.httpAddr)
			return lists(list, a, b), describe(list)
		})
	}
	before := a.srv.RulesVersion()
	<-a.srv.Watching()
	<-b.srv.Watching()
	replace(t, file, limitRules(100))
	for _, ev := range []serve.Reload{evA.next(t), evB.next(t)} {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	if a.srv.RulesVersion() == before || a.srv.RulesVersion() != b.srv.RulesVersion() {
		t.Fatalf("rules version %q before, %q and %q after", before, a.srv.RulesVersion(), b.srv.RulesVersion())
	}
	eventually(t, "the new rules version listed", func() (bool, string) {
		list := instances(t, a.httpAddr)
		return lists(list, a, b), describe(list)
	})

	stopB()
	if list := instances(t, a.httpAddr); !lists(list, a) {
		t.Fatalf("after B stopped: %s", describe(list))
	}
}

// TestRegistryWithoutRedis lists the server alone.
func TestRegistryWithoutRedis(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	if list := instances(t, ts.httpAddr); !lists(list, ts) || list[0].TTL != 15*time.Second {
		t.Fatalf("%s", describe(list))
	}
	// The fields as the API contract names them.
	_, body := get(t, "http://"+ts.httpAddr+"/v1/instances")
	var raw struct{ Instances []map[string]any }
	if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw.Instances) != 1 {
		t.Fatalf("%s: %v", body, err)
	}
	var keys []string
	for k := range raw.Instances[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"grpc_addr", "http_addr", "id", "last_heartbeat", "rules_version", "started_at", "ttl_ms", "version"}
	if !slices.Equal(keys, want) || raw.Instances[0]["ttl_ms"] != 15000.0 {
		t.Fatalf("%s", body)
	}
}

// TestRegistryCluster keeps the registry on a Redis Cluster.
func TestRegistryCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	rdb := redistest.StartCluster(t, 3, 0).Client(t)
	a, _ := startStoppable(t, serve.Config{Rules: "testdata/edge.yaml", RedisClient: rdb})
	b, stopB := startStoppable(t, serve.Config{Rules: "testdata/edge.yaml", RedisClient: rdb})
	eventually(t, "both listed", func() (bool, string) {
		list := instances(t, a.httpAddr)
		return lists(list, a, b), describe(list)
	})
	stopB()
	if list := instances(t, a.httpAddr); !lists(list, a) {
		t.Fatalf("after B stopped: %s", describe(list))
	}
}

const childEnv = "REDLIMIT_TEST_REGISTRY_CHILD"

// TestRegistryChild is the server the killed-instance test runs in a
// process of its own (the test binary again): it serves until killed.
func TestRegistryChild(t *testing.T) {
	url := os.Getenv(childEnv)
	if url == "" {
		t.Skip("run by TestRegistryKilledInstanceExpires")
	}
	rdb := redis.NewClient(&redis.Options{Addr: url})
	defer rdb.Close()
	err := serve.Run(context.Background(), serve.Config{Rules: "testdata/edge.yaml", RedisClient: rdb, HeartbeatTTL: 500 * time.Millisecond,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnListen: func(g, h net.Addr) { fmt.Printf("\nCHILD-LISTENING %s %s\n", g, h) }})
	t.Fatal(err) // Run returns only on failure here
}

// TestRegistryKilledInstanceExpires kills an instance (SIGKILL: no
// deregistration); it drops out of the list once its TTL has run.
func TestRegistryKilledInstanceExpires(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	self, _ := startStoppable(t, serve.Config{Rules: "testdata/edge.yaml", RedisClient: rdb})

	cmd := exec.Command(os.Args[0], "-test.run=^TestRegistryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+rs.Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var childGRPC string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "CHILD-LISTENING" {
			childGRPC = f[1]
			break
		}
	}
	if childGRPC == "" {
		t.Fatalf("the child did not start: %v", sc.Err())
	}
	go io.Copy(io.Discard, out)
	var child serve.Instance
	eventually(t, "the child listed", func() (bool, string) {
		list := instances(t, self.httpAddr)
		for _, in := range list {
			if in.GRPCAddr == childGRPC {
				child = in
				return true, ""
			}
		}
		return false, describe(list)
	})
	if child.TTL != 500*time.Millisecond || child.RulesVersion != self.srv.RulesVersion() {
		t.Fatalf("child %+v", child)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	cmd.Wait()
	eventually(t, "the killed child gone", func() (bool, string) {
		list := instances(t, self.httpAddr)
		return lists(list, self), describe(list)
	})
	// Its id is pruned from the index as well, not only hidden.
	if ids := rdb.ZRange(context.Background(), serve.DefaultPrefix+"instances", 0, -1).Val(); !slices.Equal(ids, []string{self.srv.ID()}) {
		t.Fatalf("index %v", ids)
	}
}

// TestRegistryRedisDown stops Redis under a server: its heartbeats fail,
// are counted and logged once (the clock does not move), it goes on
// answering, and it is listed again once Redis is back.
func TestRegistryRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	var logs syncbuf.Buffer
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", RedisClient: rdb, HeartbeatTTL: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	eventually(t, "listed", func() (bool, string) {
		list := instances(t, ts.httpAddr)
		return lists(list, ts), describe(list)
	})

	rs.Stop()
	eventually(t, "failed heartbeats counted", func() (bool, string) {
		n := ts.srv.HeartbeatFailures()
		return n >= 3, fmt.Sprint(n, " failures")
	})
	if resp := call(t, rlsClient(t, ts.grpcAddr), edgeReq); resp.OverallCode != ok {
		t.Fatalf("with Redis down: %v", resp)
	}
	if code, body := get(t, "http://"+ts.httpAddr+"/v1/instances"); code != http.StatusServiceUnavailable || !strings.Contains(body, "registry") {
		t.Fatalf("GET /v1/instances with Redis down: %d %s", code, body)
	}
	if n := strings.Count(logs.String(), "registry heartbeat failed"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	if got, _ := value(scrape(t, ts.httpAddr), "redlimit_serve_heartbeat_errors_total", nil); got < 3 {
		t.Fatalf("heartbeat_errors_total %v", got)
	}

	rs.Restart(t)
	eventually(t, "listed again", func() (bool, string) {
		code, body := get(t, "http://"+ts.httpAddr+"/v1/instances")
		if code != http.StatusOK {
			return false, body
		}
		list := instances(t, ts.httpAddr)
		return lists(list, ts), describe(list)
	})
	eventually(t, "recovery logged", func() (bool, string) {
		return strings.Contains(logs.String(), "registry heartbeat recovered"), logs.String()
	})
}

func TestRegistryBadTTL(t *testing.T) {
	_, err := serve.New(context.Background(), serve.Config{Rules: "testdata/edge.yaml", HeartbeatTTL: time.Millisecond})
	if !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
}
