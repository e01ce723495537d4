package memstore_test

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
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

// BenchmarkContended: 8, 64 and 256 callers on one limiter (run it with
// -cpu 2: 4, 32 and 128 per GOMAXPROCS, the bench module's one-limiter
// cells), memstore's token bucket and sliding log and x/time/rate side by
// side: how long the lock is held, and how often a caller parks on it
// (-mutexprofile, sample index contentions), decide here. timed: each
// call timed by the clock around it, as the bench module's callers time
// theirs; the gaps between a caller's calls change who wins the lock.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	tb, err := redlimit.New(memstore.New(), "contended", redlimit.WithConfig(redlimit.TokenBucketConfig(1<<30, time.Second, 1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	sl, err := redlimit.New(memstore.New(), "contended", redlimit.WithConfig(redlimit.PerInterval(1<<40, time.Second).WithAlgorithm(redlimit.SlidingLog)))
	if err != nil {
		b.Fatal(err)
	}
	x := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
	for _, sys := range []struct {
		name string
		call func()
	}{
		{"memstore-tb", func() { tb.TryAcquire(ctx, 1) }},
		{"memstore-sl", func() { sl.TryAcquire(ctx, 1) }},
		{"x-time-rate", func() { x.Allow() }},
	} {
		for _, per := range []int{4, 32, 128} {
			for _, timed := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dx", sys.name, per)
				if timed {
					name += "/timed"
				}
				b.Run(name, func(b *testing.B) {
					b.ReportAllocs()
					b.SetParallelism(per)
					defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(1))
					cpu, parked := processCPU(), mutexContentions()
					b.ResetTimer() // the profile's reading allocates
					b.RunParallel(func(pb *testing.PB) {
						var took time.Duration
						for pb.Next() {
							if !timed {
								sys.call()
								continue
							}
							t0 := time.Now()
							sys.call()
							took += time.Since(t0)
						}
						timedSink.Add(int64(took))
					})
					b.StopTimer()
					// The process's CPU time per call: on a busy machine,
					// steadier than ns/op (the other processes' share).
					b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
					// How often a caller found a lock taken and waited
					// for it, parked (every mutex of the process).
					b.ReportMetric(float64(mutexContentions()-parked)/float64(b.N), "parks/op")
				})
			}
		}
	}
}

// timedSink keeps BenchmarkContended's timing of each call from being
// left out by the compiler.
var timedSink atomic.Int64

// mutexContentions is how many times, so far, a goroutine waited for a
// sync.Mutex held by another (the mutex profile's count, once
// runtime.SetMutexProfileFraction(1) is set).
func mutexContentions() int64 {
	n, _ := runtime.MutexProfile(nil)
	recs := make([]runtime.BlockProfileRecord, n+64)
	n, _ = runtime.MutexProfile(recs)
	var sum int64
	for _, r := range recs[:n] {
		sum += r.Count
	}
	return sum
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

// benchKeys is the number of limiters of BenchmarkKeys, as in the bench
// module's keys workloads.
const benchKeys = 100_000

// keyOrder draws n limiter indexes among keys, uniformly or by Zipf's law
// (s 1.1, as the bench module's keys-zipf), with a fixed seed.
func keyOrder(keys int, zipf bool) []int32 {
	r := mathrand.New(mathrand.NewPCG(20261123, 1))
	out := make([]int32, 1<<20)
	z := mathrand.NewZipf(r, 1.1, 1, uint64(keys-1))
	for i := range out {
		if zipf {
			out[i] = int32(z.Uint64())
		} else {
			out[i] = int32(r.IntN(keys))
		}
	}
	return out
}

// BenchmarkKeys mirrors the bench module's in-memory keys cells: 100,000
// limiters (one Limiter each, knowing its config), each used once before
// the measurement, drawn uniformly or by Zipf's law, by one caller and by
// 32 x GOMAXPROCS; x/time/rate beside it as a user would keep one limiter
// per key (a sync.Map). The steady state allocates nothing.
func BenchmarkKeys(b *testing.B) {
	ctx := context.Background()
	for _, dist := range []string{"uniform", "zipf"} {
		order := keyOrder(benchKeys, dist == "zipf")
		for _, alg := range []redlimit.Algorithm{redlimit.TokenBucket, redlimit.SlidingLog} {
			cfg := redlimit.PerInterval(1<<30, time.Second).WithAlgorithm(alg)
			s := memstore.New()
			ls := make([]*redlimit.Limiter, benchKeys)
			for i := range ls {
				var err error
				if ls[i], err = redlimit.New(s, "bench-"+strconv.Itoa(i), redlimit.WithConfig(cfg)); err != nil {
					b.Fatal(err)
				}
				if _, err := ls[i].TryAcquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
			benchOrder(b, dist+"/"+string(alg), order, func(i int32) { ls[i].TryAcquire(ctx, 1) })
		}
		var m sync.Map // name -> *rate.Limiter
		names := make([]string, benchKeys)
		for i := range names {
			names[i] = "bench-" + strconv.Itoa(i)
			m.Store(names[i], rate.NewLimiter(rate.Limit(1<<30), 1<<30))
		}
		benchOrder(b, dist+"/x-time-rate", order, func(i int32) {
			v, ok := m.Load(names[i])
			if !ok {
				v, _ = m.LoadOrStore(names[i], rate.NewLimiter(rate.Limit(1<<30), 1<<30))
			}
			v.(*rate.Limiter).Allow()
		})
	}
}

// benchOrder runs call over order, by one caller and in parallel (each
// caller from its own offset).
func benchOrder(b *testing.B, name string, order []int32, call func(int32)) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			call(order[k&(len(order)-1)])
			k++
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			k := int(next.Add(7919))
			for pb.Next() {
				call(order[k&(len(order)-1)])
				k++
			}
		})
	})
}
