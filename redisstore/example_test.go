package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

// A store on a safe client: MaxRetries -1, so that no command is sent
// twice (a retried script could grant twice), and ContextTimeoutEnabled, so
// that the client keeps to every call's deadline. Every process using the
// same Redis and name shares the limit. (redisAddr is the redis-server the
// package's tests start; yours is "host:port".)
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		panic(err)
	}
	cfg := redlimit.PerMinute(2)
	a, _ := redlimit.New(store, "example:new", redlimit.WithConfig(cfg)) // say, in one process
	b, _ := redlimit.New(store, "example:new", redlimit.WithConfig(cfg)) // and in another
	for _, l := range []*redlimit.Limiter{a, b, a} {
		r, err := l.TryAcquire(ctx, 1)
		fmt.Println(r.Allowed, r.Remaining, err)
	}
	if _, err := a.Delete(ctx); err != nil { // the limiter is gone for every client
		panic(err)
	}
	// Output:
	// true 1 <nil>
	// true 0 <nil>
	// false 0 <nil>
}

// OpenURL makes a safe client (no retries, deadlines kept) from a URL: one
// server, Sentinel (redis+sentinel://) or Cluster (redis+cluster://).
func ExampleOpenURL() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb, err := redisstore.OpenURL("redis://" + redisAddr + "/0")
	if err != nil {
		panic(err)
	}
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		panic(err)
	}
	l, _ := redlimit.New(store, "example:url")
	set, err := l.TrySetRate(ctx, redlimit.TokenBucketConfig(10, time.Second, 20))
	fmt.Println(set, err)
	cfg, err := l.Config(ctx)
	fmt.Println(cfg.Rate, cfg.Interval, cfg.Burst, cfg.Algorithm, err)
	_, _ = l.Delete(ctx)
	// Output:
	// true <nil>
	// 10 1s 20 token-bucket <nil>
}
