package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// Where a system keeps its limits.
const (
	onRedis  = "redis"
	inMemory = "memory"
)

// limit is a workload's limit: rate permits per interval (the token
// buckets' burst and the leaky bucket's queue are the rate too).
type limit struct {
	Rate     int64         `json:"rate"`
	Interval time.Duration `json:"-"`
}

func (l limit) String() string { return fmt.Sprintf("%d per %s", l.Rate, l.Interval) }

// target is one system prepared for one cell: n limiters, and how to ask
// limiter i for one permit.
type target struct {
	n    int
	call func(ctx context.Context, i int) (granted bool, err error)
	// redisKeys lists the Redis keys of limiter i (nil in memory).
	redisKeys func(i int) []string
	close     func()
}

// system is one rate limiter under test.
type system struct {
	Name         string `json:"name"`
	Store        string `json:"store"`  // onRedis or inMemory
	Family       string `json:"family"` // redlimit, redis_rate, redisson, memstore, x/time/rate
	Algorithm    string `json:"algorithm"`
	AutoPipeline bool   `json:"autopipeline,omitempty"`
	Note         string `json:"note,omitempty"`
	// prepare builds n limiters of limit l for callers concurrent callers.
	prepare func(ctx context.Context, e *env, l limit, n, callers int) (*target, error)
}

// systems lists every system, in the order of the table.
func systems() []*system {
	var out []*system
	for _, alg := range redlimit.Algorithms {
		for _, auto := range []bool{false, true} {
			s := &system{Name: "redlimit " + string(alg), Store: onRedis, Family: "redlimit", Algorithm: string(alg), AutoPipeline: auto}
			if auto {
				s.Name += " +autopipeline"
			}
			s.prepare = func(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
				return prepareRedlimitRedis(ctx, e, alg, auto, l, n, callers)
			}
			out = append(out, s)
		}
	}
	out = append(out,
		&system{Name: "redis_rate", Store: onRedis, Family: "redis_rate", Algorithm: "GCRA",
			Note: "github.com/go-redis/redis_rate/v10: Limiter.Allow, one EVALSHA per call", prepare: prepareRedisRate},
		&system{Name: "Redisson script", Store: onRedis, Family: "redisson", Algorithm: "sliding-log (ZSET)",
			Note: "Redisson's tryAcquire script from seed 001, driven as RedissonRateLimiter does (trySetRate once per limiter, then EVALSHA per call)", prepare: prepareRedisson},
		&system{Name: "memstore token-bucket", Store: inMemory, Family: "memstore", Algorithm: string(redlimit.TokenBucket),
			prepare: func(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
				return prepareMemstore(e, redlimit.TokenBucket, l, n)
			}},
		&system{Name: "memstore sliding-log", Store: inMemory, Family: "memstore", Algorithm: string(redlimit.SlidingLog),
			prepare: func(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
				return prepareMemstore(e, redlimit.SlidingLog, l, n)
			}},
		&system{Name: "x/time/rate", Store: inMemory, Family: "x/time/rate", Algorithm: "token-bucket",
			Note: "golang.org/x/time/rate: one *rate.Limiter; many keys: a map[string]*rate.Limiter under a sync.Mutex, filled on first use", prepare: prepareXRate},
	)
	return out
}

// env is what the systems share: the Redis to use and the names.
type env struct {
	base     *redis.Options // the Redis clients' options, PoolSize aside
	admin    *redis.Client  // INFO, MEMORY USAGE, clean-up
	own      bool           // the benchmark started the server: FLUSHALL is fine
	prefix   string         // every key the benchmark writes starts with it
	names    []string       // the limiters' names in the keys workload
	redisson *redissonScripts
	clientID string // the Redisson client's id (PER_CLIENT keys)
}

// client returns a Redis client for callers concurrent callers: a
// connection each (go-redis's default pool is 10 x GOMAXPROCS).
func (e *env) client(callers int) *redis.Client {
	o := *e.base
	o.PoolSize = max(callers, 10)
	return redis.NewClient(&o)
}

// name is limiter i's name among n.
func (e *env) name(i, n int) string {
	if n == 1 {
		return "one"
	}
	return e.names[i]
}

func prepareRedlimitRedis(ctx context.Context, e *env, alg redlimit.Algorithm, auto bool, l limit, n, callers int) (*target, error) {
	if n > 1 {
		if err := presetConfigs(ctx, e, alg, l, n); err != nil {
			return nil, err
		}
	}
	rdb := e.client(callers)
	opts := []redisstore.Option{redisstore.WithPrefix(e.prefix)}
	if auto {
		opts = append(opts, redisstore.WithAutoPipeline())
	}
	store, err := redisstore.New(rdb, opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	ls, err := newLimiters(store, alg, l, n, e)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &target{
		n: n,
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := ls[i].TryAcquire(ctx, 1)
			return r.Allowed, err
		},
		redisKeys: func(i int) []string {
			// redisstore's key layout: PREFIX{name} (config and Overall
			// state) and PREFIX{name}:log (the sliding log's list); the
			// names here need no escaping.
			base := e.prefix + "{" + e.name(i, n) + "}"
			return []string{base, base + ":log"}
		},
		close: func() { rdb.Close() },
	}, nil
}

// newLimiters makes n limiters of l under alg on store. Each passes its
// config along with every call (WithConfig), so the first call creates it.
func newLimiters(store redlimit.Store, alg redlimit.Algorithm, l limit, n int, e *env) ([]*redlimit.Limiter, error) {
	cfg := redlimit.Config{Algorithm: alg, Rate: l.Rate, Interval: l.Interval}
	ls := make([]*redlimit.Limiter, n)
	for i := range ls {
		var err error
		if ls[i], err = redlimit.New(store, e.name(i, n), redlimit.WithConfig(cfg)); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// presetConfigs stores the config of n limiters (TrySetRate), as Redisson's
// limiters get theirs before use: in the keys workload every limiter then
// exists, as it would in a service that has run a while (a config persists;
// the state expires once idle for an interval). Auto-pipelined, from many
// goroutines, outside the measurement.
func presetConfigs(ctx context.Context, e *env, alg redlimit.Algorithm, l limit, n int) error {
	rdb := e.client(64)
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithPrefix(e.prefix), redisstore.WithAutoPipeline())
	if err != nil {
		return err
	}
	cfg := redlimit.Config{Algorithm: alg, Rate: l.Rate, Interval: l.Interval}
	const workers = 256
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < n; i += workers {
				l, err := redlimit.New(store, e.name(i, n))
				if err == nil {
					_, err = l.TrySetRate(ctx, cfg)
				}
				if err != nil {
					errs <- fmt.Errorf("setting the config of limiter %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func prepareRedisRate(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
	rdb := e.client(callers)
	lim := redis_rate.NewLimiter(rdb)
	rl := redis_rate.Limit{Rate: int(l.Rate), Burst: int(l.Rate), Period: l.Interval}
	return &target{
		n: n,
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := lim.Allow(ctx, e.prefix+e.name(i, n), rl)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		},
		redisKeys: func(i int) []string { return []string{"rate:" + e.prefix + e.name(i, n)} },
		close:     func() { rdb.Close() },
	}, nil
}

func prepareRedisson(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
	if e.redisson == nil {
		return nil, errors.New("the Redisson script is not loaded")
	}
	rdb := e.client(callers)
	name := func(i int) string { return e.prefix + "redisson:" + e.name(i, n) }
	keys := make([][]string, n)
	for i := range keys {
		keys[i] = redissonKeys(name(i), e.clientID)
	}
	// trySetRate(OVERALL, rate, interval): once per limiter, before use, as
	// an application does; pipelined, outside the measurement.
	interval := l.Interval.Milliseconds()
	for lo := 0; lo < n; lo += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+1000, n); i++ {
				e.redisson.trySetRate.EvalSha(ctx, p, keys[i][:1], l.Rate, interval, 0)
			}
			return nil
		})
		if err != nil {
			rdb.Close()
			return nil, fmt.Errorf("trySetRate of the Redisson script: %w", err)
		}
	}
	script := e.redisson.tryAcquire
	return &target{
		n: n,
		call: func(ctx context.Context, i int) (bool, error) {
			// ARGV: permits, System.currentTimeMillis(),
			// ThreadLocalRandom.nextLong() (LongCodec: decimal text).
			return redissonDecision(script.EvalSha(ctx, rdb, keys[i], 1, time.Now().UnixMilli(), strconv.FormatInt(rand.Int64(), 10)))
		},
		redisKeys: func(i int) []string { return redissonOverallKeys(name(i)) },
		close:     func() { rdb.Close() },
	}, nil
}

func prepareMemstore(e *env, alg redlimit.Algorithm, l limit, n int) (*target, error) {
	ls, err := newLimiters(memstore.New(), alg, l, n, e)
	if err != nil {
		return nil, err
	}
	return &target{
		n: n,
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := ls[i].TryAcquire(ctx, 1)
			return r.Allowed, err
		},
		close: func() {},
	}, nil
}

func prepareXRate(ctx context.Context, e *env, l limit, n, callers int) (*target, error) {
	per := rate.Limit(float64(l.Rate) / l.Interval.Seconds())
	burst := int(l.Rate)
	if n == 1 {
		lim := rate.NewLimiter(per, burst)
		return &target{n: 1, call: func(context.Context, int) (bool, error) { return lim.Allow(), nil }, close: func() {}}, nil
	}
	var mu sync.Mutex
	m := map[string]*rate.Limiter{}
	return &target{
		n: n,
		call: func(_ context.Context, i int) (bool, error) {
			name := e.names[i]
			mu.Lock()
			lim := m[name]
			if lim == nil {
				lim = rate.NewLimiter(per, burst)
				m[name] = lim
			}
			mu.Unlock()
			return lim.Allow(), nil
		},
		close: func() {},
	}, nil
}
