package rls_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit/bench/rls"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
)

// runFloor serves the gRPC floor on loopback until the test ends and
// returns its address.
func runFloor(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := rls.ServeFloor(ctx, l)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeFloor: %v", err)
		}
	})
	return l.Addr().String()
}

// TestFloorOptions: the floor runs with redlimit serve's defaults.
func TestFloorOptions(t *testing.T) {
	if rls.FloorWorkers != serve.DefaultGRPCWorkers || rls.FloorGCPercent != serve.DefaultGCPercent {
		t.Errorf("floor workers %d, GC %d%%; serve's %d, %d%%", rls.FloorWorkers, rls.FloorGCPercent, serve.DefaultGRPCWorkers, serve.DefaultGCPercent)
	}
}

// TestFloorAnswers: a real gRPC client on loopback gets OK with one
// descriptor status, whatever it asks; a request above serve's bound is
// refused as serve refuses it; ServeFloor counts the calls when stopped.
func TestFloorAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type out struct {
		calls  int64
		allocs float64
		err    error
	}
	done := make(chan out, 1)
	go func() {
		c, a, err := rls.ServeFloor(ctx, l)
		done <- out{c, a, err}
	}()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := rlsv3.NewRateLimitServiceClient(cc)
	for _, value := range []string{"a", "b", "c"} {
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "any", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "load", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
			resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1e9 {
			t.Fatalf("answer %v", resp)
		}
	}
	big := &rlsv3.RateLimitRequest{Domain: strings.Repeat("x", rls.FloorMaxRequestBytes+1)}
	if _, err := c.ShouldRateLimit(context.Background(), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request above the bound: %v, want ResourceExhausted", err)
	}
	cc.Close()
	cancel()
	o := <-done
	if o.err != nil || o.calls != 3 || o.allocs <= 0 {
		t.Errorf("ServeFloor: %d calls, %.1f allocations per call, err %v; want 3 calls", o.calls, o.allocs, o.err)
	}
}

// TestMeasureWithFloor: the floor is measured after the two systems in
// every round, reported in a table of its own, and in no ratio.
func TestMeasureWithFloor(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	a := rls.System{Name: "a", Addr: runServe(t, url, string(rls.Rules))}
	b := rls.System{Name: "b", Addr: runServe(t, url, string(rls.Rules))}
	f := rls.System{Addr: runFloor(t), PID: os.Getpid()}
	r, err := rls.Measure(context.Background(), a, b, rls.LoadOptions{Callers: []int{2}, Rounds: 2,
		Duration: 100 * time.Millisecond, Warmup: 10 * time.Millisecond, Redis: rs.Addr, Floor: f})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range r.Measurements {
		order = append(order, m.System)
	}
	if strings.Join(order, " ") != "a b grpc-floor b a grpc-floor" {
		t.Fatalf("order %v", order)
	}
	c := r.Cells[0]
	if r.Floor == nil || r.Floor.Name != rls.FloorName || c.Floor == nil || c.Floor.PerSecond.N != 2 || c.Floor.Errors != 0 || c.Ratio.N > 2 {
		t.Fatalf("floor %+v, cell %+v", r.Floor, c)
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "| grpc-floor decisions/s |") || !strings.Contains(md.String(), "\n| 2 | ") || strings.Contains(md.String(), "/grpc-floor") {
		t.Errorf("report:\n%s", md.String())
	}

	// The floor is named apart from the systems.
	if _, err := rls.Measure(context.Background(), a, rls.System{Name: rls.FloorName, Addr: b.Addr}, rls.LoadOptions{Floor: f}); err == nil {
		t.Error("a system named as the floor: no error")
	}
}
