package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

// BenchmarkTryAcquire: one limiter, every algorithm, one caller and all
// GOMAXPROCS callers.
func BenchmarkTryAcquire(b *testing.B) {
	ctx := context.Background()
	for _, alg := range redlimit.Algorithms {
		cfg := redlimit.PerInterval(1<<40, time.Second).WithAlgorithm(alg)
		if alg != redlimit.SlidingLog && alg != redlimit.FixedWindow {
			cfg = redlimit.PerInterval(1<<30, time.Second).WithAlgorithm(alg)
		}
		l, err := redlimit.New(memstore.New(), "bench", redlimit.WithConfig(cfg))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(alg), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.TryAcquire(ctx, 1)
			}
		})
		b.Run(string(alg)+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.TryAcquire(ctx, 1)
				}
			})
		})
	}
}

// BenchmarkManyKeys: distinct limiters, as per-user limits would be.
func BenchmarkManyKeys(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	cfg := redlimit.TokenBucketConfig(10, time.Second, 10)
	ls := make([]*redlimit.Limiter, 10000)
	for i := range ls {
		ls[i], _ = redlimit.New(s, fmt.Sprint("user-", i), redlimit.WithConfig(cfg))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			ls[i%len(ls)].TryAcquire(ctx, 1)
			i += 7
		}
	})
}
