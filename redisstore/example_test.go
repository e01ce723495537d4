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

// A keyed policy on Redis: one rule, stored once, applied to any number of
// users, each with a state that expires on its own. Two limits at once: a
// request is granted only if both grant it. Every process that uses the
// policy sees a SetLimits within its policy max age at most (about one
// round trip when Redis pub/sub works). Close ends the store's
// subscription to policy changes.
func ExampleWithPolicyMaxAge() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithPolicyMaxAge(500*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	api, err := redlimit.NewPolicy(store, "example:api", []redlimit.Config{
		redlimit.PerSecond(2),                 // a burst of 2 per second
		redlimit.PerInterval(1000, time.Hour), // and 1000 per hour
	})
	if err != nil {
		panic(err)
	}
	for _, user := range []string{"alice", "alice", "alice", "bob"} {
		r, err := api.Key(user).TryAcquire(ctx, 1)
		fmt.Println(user, r.Allowed, r.Remaining, err)
	}
	_, _ = api.Delete(ctx)
	// Output:
	// alice true 1 <nil>
	// alice true 0 <nil>
	// alice false 0 <nil>
	// bob true 1 <nil>
}
