package refusalcache_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
	"github.com/redlimit/redlimit/storetest"
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

// BenchmarkKeyEntryMemory reports the heap a keyed refusal holds in the
// cache (B/entry): b.N keys of a policy of two limits refused once each.
func BenchmarkKeyEntryMemory(b *testing.B) {
	clk := clock.NewFake(storetest.T0)
	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{Clock: clk, MaxKeyEntries: max(b.N, 1)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	known, _, err := cache.SetPolicy(ctx, "api", redlimit.PolicyConfig{Limits: []redlimit.Config{redlimit.PerSecond(1), redlimit.PerInterval(1000, time.Hour)}}, redlimit.SetResetState)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]redlimit.PolicyKey, b.N)
	for i := range keys {
		keys[i] = redlimit.PolicyKey{Policy: "api", Key: "user-" + strconv.Itoa(i)}
		if _, err := cache.AcquireKey(ctx, keys[i], known, 1, 0); err != nil {
			b.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range keys {
		if d, err := cache.AcquireKey(ctx, keys[i], known, 1, 0); err != nil || d.Granted {
			b.Fatalf("%+v %v", d, err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := cache.Stats().KeyEntries; n != int64(b.N) {
		b.Fatalf("%d entries for %d refused keys", n, b.N)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "B/entry")
	runtime.KeepAlive(keys)
}
