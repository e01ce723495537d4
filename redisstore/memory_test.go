package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// bytesOf is what Redis says the store's keys use (MEMORY USAGE, summed).
func bytesOf(t *testing.T, s *redisstore.Store) (int64, int) {
	ctx := context.Background()
	keys, err := s.Client().Keys(ctx, s.Prefix()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, k := range keys {
		sum += s.Client().MemoryUsage(ctx, k, 0).Val()
	}
	return sum, len(keys)
}

// TestMemoryPerLimiter measures the bytes one busy limiter holds in Redis
// under each algorithm, and the sliding log of 1,000,000 per minute under
// full load, where Redisson holds one sorted-set member per grant.
func TestMemoryPerLimiter(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, c := range []redlimit.Config{
		redlimit.PerSecond(100), redlimit.PerSecond(100).WithAlgorithm(redlimit.FixedWindow),
		redlimit.PerSecond(100).WithAlgorithm(redlimit.SlidingCounter), redlimit.PerSecond(100).WithAlgorithm(redlimit.TokenBucket),
		redlimit.PerSecond(100).WithAlgorithm(redlimit.LeakyBucket),
		redlimit.PerSecond(100).WithAlgorithm(redlimit.TokenBucket).WithMode(redlimit.PerClient),
	} {
		alg := string(c.Algorithm)
		if c.Mode == redlimit.PerClient {
			alg += ", one PerClient client"
		}
		clk := clock.NewFake(storetest.T0)
		s := newStore(t, rdb, redisstore.WithTimeSource(clk))
		l, _ := redlimit.New(s, "mem", redlimit.WithClock(clk))
		if err := l.SetRate(ctx, c); err != nil {
			t.Fatal(err)
		}
		// 100 grants over a second, one every 10 ms.
		for i := 0; i < 100; i++ {
			if _, err := l.TryAcquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			clk.Advance(10 * time.Millisecond)
		}
		bytes, keys := bytesOf(t, s)
		t.Logf("FIGURES | %s | 100 per 1s, 100 grants | %d keys | %d bytes", alg, keys, bytes)
	}
	// 1,000,000 per minute, every millisecond of the window used.
	clk := clock.NewFake(storetest.T0)
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	l, _ := redlimit.New(s, "million", redlimit.WithClock(clk))
	if err := l.SetRate(ctx, redlimit.PerMinute(1_000_000)); err != nil {
		t.Fatal(err)
	}
	const perMS = 16 // 16 x 60,000 ms = 960,000 grants
	for ms := 0; ms < 60_000; ms++ {
		if r, err := l.TryAcquire(ctx, perMS); err != nil || !r.Allowed {
			t.Fatalf("ms %d: %+v, %v", ms, r, err)
		}
		clk.Advance(time.Millisecond)
	}
	bytes, keys := bytesOf(t, s)
	t.Logf("FIGURES | sliding-log | 1,000,000 per 1m, 960,000 permits over 60,000 ms | %d keys | %d bytes (%.1f MB)", keys, bytes, float64(bytes)/1e6)
	if bytes > 2_000_000 {
		t.Errorf("the full log takes %d bytes; the target is under 2 MB (1/50 of Redisson's ~100 MB)", bytes)
	}
}
