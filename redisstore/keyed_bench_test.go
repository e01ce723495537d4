package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// keyedBenchKeys is how many keys BenchmarkKeyed spreads its calls over.
const keyedBenchKeys = 100_000

// BenchmarkKeyed measures keyed decisions (a one-limit Policy per
// algorithm, always granted) over 100,000 keys at 1, 8 and 64 concurrent
// callers: beside ns/op, the Redis CPU per decision (INFO cpu), the
// client's (the benchmark process's) and the FCALLs per decision (INFO
// commandstats), which a noisy machine disturbs less than the speed.
func BenchmarkKeyed(b *testing.B) {
	srv := redistest.Start(b)
	for _, alg := range redlimit.Algorithms {
		for _, callers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", alg, callers), func(b *testing.B) {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: callers, MaxRetries: -1})
				defer rdb.Close()
				s, err := redisstore.New(rdb)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				cfg := redlimit.PerSecond(1 << 30).WithAlgorithm(alg)
				switch alg {
				case redlimit.TokenBucket:
					cfg = redlimit.TokenBucketConfig(1<<30, time.Second, 1<<30)
				case redlimit.LeakyBucket:
					cfg = redlimit.LeakyBucketConfig(1<<30, time.Second, 1<<30)
				case redlimit.SlidingLog:
					cfg = redlimit.PerSecond(1 << 20).WithAlgorithm(alg)
				}
				p, err := redlimit.NewPolicy(s, "bench-"+string(alg), []redlimit.Config{cfg})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				keys := make([]string, keyedBenchKeys)
				for i := range keys {
					keys[i] = "user-" + strconv.Itoa(i)
				}
				if _, err := p.Key(keys[0]).TryAcquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
				cpu0, fcalls0 := redisCPU(b, rdb), redisCalls(b, rdb, "fcall")
				self0 := selfCPU()
				driveKeyed(ctx, b, p, keys, callers)
				self := selfCPU() - self0
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N)*1e6, "redis-µs/decision")
				b.ReportMetric(self/float64(b.N)*1e6, "client-µs/decision")
				b.ReportMetric(float64(redisCalls(b, rdb, "fcall")-fcalls0)/float64(b.N), "fcalls/decision")
			})
		}
	}
}

// redisCalls is how many times Redis ran a command (INFO commandstats).
func redisCalls(b *testing.B, rdb *redis.Client, cmd string) int64 {
	info := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// driveKeyed makes b.N always-granted keyed calls on p from callers
// goroutines, each taking the next of keys in a stride, between
// b.ResetTimer and b.StopTimer.
func driveKeyed(ctx context.Context, b *testing.B, p *redlimit.Policy, keys []string, callers int) {
	var next, left atomic.Int64
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				k := keys[next.Add(7919)%int64(len(keys))]
				if r, err := p.Key(k).TryAcquire(ctx, 1); err != nil || !r.Allowed {
					b.Error(r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}
