package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkPolicyMillionKeys: the memory of a million busy token-bucket
// keys of one policy (each owing tokens), per key, keys included ("user:"
// and a number); and what is left of it once they are idle and swept
// (idle-B/key), the sweeps paid for by 10,000 new keys. Run it with
// -benchtime=1x.
func BenchmarkPolicyMillionKeys(b *testing.B) {
	const n, fresh = 1_000_000, 10_000
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for b.Loop() {
		before := heapInUse()
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		s := memstore.New(memstore.WithTimeSource(clk))
		p, err := redlimit.NewPolicy(s, "users", []redlimit.Config{redlimit.TokenBucketConfig(10, time.Minute, 10)}, redlimit.WithClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if r, err := p.Key(k).TryAcquire(ctx, 1); err != nil || !r.Allowed {
				b.Fatalf("key %s: %+v, %v", k, r, err)
			}
		}
		busy := heapInUse()
		if got := s.PolicyKeys("users"); got != n {
			b.Fatalf("%d keys held, want %d", got, n)
		}
		clk.Advance(time.Minute)
		for i := range fresh {
			p.Key("new:"+strconv.Itoa(i)).TryAcquire(ctx, 1)
		}
		idle := heapInUse()
		if got := s.PolicyKeys("users"); got != fresh {
			b.Fatalf("%d keys held once idle, want %d", got, fresh)
		}
		b.ReportMetric(float64(busy-before)/n, "B/key")
		b.ReportMetric(float64(idle-before)/n, "idle-B/key")
		runtime.KeepAlive(s)
	}
	runtime.KeepAlive(keys)
}

// BenchmarkPolicyKeyed: a keyed TryAcquire on one token-bucket policy,
// on one key and spread over 100,000, through the store (AcquireKey) and
// through a Policy. Every call is granted and the keys stay busy (tokens
// owed), as a million users' would.
func BenchmarkPolicyKeyed(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []int{1, 100_000} {
		// One key: refilled faster than asked. Many: each asked for more
		// than its refill, from a burst that lasts the run.
		limit := redlimit.TokenBucketConfig(1<<27, time.Minute, 1<<27)
		if keys > 1 {
			limit = redlimit.TokenBucketConfig(60, time.Minute, 10_000)
		}
		names := make([]string, keys)
		for i := range names {
			names[i] = "user:" + strconv.Itoa(i)
		}
		s := memstore.New()
		cfg := []redlimit.Config{limit}
		p, err := redlimit.NewPolicy(s, "bench", cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.SetLimits(ctx, cfg); err != nil {
			b.Fatal(err)
		}
		known, err := s.Policy(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range names {
			p.Key(k).TryAcquire(ctx, 1)
		}
		b.Run(strconv.Itoa(keys)+"/AcquireKey", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if d, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "bench", Key: names[i]}, known, 1, 0); err != nil || !d.Granted {
					b.Fatal(d, err)
				}
				if i++; i == keys {
					i = 0
				}
			}
		})
		b.Run(strconv.Itoa(keys)+"/TryAcquire", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r, err := p.Key(names[i]).TryAcquire(ctx, 1); err != nil || !r.Allowed {
					b.Fatal(r, err)
				}
				if i++; i == keys {
					i = 0
				}
			}
		})
	}
}

// BenchmarkPolicyKeysParallel mirrors the bench module's keyed-policy
// cells (memstore policy token-bucket, keys-uniform and keys-zipf): one
// token-bucket policy far above the load over 100,000 keys, each used once
// before the measurement, Policy.Key(key).TryAcquire per call, by 1, 4 and
// 32 callers per GOMAXPROCS (8 and 64 callers at GOMAXPROCS 2). It reports
// the process's CPU time per call and how often a caller parked on a lock.
func BenchmarkPolicyKeysParallel(b *testing.B) {
	ctx := context.Background()
	names := make([]string, benchKeys)
	for i := range names {
		names[i] = "bench-" + strconv.Itoa(i)
	}
	for _, dist := range []string{"uniform", "zipf"} {
		order := keyOrder(benchKeys, dist == "zipf")
		p, err := redlimit.NewPolicy(memstore.New(), "p", []redlimit.Config{{Algorithm: redlimit.TokenBucket, Rate: 1 << 30, Interval: time.Second}})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range names {
			if r, err := p.Key(k).TryAcquire(ctx, 1); err != nil || !r.Allowed {
				b.Fatal(r, err)
			}
		}
		for _, per := range []int{1, 4, 32} {
			b.Run(fmt.Sprintf("%s/%dx", dist, per), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(per)
				defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(1))
				var next atomic.Int64
				cpu, parked := processCPU(), mutexContentions()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					k := int(next.Add(7919))
					for pb.Next() {
						if r, err := p.Key(names[order[k&(len(order)-1)]]).TryAcquire(ctx, 1); err != nil || !r.Allowed {
							b.Error(r, err)
							return
						}
						k++
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(mutexContentions()-parked)/float64(b.N), "parks/op")
			})
		}
	}
}
