package memstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		return memstore.New(memstore.WithTimeSource(clk))
	}, storetest.Full())
}

// TestExpireTakesOverallState: when a limiter's TTL passes its config and
// Overall state go, as in Redis (one hash holds both): a client that still
// knows the config restores it afresh.
func TestExpireTakesOverallState(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l, _ := redlimit.New(memstore.New(memstore.WithTimeSource(clk)), "ttl", redlimit.WithClock(clk))
	if err := l.SetRate(ctx, redlimit.PerInterval(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("first grant: %+v, %v", r, err)
	}
	if ok, err := l.Expire(ctx, 20*time.Millisecond); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	if r, err := l.TryAcquire(ctx, 1); err != nil || r.Allowed {
		t.Fatalf("before the TTL: %+v, %v; want a refusal", r, err)
	}
	clk.Advance(20 * time.Millisecond)
	if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("after the TTL: %+v, %v; want a grant from a fresh state", r, err)
	}
}

// TestConfigAsGiven: configs passed as a caller wrote them (not
// normalized), alternating between names, are each answered under their
// own normalized form, however the store remembers the last ones.
func TestConfigAsGiven(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithTimeSource(clock.NewFake(time.Unix(1_700_000_000, 0))))
	given := []redlimit.Config{
		{Algorithm: redlimit.TokenBucket, Rate: 10, Interval: time.Second},
		{Algorithm: redlimit.TokenBucket, Rate: 20, Interval: time.Second},
		{Rate: 5, Interval: time.Second},
	}
	for round := range 3 {
		for i, c := range given {
			want, err := c.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			key := redlimit.Key{Name: "given-" + string(rune('a'+i))}
			d, err := s.Acquire(ctx, key, c, 1, 0)
			if err != nil || !d.Granted {
				t.Fatalf("round %d, config %d: %+v, %v", round, i, d, err)
			}
			got := d.Config
			got.Epoch = 0
			if got != want || d.Remaining != want.Rate-int64(round)-1 {
				t.Fatalf("round %d, config %d: answered under %+v with %d left; want %+v with %d", round, i, d.Config, d.Remaining, want, want.Rate-int64(round)-1)
			}
		}
	}
}

// TestBoundCallBehindState: a Limiter's call that read the store's clock
// before another call decided at a later instant (under contention, the
// common case) decides at the state's instant, exactly as the store's own
// Acquire does: the same grants, remaining permits, instants and waits
// whichever path answers, whatever order the instants come in.
func TestBoundCallBehindState(t *testing.T) {
	ctx := context.Background()
	base := time.Unix(1_700_000_000, 0)
	// Offsets of each call's clock reading from base, going back at times
	// (as a call that read the clock first but took the lock last), within
	// and across milliseconds (the sliding log's unit).
	steps := []struct {
		at time.Duration
		n  int64
	}{
		{0, 1}, {100 * time.Microsecond, 1}, {50 * time.Microsecond, 1}, {50 * time.Microsecond, 2},
		{2 * time.Millisecond, 1}, {1500 * time.Microsecond, 1}, {time.Millisecond, 3},
		{200 * time.Millisecond, 2}, {199 * time.Millisecond, 1}, {150 * time.Millisecond, 1},
		{time.Second, 4}, {999 * time.Millisecond, 1}, {998 * time.Millisecond, 2}, {1001 * time.Millisecond, 1},
	}
	for _, alg := range []redlimit.Algorithm{redlimit.TokenBucket, redlimit.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			cfg := redlimit.PerInterval(6, time.Second).WithAlgorithm(alg)
			bclk, sclk := clock.NewFake(base), clock.NewFake(base)
			bound, err := redlimit.New(memstore.New(memstore.WithTimeSource(bclk)), "behind", redlimit.WithConfig(cfg), redlimit.WithClock(bclk))
			if err != nil {
				t.Fatal(err)
			}
			s := memstore.New(memstore.WithTimeSource(sclk))
			stored, _, err := s.SetConfig(ctx, "behind", cfg, redlimit.SetIfAbsent)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range steps {
				bclk.Set(base.Add(st.at))
				sclk.Set(base.Add(st.at))
				r, err := bound.TryAcquire(ctx, st.n)
				if err != nil {
					t.Fatal(err)
				}
				d, err := s.Acquire(ctx, redlimit.Key{Name: "behind"}, stored, st.n, 0)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed != d.Granted || r.Remaining != d.Remaining || !r.At.Equal(d.At) || r.RetryAfter != d.Wait {
					t.Fatalf("step %d (%v, %d): bound Limiter %+v; store's Acquire %+v", i, st.at, st.n, r, d)
				}
			}
		})
	}
}

// TestContendedGrantsExact: Limiters calling at once on one limiter (the
// lock taken by spinning or by waiting) are granted exactly the limit
// between them, and each hands back exactly what it was granted: no grant
// is lost or made twice, and the held records match the store's.
func TestContendedGrantsExact(t *testing.T) {
	const limit, callers = 600, 8
	ctx := context.Background()
	for _, alg := range []redlimit.Algorithm{redlimit.TokenBucket, redlimit.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0)) // frozen: no refill
			s := memstore.New(memstore.WithTimeSource(clk))
			cfg := redlimit.PerInterval(limit, time.Minute).WithAlgorithm(alg)
			ls := make([]*redlimit.Limiter, callers)
			for i := range ls {
				var err error
				if ls[i], err = redlimit.New(s, "contended", redlimit.WithConfig(cfg), redlimit.WithClock(clk)); err != nil {
					t.Fatal(err)
				}
			}
			granted := make([]int64, callers)
			var wg sync.WaitGroup
			for i, l := range ls {
				// Two goroutines per Limiter: its held record is
				// shared too.
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range limit / callers {
							r, err := l.TryAcquire(ctx, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								atomic.AddInt64(&granted[i], 1)
							}
						}
					}()
				}
			}
			wg.Wait()
			var sum int64
			for _, g := range granted {
				sum += g
			}
			if sum != limit {
				t.Fatalf("granted %d in all; want exactly %d", sum, limit)
			}
			for i, l := range ls {
				if got, err := l.Release(ctx, limit); err != nil || got != granted[i] {
					t.Fatalf("Limiter %d: Release = %d, %v; want %d, the permits it was granted", i, got, err, granted[i])
				}
			}
			if n, err := ls[0].AvailablePermits(ctx); err != nil || n != limit {
				t.Fatalf("after every Release: %d available, %v; want %d", n, err, limit)
			}
		})
	}
}
