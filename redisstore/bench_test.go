package redisstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// BenchmarkTryAcquire measures decisions per second from one process with
// 64 concurrent callers, plain and auto-pipelined, granted and refused.
func BenchmarkTryAcquire(b *testing.B) {
	srv := redistest.Start(b)
	for _, auto := range []bool{false, true} {
		for _, load := range []string{"granted", "refused"} {
			b.Run(fmt.Sprintf("autopipeline=%v/%s", auto, load), func(b *testing.B) {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, MaxRetries: -1})
				defer rdb.Close()
				var opts []redisstore.Option
				if auto {
					opts = append(opts, redisstore.WithAutoPipeline())
				}
				s, err := redisstore.New(rdb, opts...)
				if err != nil {
					b.Fatal(err)
				}
				cfg := redlimit.PerSecond(1 << 40)
				if load == "refused" {
					cfg = redlimit.PerMinute(1)
				}
				l, _ := redlimit.New(s, "bench-"+load+fmt.Sprint(auto), redlimit.WithConfig(cfg))
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(32) // x GOMAXPROCS (2) = 64 callers
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := l.TryAcquire(ctx, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
