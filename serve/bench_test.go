package serve_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// BenchmarkShouldRateLimit is one gRPC call per op over loopback, each
// caller on its own remote_address (memory store, real clock).
func BenchmarkShouldRateLimit(b *testing.B) {
	ts := startBench(b)
	c := rlsClient(b, ts.grpcAddr)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0."+strconv.FormatInt(next.Add(1), 10))}}
		for pb.Next() {
			if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func startBench(b *testing.B) *testServer {
	b.Helper()
	dir := b.TempDir()
	file := dir + "/bench.yaml"
	replace(b, file, "domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
	return start(b, serve.Config{Rules: file})
}

// BenchmarkDecide is the decision alone, in process.
func BenchmarkDecide(b *testing.B) {
	ts := startBench(b)
	d := ts.srv.Decider()
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		req := decide.Request{Domain: "bench", Descriptors: []decide.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0." + strconv.FormatInt(next.Add(1), 10)}}}}}
		for pb.Next() {
			if _, err := d.Decide(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
