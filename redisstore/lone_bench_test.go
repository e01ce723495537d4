//go:build unix

package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// loneScript stands for a peer's one-script limiter (one key, a handful of
// arguments, an array of four answers): the client's work of a call that
// is one EVALSHA.
var loneScript = redis.NewScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[4])
return {1, n, tostring(ARGV[2]), tostring(ARGV[3])}
`)

// BenchmarkLone measures one caller on one limiter, as a user with little
// traffic sees it: decisions per second, and the client's CPU and Redis's
// CPU per decision, per algorithm, beside a one-script call through the
// same client.
func BenchmarkLone(b *testing.B) {
	srv := redistest.Start(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(b *testing.B, rdb *redis.Client, f func() error) {
		cpu0, r0 := redisCPU(b, rdb), selfCPU()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric((selfCPU()-r0)/float64(b.N)*1e6, "client-µs/op")
		b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N)*1e6, "redis-µs/op")
	}
	newClient := func(b *testing.B) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true})
		b.Cleanup(func() { rdb.Close() })
		return rdb
	}
	b.Run("evalsha", func(b *testing.B) {
		rdb := newClient(b)
		run(b, rdb, func() error {
			_, err := loneScript.Run(ctx, rdb, []string{"lone-evalsha"}, 1000, 1, 60, 1).Result()
			return err
		})
	})
	for _, alg := range redlimit.Algorithms {
		b.Run(string(alg), func(b *testing.B) {
			rdb := newClient(b)
			s, err := redisstore.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			l, err := redlimit.New(s, fmt.Sprint("lone-", alg, b.N), redlimit.WithConfig(redlimit.Config{Algorithm: alg, Rate: 10_000_000, Interval: 1e9}))
			if err != nil {
				b.Fatal(err)
			}
			run(b, rdb, func() error {
				_, err := l.TryAcquire(ctx, 1)
				return err
			})
		})
	}
}

// selfCPU is the process's user and system CPU time so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkEightCallers measures 8 callers on one limiter: decisions per
// second, Redis's CPU per decision and how many calls a script run
// carries (at most 8: one run in flight per limiter).
func BenchmarkEightCallers(b *testing.B) {
	srv := redistest.Start(b)
	for _, alg := range redlimit.Algorithms {
		b.Run(string(alg), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8, MaxRetries: -1, ContextTimeoutEnabled: true})
			defer rdb.Close()
			s, err := redisstore.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			l, err := redlimit.New(s, fmt.Sprint("eight-", alg, b.N), redlimit.WithConfig(redlimit.Config{Algorithm: alg, Rate: 10_000_000, Interval: 1e9}))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st0, cpu0 := s.Stats(), redisCPU(b, rdb)
			b.ReportAllocs()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := l.TryAcquire(ctx, 1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N)*1e6, "redis-µs/decision")
			b.ReportMetric(float64(st.RunCalls-st0.RunCalls)/float64(st.ScriptRuns-st0.ScriptRuns), "calls/run")
		})
	}
}
