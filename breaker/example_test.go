package breaker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/breaker"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// One breaker per Redis store, shared by every limiter on it; each limiter
// falls back to this process's share of its limit while Redis is down.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	rs, err := redisstore.New(rdb)
	if err != nil {
		panic(err)
	}
	store, err := breaker.New(rs, breaker.Settings{Failures: 5, CoolDown: time.Second})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	const instances = 4
	l, err := redlimit.New(store, "api", redlimit.WithConfig(redlimit.PerSecond(100)),
		redlimit.WithFallback(memstore.New(), 1.0/instances))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := l.TryAcquire(ctx, 1)
	fmt.Println(r.Allowed, r.Degraded, err, store.State())
}
