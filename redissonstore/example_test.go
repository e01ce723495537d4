package redissonstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redissonstore"
)

// A Go service sharing "myRateLimiter" with Java services that call
// redisson.getRateLimiter("myRateLimiter"): the same keys, the same
// encodings, one limit. The client is a safe one, as for redisstore: no
// retries, deadlines kept. (redisAddr is the redis-server the package's
// tests start; yours is "host:port".)
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redissonstore.New(rdb, redissonstore.WithLayout(redissonstore.Current)) // the layout of the Java side's Redisson version
	if err != nil {
		panic(err)
	}
	l, _ := redlimit.New(store, "myRateLimiter")
	// Java: rateLimiter.trySetRate(RateType.OVERALL, 2, 1, RateIntervalUnit.MINUTES)
	if _, err := l.TrySetRate(ctx, redlimit.PerMinute(2)); err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		r, err := l.TryAcquire(ctx, 1) // Java: rateLimiter.tryAcquire(1)
		fmt.Println(r.Allowed, err)
	}
	keys := redissonstore.KeysOf("myRateLimiter")
	fmt.Println(keys.Config, keys.Value, keys.Permits)
	fmt.Println(rdb.HGet(ctx, keys.Config, "rate").Val(), rdb.ZCard(ctx, keys.Permits).Val()) // what Java reads
	if _, err := l.Delete(ctx); err != nil {
		panic(err)
	}
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
	// myRateLimiter {myRateLimiter}:value {myRateLimiter}:permits
	// 2 2
}
