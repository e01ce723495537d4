package serve_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/serve"
)

func rlsClient(t testing.TB, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestRLSFixedWindow(t *testing.T) {
	// With gRPC workers (the default) and without (-1).
	for _, workers := range []int{0, -1} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			ts := start(t, serve.Config{Rules: "testdata/edge.yaml", GRPCWorkers: workers})
			c := rlsClient(t, ts.grpcAddr)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0.1")}}
			for i, remaining := range []uint32{2, 1, 0} {
				resp := call(t, c, req)
				st := resp.Statuses[0]
				if resp.OverallCode != ok || st.Code != ok || st.LimitRemaining != remaining || st.DurationUntilReset.AsDuration() != 40*time.Second {
					t.Fatalf("call %d: %v", i, resp)
				}
				if l := st.CurrentLimit; l.RequestsPerUnit != 3 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
					t.Fatalf("current limit %v", l)
				}
			}
			resp := call(t, c, req)
			if resp.OverallCode != over || resp.Statuses[0].Code != over || resp.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("4th: %v", resp)
			}
			ts.clock.Advance(40 * time.Second)
			if resp := call(t, c, req); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
				t.Fatalf("next window: %v", resp)
			}
		})
	}
}

func TestRLSDescriptorsAndHits(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	c := rlsClient(t, ts.grpcAddr)
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		descriptor("remote_address", "10.0.0.1"),
		descriptor("client", "internal"),
		descriptor("nothing", "x"),
		descriptor("remote_address", "50.0.0.5"),
	}, HitsAddend: 2})
	if resp.OverallCode != over || len(resp.Statuses) != 4 {
		t.Fatalf("%v", resp)
	}
	if st := resp.Statuses[0]; st.Code != ok || st.LimitRemaining != 1 {
		t.Errorf("hits_addend 2: %v", st)
	}
	if st := resp.Statuses[1]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: %v", st)
	}
	if st := resp.Statuses[2]; st.Code != ok || st.CurrentLimit != nil {
		t.Errorf("no rule: %v", st)
	}
	if st := resp.Statuses[3]; st.Code != over || st.CurrentLimit.RequestsPerUnit != 0 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("blocked: %v", st)
	}

	// A per-descriptor hits_addend of 0 checks without charging.
	look := descriptor("remote_address", "10.0.0.1")
	look.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{look}})
		if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("look: %v", resp)
		}
	}

	// Shadow mode: counted, answered OK.
	shadow := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client", "shadow")}}
	call(t, c, shadow)
	if resp := call(t, c, shadow); resp.OverallCode != ok || resp.Statuses[0].Code != ok || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("shadow: %v", resp)
	}
}

func TestRLSSeveralLimits(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	c := rlsClient(t, ts.grpcAddr)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("tenant", "acme")}}
	call(t, c, req)
	call(t, c, req)
	resp := call(t, c, req)
	if l := resp.Statuses[0].CurrentLimit; resp.OverallCode != over || l.Name != "per-second" || l.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("per-second: %v", resp)
	}
	ts.clock.Advance(time.Second)
	resp = call(t, c, req)
	st := resp.Statuses[0]
	if resp.OverallCode != ok || st.CurrentLimit.Name != "per-10-minutes" || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.UnitMultiplier.GetValue() != 10 || st.LimitRemaining != 0 {
		t.Fatalf("per-10-minutes: %v", resp)
	}
	// 5m21s into the 10-minute window.
	if got := st.DurationUntilReset.AsDuration(); got != 4*time.Minute+39*time.Second {
		t.Fatalf("until reset %v", got)
	}
}

func TestRLSBadRequests(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", MaxRequestBytes: 4096})
	c := rlsClient(t, ts.grpcAddr)
	many := make([]*ratelimitv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = descriptor("k", "v")
	}
	override := descriptor("remote_address", "x")
	override.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_UNKNOWN}
	for name, c2 := range map[string]struct {
		req  *rlsv3.RateLimitRequest
		code codes.Code
	}{
		"no domain":      {&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}}, codes.InvalidArgument},
		"no descriptors": {&rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
		"65 descriptors": {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument},
		"empty entries":  {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, codes.InvalidArgument},
		"unknown unit":   {&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{override}}, codes.InvalidArgument},
		"too large":      {&rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 5000), Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}}, codes.ResourceExhausted},
	} {
		_, err := c.ShouldRateLimit(context.Background(), c2.req)
		if status.Code(err) != c2.code {
			t.Errorf("%s: %v, want %v", name, err, c2.code)
		}
	}
	// The server still answers.
	call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
}

func TestRLSResponseHeaders(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", ResponseHeaders: true})
	c := rlsClient(t, ts.grpcAddr)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "h")}}
	resp := call(t, c, req)
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Policy"] != `"default";q=3;w=60` || got["RateLimit"] != `"default";r=2;t=40` || got["Retry-After"] != "" {
		t.Fatalf("headers %v", got)
	}
	call(t, c, req)
	call(t, c, req)
	resp = call(t, c, req)
	got = map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit"] != `"default";r=0;t=40` || got["Retry-After"] != "40" {
		t.Fatalf("over-limit headers %v", got)
	}
}

func TestRLSLimitOverride(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	c := rlsClient(t, ts.grpcAddr)
	d := descriptor("generic_key", "checkout")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(10)}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
	resp := call(t, c, req)
	if l := resp.Statuses[0].CurrentLimit; resp.OverallCode != ok || l.RequestsPerUnit != 1 || l.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.UnitMultiplier.GetValue() != 10 {
		t.Fatalf("%v", resp)
	}
	if resp := call(t, c, req); resp.OverallCode != over || resp.Statuses[0].DurationUntilReset.AsDuration() != 4*time.Minute+40*time.Second {
		t.Fatalf("2nd: %v", resp)
	}
}

func TestGRPCHealth(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	cc, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%q: %v %v", svc, resp, err)
		}
	}
}

// TestRLSManyEntries: a descriptor of more entries than most (a nested
// rule five levels deep) is matched and counted as one of one entry is,
// alone or beside another descriptor.
func TestRLSManyEntries(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, file, `domain: deep
descriptors:
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            descriptors:
              - key: d
                descriptors:
                  - key: e
                    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: one
    rate_limit: {unit: hour, requests_per_unit: 5}
`)
	ts := start(t, serve.Config{Rules: file})
	c := rlsClient(t, ts.grpcAddr)
	deep := descriptor("a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
	alone := &rlsv3.RateLimitRequest{Domain: "deep", Descriptors: []*ratelimitv3.RateLimitDescriptor{deep}}
	if resp := call(t, c, alone); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 2 {
		t.Fatalf("alone: %v", resp)
	}
	both := &rlsv3.RateLimitRequest{Domain: "deep", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("one", "x"), deep}}
	resp := call(t, c, both)
	if resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 4 || resp.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("beside another: %v", resp)
	}
	if resp := call(t, c, both); resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over {
		t.Fatalf("over: %v", resp)
	}
}
