//go:build unix

package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
)

// BenchmarkShouldRateLimitRedis is serve as `redlimit serve --redis`
// runs it (serve.Run on a real redis-server, the command's defaults,
// --gc-percent from $BENCH_GC_PERCENT if set) driven
// by 64 concurrent gRPC callers over one loopback connection, one
// descriptor per call: each caller on its own value, all on one, or
// many values in turn. It
// reports the process CPU per decision (getrusage: the client's share
// included, since it runs in this process) beside allocs/op.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	rs := redistest.Start(b)
	file := filepath.Join(b.TempDir(), "rules.yaml")
	rules := "domain: bench\ndescriptors:\n  - key: load\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		b.Fatal(err)
	}
	gaddr, _, err := runConfig(b, serve.Config{Rules: file, Redis: "redis://" + rs.Addr + "/0", GCPercent: gcPercent()})
	if err != nil {
		b.Fatal(err)
	}
	c := rlsClient(b, gaddr)
	// many: the callers take turns over 100000 values, as an edge's
	// clients come and go (more keys than the traffic counts keep).
	many := make([]*rlsv3.RateLimitRequest, 100000)
	for i := range many {
		many[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("load", "client-"+strconv.Itoa(i))}}
	}
	for _, values := range []string{"own", "one", "many"} {
		b.Run("values="+values, func(b *testing.B) {
			var next atomic.Int64
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((64 + procs - 1) / procs)
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				caller := next.Add(1)
				req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("load", "caller-"+strconv.FormatInt(caller, 10))}}
				if values == "one" {
					req = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("load", "shared")}}
				}
				for i := caller * 7919; pb.Next(); i++ {
					if values == "many" {
						req = many[i%int64(len(many))]
					}
					resp, err := c.ShouldRateLimit(context.Background(), req)
					if err != nil {
						b.Error(err)
						return
					}
					if resp.OverallCode != ok {
						b.Errorf("refused: %v", resp)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// gcPercent is the command's default --gc-percent, or $BENCH_GC_PERCENT.
func gcPercent() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_GC_PERCENT")); err == nil {
		return n
	}
	return serve.DefaultGCPercent
}

// processCPU is the user and system CPU time of this process, in
// seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
