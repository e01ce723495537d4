package main

import (
	"context"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestKeyMemory: a busy token-bucket key of a keyed policy takes no more
// Redis memory than redis_rate's key for the same user, both measured
// alike in the same run (MEMORY USAGE of the key right after a call that
// left tokens owed), and the key is gone once its state expired.
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
	p, err := redlimit.NewPolicy(s, "api", []redlimit.Config{redlimit.TokenBucketConfig(10, time.Second, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Key(user).TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	keys, err := rdb.Keys(ctx, redisstore.DefaultPrefix+"{api%:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys of the user: %q, %v", keys, err)
	}
	ours := usage(keys[0])
	t.Logf("MEMORY USAGE of a busy token-bucket key: redlimit %d B (%s = %q), redis_rate %d B (rate:%s)",
		ours, keys[0], rdb.Get(ctx, keys[0]).Val(), peerBytes, user)
	if ours > peerBytes {
		t.Fatalf("redlimit's key takes %d B, redis_rate's %d B", ours, peerBytes)
	}
	if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 0 || ttl > 100*time.Millisecond {
		t.Fatalf("TTL %v; want at most the 100ms one token takes to come back", ttl)
	}
	// Once the bucket is full again the key is gone: polled, as Redis
	// expires it by its own clock.
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Exists(ctx, keys[0]).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the key outlived its state by 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
