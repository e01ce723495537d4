package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
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
	// Refusals of a full leaky bucket: what a TryAcquire on an exhausted
	// limiter costs.
	l, err := redlimit.New(memstore.New(), "full", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour).WithAlgorithm(redlimit.LeakyBucket)))
	if err != nil {
		b.Fatal(err)
	}
	for r, _ := l.TryAcquire(ctx, 1); r.Allowed; r, _ = l.TryAcquire(ctx, 1) {
	}
	b.Run(string(redlimit.LeakyBucket)+"/refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.TryAcquire(ctx, 1)
		}
	})
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

// BenchmarkXTimeRate is the yardstick for BenchmarkTryAcquire's one-caller
// figures: golang.org/x/time/rate's AllowN on one limiter that never refuses.
func BenchmarkXTimeRate(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
	b.ReportAllocs()
	for b.Loop() {
		l.AllowN(time.Now(), 1)
	}
}

// BenchmarkContended: 64 callers on one limiter, memstore's token bucket and
// x/time/rate side by side (lock hold time decides here).
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	l, err := redlimit.New(memstore.New(), "contended", redlimit.WithConfig(redlimit.TokenBucketConfig(1<<30, time.Second, 1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	x := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
	for _, sys := range []struct {
		name string
		call func()
	}{
		{"memstore", func() { l.TryAcquire(ctx, 1) }},
		{"x-time-rate", func() { x.AllowN(time.Now(), 1) }},
	} {
		b.Run(sys.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32) // x GOMAXPROCS (2) = 64 callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					sys.call()
				}
			})
		})
	}
}

// BenchmarkMillionKeys measures the heap per limiter with a million distinct
// names (per-user token buckets that know their config), while their state
// is live and again once it is idle and the store had calls to sweep it in.
// Run it with -benchtime=1x: one run is a million limiters.
func BenchmarkMillionKeys(b *testing.B) {
	const keys = 1_000_000
	ctx := context.Background()
	cfg := redlimit.TokenBucketConfig(10, time.Second, 10)
	for b.Loop() {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		s := memstore.New(memstore.WithTimeSource(clk))
		base := heap()
		for i := range keys {
			l, err := redlimit.New(s, "user-"+strconv.Itoa(i), redlimit.WithConfig(cfg), redlimit.WithClientID("c"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.TryAcquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
		live := heap()
		// Idle: every bucket has refilled. Calls on other names give the
		// store the chance to sweep (it has no goroutine of its own).
		clk.Advance(10 * time.Second)
		for i := range keys / 100 {
			l, _ := redlimit.New(s, "other-"+strconv.Itoa(i), redlimit.WithConfig(cfg), redlimit.WithClientID("c"))
			l.TryAcquire(ctx, 1)
		}
		idle := heap()
		b.ReportMetric(float64(live-base)/keys, "B/limiter")
		b.ReportMetric(float64(idle-base)/(keys+keys/100), "B/idle-limiter")
		runtime.KeepAlive(s)
	}
}

// heap is the live heap after a collection.
func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
