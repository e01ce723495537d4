package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestKeyMemory: a busy key of a keyed policy of one token bucket, leaky
// bucket, fixed window, sliding counter or sliding log (its log inline, no
// list beside it) takes no more Redis memory than
// redis_rate's key for the same user, both measured alike in the same run
// (MEMORY USAGE of the key right after a call that left permits counted;
// a sliding counter's also with the window before counted, a sliding
// log's also with two entries), and the key
// is gone once its state expired.
func TestKeyMemory(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	usage := func(key string) int64 {
		t.Helper()
		n, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	const user = "user:1234567"

	peer := redis_rate.NewLimiter(rdb)
	if _, err := peer.Allow(ctx, user, redis_rate.PerSecond(10)); err != nil {
		t.Fatal(err)
	}
	peerBytes := usage("rate:" + user)

	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	// A key's state is its policy's name, so the names are of one length.
	for _, tc := range []struct {
		policy string
		limit  redlimit.Config
		ttl    time.Duration // the most the key lives after the call
	}{
		{"tbk", redlimit.TokenBucketConfig(10, time.Second, 10), 100 * time.Millisecond},
		{"lbk", redlimit.LeakyBucketConfig(10, time.Second, 10), 100 * time.Millisecond},
		{"fwk", redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow), time.Second},
		{"sck", redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingCounter), 2 * time.Second},
		{"slk", redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingLog), time.Second},
	} {
		p, err := redlimit.NewPolicy(s, tc.policy, []redlimit.Config{tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := p.Key(user).TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		key := redisstore.DefaultPrefix + "{" + tc.policy + "%:" + user + "}"
		ours := usage(key)
		t.Logf("MEMORY USAGE of a busy %s key: redlimit %d B (%s = %q), redis_rate %d B (rate:%s)",
			tc.limit.Algorithm, ours, key, rdb.Get(ctx, key).Val(), peerBytes, user)
		if ours > peerBytes {
			t.Errorf("redlimit's %s key takes %d B, redis_rate's %d B", tc.limit.Algorithm, ours, peerBytes)
		}
		if n := rdb.Exists(ctx, key+"1").Val(); n != 0 {
			t.Errorf("%s: a list beside the state", tc.limit.Algorithm)
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > tc.ttl {
			t.Fatalf("%s: TTL %v; want at most %v, when its state stops counting", tc.limit.Algorithm, ttl, tc.ttl)
		}
		// Once the state stops counting the key is gone: polled, as
		// Redis expires it by its own clock.
		deadline := time.Now().Add(10 * time.Second)
		for rdb.Exists(ctx, key).Val() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the key outlived its state by 10s", tc.limit.Algorithm)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A sliding counter's key with two windows counted: the store's clock
	// moved on a window between two calls. Its prefix is as long as the
	// default one, its policy's name as long as the others.
	clk := clock.NewFake(time.UnixMicro(time.Now().UnixMicro() / 1e6 * 1e6))
	fs, err := redisstore.New(rdb, redisstore.WithPrefix("redlimiz:"), redisstore.WithTimeSource(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fs.Close() }()
	p, err := redlimit.NewPolicy(fs, "sc2", []redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingCounter)})
	if err != nil {
		t.Fatal(err)
	}
	// A sliding log's of two entries, 100 ms apart.
	l, err := redlimit.NewPolicy(fs, "sl2", []redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingLog)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r, err := p.Key(user).TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		if r, err := l.Key(user).TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		clk.Advance(time.Second / 10)
		if r, err := l.Key(user).TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		clk.Advance(time.Second * 9 / 10)
	}
	for _, k := range []struct{ name, what string }{{"sc2", "sliding-counter key, two windows"}, {"sl2", "sliding-log key, two entries"}} {
		key := "redlimiz:{" + k.name + "%:" + user + "}"
		ours := usage(key)
		t.Logf("MEMORY USAGE of a busy %s: redlimit %d B (%q)", k.what, ours, rdb.Get(ctx, key).Val())
		if ours > peerBytes {
			t.Errorf("redlimit's %s takes %d B, redis_rate's %d B", k.what, ours, peerBytes)
		}
	}
	if n := rdb.Exists(ctx, "redlimiz:{sl2%:"+user+"}1").Val(); n != 0 {
		t.Error("a sliding log of two entries: a list beside the state")
	}
}
