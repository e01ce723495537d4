package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// listening reads the server's first line and returns its address.
func listening(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the server's first line: %q, %v", line, err)
	}
	addr, _, ok := strings.Cut(strings.TrimPrefix(line, "listening on "), ",")
	if !ok || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("first line %q", line)
	}
	return addr
}

// callTwice makes two health checks, the second past a 1/1m limit, and
// checks that it is refused with a retry delay.
func callTwice(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first call: %v, %v", r, err)
	}
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay <= 0 || delay > time.Minute {
		t.Errorf("retry delay %v, want up to the 1m window", delay)
	}
}

// The README's command: built, started on a free port, called, stopped
// with SIGINT.
func TestBuiltServer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "grpc-example")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--limit", "1/1m")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	callTwice(t, listening(t, out))
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exit: %v\n%s", err, stderr.Bytes())
	}
	if got := string(rest); got != "served 1 calls, refused 1, degraded 0\n" {
		t.Errorf("last line %q", got)
	}
}

// With --redis the limits live in Redis.
func TestRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--redis", srv.URL(), "--limit", "1/1m"}, w, io.Discard)
		w.Close()
	}()
	out := bufio.NewReader(r)
	line, err := out.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("run: %v", <-done)
	}
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "listening on "), ",")
	callTwice(t, addr)
	cancel()
	go io.Copy(io.Discard, out)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--limit", "ten/1s"},
		{"--limit", "0/1s"},
		{"--redis", "http://nowhere"},
		{"extra"},
		{"--addr", "256.0.0.1:0"},
	} {
		err := run(t.Context(), args, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
