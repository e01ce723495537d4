package serve_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// BenchmarkShouldRateLimit is one gRPC call per op over loopback, each
// caller on its own remote_address (memory store, real clock), with 1, 8
// and 64 concurrent callers.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) { benchCalls(b, callers) })
	}
}

func benchCalls(b *testing.B, callers int) {
	ts := startBench(b)
	c := rlsClient(b, ts.grpcAddr)
	var done atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	for g := range callers {
		wg.Go(func() {
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0."+strconv.Itoa(g))}}
			for done.Add(1) <= int64(b.N) {
				if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
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
