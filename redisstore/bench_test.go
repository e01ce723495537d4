package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// BenchmarkTryAcquire measures decisions per second from one process with
// 64 concurrent callers, plain and auto-pipelined, granted and refused.
func BenchmarkTryAcquire(b *testing.B) {
	srv := redistest.Start(b)
	for _, alg := range redlimit.Algorithms {
		for _, mode := range []string{"plain", "autopipeline", "batching", "default"} {
			for _, load := range []string{"granted", "refused"} {
				b.Run(fmt.Sprintf("%s/%s/%s", alg, mode, load), func(b *testing.B) {
					rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, MaxRetries: -1})
					defer rdb.Close()
					var opts []redisstore.Option
					// plain: one script run per call, no refusal cache; batching:
					// batching alone; default: batching and the refusal cache.
					switch mode {
					case "autopipeline":
						opts = append(opts, redisstore.WithAutoPipeline(), redisstore.WithoutBatching(), redisstore.WithRefusalCache(0))
					case "plain":
						opts = append(opts, redisstore.WithoutBatching(), redisstore.WithRefusalCache(0))
					case "batching":
						opts = append(opts, redisstore.WithRefusalCache(0))
					}
					s, err := redisstore.New(rdb, opts...)
					if err != nil {
						b.Fatal(err)
					}
					cfg := redlimit.PerSecond(1 << 30).WithAlgorithm(alg)
					if load == "refused" {
						cfg = redlimit.PerMinute(1).WithAlgorithm(alg)
					}
					l, _ := redlimit.New(s, fmt.Sprint("bench-", alg, load, mode), redlimit.WithConfig(cfg))
					if load == "refused" {
						l.TryAcquire(context.Background(), 1)
					}
					ctx := context.Background()
					cpu0 := redisCPU(b, rdb)
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
					b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N)*1e6, "redis-µs/decision")
					if st := s.Stats(); st.ScriptRuns > 0 {
						b.ReportMetric(float64(st.Calls-st.LocalRefusals)/float64(st.ScriptRuns), "calls/run")
					}
				})
			}
		}
	}
}

// redisCPU is the CPU time Redis has used, in seconds (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	info := rdb.Info(context.Background(), "cpu").Val()
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return total
}

// BenchmarkManyLimiters: 64 callers on 10,000 limiters (per-user limits),
// so that calls seldom meet on one limiter: plain, and with the defaults,
// which put the calls of different limiters in one script run.
func BenchmarkManyLimiters(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"plain", "default"} {
		b.Run(mode, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, MaxRetries: -1})
			defer rdb.Close()
			var opts []redisstore.Option
			if mode == "plain" {
				opts = append(opts, redisstore.WithoutBatching(), redisstore.WithRefusalCache(0))
			}
			s, err := redisstore.New(rdb, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ls := make([]*redlimit.Limiter, 10000)
			for i := range ls {
				ls[i], _ = redlimit.New(s, fmt.Sprint("user-", i), redlimit.WithConfig(redlimit.TokenBucketConfig(1<<30, time.Second, 1<<30)))
			}
			ctx := context.Background()
			var next atomic.Int64
			cpu0 := redisCPU(b, rdb)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := ls[next.Add(7919)%int64(len(ls))].TryAcquire(ctx, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N)*1e6, "redis-µs/decision")
		})
	}
}
