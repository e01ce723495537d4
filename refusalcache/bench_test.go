package refusalcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
)

// BenchmarkRefused: TryAcquire on an exhausted limiter, 64 callers, on a
// memory store alone and with the cache in front of it.
func BenchmarkRefused(b *testing.B) {
	for _, mode := range []string{"memstore", "cached"} {
		b.Run(mode, func(b *testing.B) {
			var store redlimit.Store = memstore.New()
			if mode == "cached" {
				c, err := refusalcache.New(store, refusalcache.Settings{})
				if err != nil {
					b.Fatal(err)
				}
				store = c
			}
			l, _ := redlimit.New(store, "bench", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour).WithAlgorithm(redlimit.TokenBucket)))
			ctx := context.Background()
			l.TryAcquire(ctx, 1)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r, err := l.TryAcquire(ctx, 1); err != nil || r.Allowed {
						b.Errorf("%+v, %v", r, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkKeyRefused: TryAcquire of an exhausted key of a policy of two
// limits, 64 callers, on a memory store alone and with the cache in front
// of it.
func BenchmarkKeyRefused(b *testing.B) {
	for _, mode := range []string{"memstore", "cached"} {
		b.Run(mode, func(b *testing.B) {
			var store redlimit.PolicyStore = memstore.New()
			if mode == "cached" {
				c, err := refusalcache.New(memstore.New(), refusalcache.Settings{})
				if err != nil {
					b.Fatal(err)
				}
				store = c
			}
			p, err := redlimit.NewPolicy(store, "bench", []redlimit.Config{
				redlimit.PerInterval(1, time.Hour).WithAlgorithm(redlimit.TokenBucket), redlimit.PerInterval(1000, 24*time.Hour)})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			k := p.Key("user-1")
			k.TryAcquire(ctx, 1)
			k.TryAcquire(ctx, 1) // the refusal cached
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if r, err := k.TryAcquire(ctx, 1); err != nil || r.Allowed {
						b.Errorf("%+v, %v", r, err)
						return
					}
				}
			})
		})
	}
}
