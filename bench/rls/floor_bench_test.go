//go:build unix

package rls_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkFloor is one gRPC call per op to the gRPC floor over loopback,
// client and floor in this process, shaped as serve's
// BenchmarkShouldRateLimit (the same client, 1, 8 and 64 callers on one
// connection, each on its own value): its allocs/op beside serve's show
// what serve allocates beyond gRPC-go, the client's share being the same,
// and so does its cpu-µs/op (this process: client and floor).
func BenchmarkFloor(b *testing.B) {
	addr := runFloor(b)
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			c := rlsv3.NewRateLimitServiceClient(cc)
			var done atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			for g := range callers {
				wg.Go(func() {
					req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
						Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0." + strconv.Itoa(g)}}}}}
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
		})
	}
}

// processCPU is the user and system CPU time of this process, in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
