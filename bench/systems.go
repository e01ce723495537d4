package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// Where a system keeps its limits.
const (
	onRedis  = "redis"
	inMemory = "memory"
	// onCluster is a cell's store only: the Redis systems measured on a
	// Cluster the benchmark starts (env.cluster).
	onCluster = "cluster"
)

// limit is a workload's limit: rate permits per interval (the token
// buckets' burst and the leaky bucket's queue are the rate too).
type limit struct {
	Rate     int64         `json:"rate"`
	Interval time.Duration `json:"-"`
}

func (l limit) String() string { return fmt.Sprintf("%d per %s", l.Rate, l.Interval) }

// target is one system prepared for one measurement: n limiters, and how
// to ask limiter i for one permit.
type target struct {
	n    int
	call func(ctx context.Context, i int) (granted bool, err error)
	// redisKeys lists the Redis keys of limiter i (nil in memory), and
	// admin is the client to ask their MEMORY USAGE (nil: env.admin).
	redisKeys func(i int) []string
	admin     redis.Cmdable
	close     func()
}

// system is one rate limiter under test.
type system struct {
	Name         string `json:"name"`
	Store        string `json:"store"`  // onRedis or inMemory
	Family       string `json:"family"` // redlimit, redis_rate, redisson, memstore, x/time/rate, go-limiter
	Algorithm    string `json:"algorithm"`
	AutoPipeline bool   `json:"autopipeline,omitempty"`
	// Peer: a system redlimit is compared with (ratios are redlimit's or
	// memstore's decisions/s over a peer's in the same cell and round).
	Peer bool `json:"peer"`
	// Baseline: not a rate limiter but the floor (see floor.go), shown
	// beside the others and never in a ratio.
	Baseline bool   `json:"baseline,omitempty"`
	Note     string `json:"note,omitempty"`
	// prepare builds the limiters of p.
	prepare func(ctx context.Context, e *env, p prep) (*target, error)
}

// prep is what a system is prepared for: limiters named names (under the
// system's own key prefix on Redis), each of limit l, for callers
// concurrent callers.
type prep struct {
	l       limit
	names   []string
	callers int
	prefix  string // on Redis: the system's own, so that systems never share a key
	cluster bool   // on the Cluster (env.cluster), not the one server
}

// systems lists every system, in the order of the tables.
func systems() []*system {
	var out []*system
	for _, auto := range []bool{false, true} {
		for _, alg := range redlimit.Algorithms {
			s := &system{Name: "redlimit " + string(alg), Store: onRedis, Family: "redlimit", Algorithm: string(alg), AutoPipeline: auto}
			if auto {
				s.Name += " +autopipeline"
			}
			s.prepare = func(ctx context.Context, e *env, p prep) (*target, error) {
				return prepareRedlimitRedis(ctx, e, alg, auto, p)
			}
			out = append(out, s)
		}
	}
	for _, alg := range redlimit.Algorithms {
		out = append(out, &system{Name: policyPrefix + string(alg), Store: onRedis, Family: "redlimit policy", Algorithm: string(alg),
			Note: "a keyed Policy of one limit: Policy.Key(key).TryAcquire (policy.lua, calls made meanwhile share runs)",
			prepare: func(ctx context.Context, e *env, p prep) (*target, error) {
				return preparePolicy(ctx, e, alg, p)
			}})
	}
	out = append(out,
		&system{Name: "redis_rate", Store: onRedis, Family: "redis_rate", Algorithm: "GCRA", Peer: true,
			Note: "github.com/go-redis/redis_rate/v10: Limiter.Allow, one EVALSHA per call", prepare: prepareRedisRate},
		&system{Name: "Redisson script", Store: onRedis, Family: "redisson", Algorithm: "sliding-log (ZSET)", Peer: true,
			Note: "Redisson's tryAcquire script, driven as RedissonRateLimiter does (trySetRate once per limiter, then EVALSHA per call)", prepare: prepareRedisson},
		&system{Name: floorName, Store: onRedis, Family: floorFamily, Algorithm: "none (INCRBY)", Baseline: true,
			Note: "not a rate limiter: a lone call is one INCRBY of its key (one round trip, one command); calls made meanwhile share runs as redlimit's do (internal/batch, one INCRBY per key per run, a run's keys pipelined); never in a ratio", prepare: prepareFloor},
		&system{Name: floorPacedName, Store: onRedis, Family: floorFamily, Algorithm: "none (INCRBY)", Baseline: true,
			Note: "the floor in half-peak, paced at the lowest half-peak rate of redlimit's systems in the cell (the cell's floor_pace_of)", prepare: prepareFloor},
		&system{Name: "memstore token-bucket", Store: inMemory, Family: "memstore", Algorithm: string(redlimit.TokenBucket),
			prepare: func(ctx context.Context, e *env, p prep) (*target, error) {
				return prepareMemstore(redlimit.TokenBucket, p)
			}},
		&system{Name: "memstore sliding-log", Store: inMemory, Family: "memstore", Algorithm: string(redlimit.SlidingLog),
			prepare: func(ctx context.Context, e *env, p prep) (*target, error) {
				return prepareMemstore(redlimit.SlidingLog, p)
			}},
		&system{Name: "memstore policy token-bucket", Store: inMemory, Family: "memstore", Algorithm: string(redlimit.TokenBucket),
			Note: "a keyed Policy of one limit on memstore: Policy.Key(key).TryAcquire per call, the key looked up per call as go-limiter's Take does (compact records, no Limiter per key)",
			prepare: func(ctx context.Context, e *env, p prep) (*target, error) {
				return prepareMemPolicy(redlimit.TokenBucket, p)
			}},
		&system{Name: "x/time/rate", Store: inMemory, Family: "x/time/rate", Algorithm: "token-bucket", Peer: true,
			Note: "golang.org/x/time/rate: one *rate.Limiter; many keys: a sync.Map of them, one per key, made on first use (LoadOrStore)", prepare: prepareXRate},
		&system{Name: "go-limiter", Store: inMemory, Family: "go-limiter", Algorithm: "token-bucket", Peer: true,
			Note: "github.com/sethvargo/go-limiter/memorystore: Store.Take(ctx, key), one store holding every key", prepare: prepareGoLimiter},
	)
	return out
}

// policyPrefix starts the names of the keyed policy systems.
const policyPrefix = "redlimit policy "

// env is what the systems share: the Redis to use and the names.
type env struct {
	base  *redis.Options // the Redis clients' options, PoolSize aside
	admin *redis.Client  // INFO, MEMORY USAGE, clean-up
	// cluster is the Cluster of the cluster cells (nil: none).
	cluster  *cluster
	own      bool     // the benchmark started the server
	prefix   string   // every key the benchmark writes starts with it
	names    []string // the limiters' names in the keys workloads
	redisson *redissonScripts
	clientID string // the Redisson client's id (PER_CLIENT keys)
	// preset records the limiters whose config has been stored once (by
	// system prefix and first name): configs persist, so once per run.
	preset map[string]bool
}

// client returns a Redis client for callers concurrent callers, with the
// options every system shares: a pool of exactly one connection per caller,
// no retries (a retried script could grant twice), context deadlines
// honoured.
func (e *env) client(callers int) *redis.Client {
	return redis.NewClient(e.options(callers))
}

// clientFor returns the client p is measured through: on the one server,
// or a ClusterClient with the same options (its pool per node).
func (e *env) clientFor(p prep) redis.UniversalClient {
	if p.cluster {
		return e.cluster.client(p.callers)
	}
	return e.client(p.callers)
}

// adminFor returns the client for MEMORY USAGE on p's Redis.
func (e *env) adminFor(p prep) redis.Cmdable {
	if p.cluster {
		return e.cluster.admin
	}
	return e.admin
}

// options are the client options every system shares (see client).
func (e *env) options(callers int) *redis.Options {
	o := *e.base
	o.PoolSize = callers
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	return &o
}

// systemPrefix is the key prefix of system name: the run's prefix and a
// tag of the name's hash, the same length for every system, so that the
// bytes a key takes in Redis (MEMORY USAGE) compare what the systems store
// rather than how long their names are.
func (e *env) systemPrefix(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s%08x:", e.prefix, h.Sum32())
}

// once reports whether key is new (and records it).
func (e *env) once(key string) bool {
	if e.preset == nil {
		e.preset = map[string]bool{}
	}
	if e.preset[key] {
		return false
	}
	e.preset[key] = true
	return true
}

func prepareRedlimitRedis(ctx context.Context, e *env, alg redlimit.Algorithm, auto bool, p prep) (*target, error) {
	n := len(p.names)
	if n > 1 && e.once(p.prefix+p.names[0]) {
		if err := presetConfigs(ctx, e, alg, p); err != nil {
			return nil, err
		}
	}
	rdb := e.client(p.callers)
	opts := []redisstore.Option{redisstore.WithPrefix(p.prefix)}
	if auto {
		opts = append(opts, redisstore.WithAutoPipeline())
	}
	store, err := redisstore.New(rdb, opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	ls, err := newLimiters(store, alg, p)
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
			base := p.prefix + "{" + p.names[i] + "}"
			return []string{base, base + ":log"}
		},
		close: func() { rdb.Close() },
	}, nil
}

// newLimiters makes p's limiters under alg on store. Each passes its config
// along with every call (WithConfig), so the first call creates it.
func newLimiters(store redlimit.Store, alg redlimit.Algorithm, p prep) ([]*redlimit.Limiter, error) {
	cfg := redlimit.Config{Algorithm: alg, Rate: p.l.Rate, Interval: p.l.Interval}
	ls := make([]*redlimit.Limiter, len(p.names))
	for i := range ls {
		var err error
		if ls[i], err = redlimit.New(store, p.names[i], redlimit.WithConfig(cfg)); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// presetConfigs stores the config of p's limiters (TrySetRate), as
// Redisson's limiters get theirs before use: in the keys workloads every
// limiter then exists, as it would in a service that has run a while (a
// config persists; the state expires once idle for an interval).
// Auto-pipelined, from many goroutines, once per run, outside any
// measurement.
func presetConfigs(ctx context.Context, e *env, alg redlimit.Algorithm, p prep) error {
	n := len(p.names)
	rdb := e.client(64)
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithPrefix(p.prefix), redisstore.WithAutoPipeline())
	if err != nil {
		return err
	}
	cfg := redlimit.Config{Algorithm: alg, Rate: p.l.Rate, Interval: p.l.Interval}
	const workers = 256
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < n; i += workers {
				l, err := redlimit.New(store, p.names[i])
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

// preparePolicy makes a keyed policy of one limit, l under alg, and
// asks it for p's names as keys. The policy's config is one key, stored by
// the first call (every call sends it along), so nothing is stored before.
func preparePolicy(ctx context.Context, e *env, alg redlimit.Algorithm, p prep) (*target, error) {
	rdb := e.clientFor(p)
	store, err := redisstore.New(rdb, redisstore.WithPrefix(p.prefix))
	if err != nil {
		rdb.Close()
		return nil, err
	}
	cfg := redlimit.Config{Algorithm: alg, Rate: p.l.Rate, Interval: p.l.Interval}
	pol, err := redlimit.NewPolicy(store, "p", []redlimit.Config{cfg})
	if err != nil {
		store.Close()
		rdb.Close()
		return nil, err
	}
	keyed := make([]redlimit.Keyed, len(p.names))
	for i, name := range p.names {
		keyed[i] = pol.Key(name)
	}
	return &target{
		n: len(keyed),
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := keyed[i].TryAcquire(ctx, 1)
			return r.Allowed, err
		},
		redisKeys: func(i int) []string {
			// redisstore's layout of a key's state: PREFIX{policy%:key},
			// and PREFIX{policy%:key}1 for the sliding log's list of the
			// first limit; the names here need no escaping.
			base := p.prefix + "{p%:" + p.names[i] + "}"
			return []string{base, base + "1"}
		},
		admin: e.adminFor(p),
		close: func() {
			store.Close()
			rdb.Close()
		},
	}, nil
}

func prepareRedisRate(ctx context.Context, e *env, p prep) (*target, error) {
	rdb := e.clientFor(p)
	lim := redis_rate.NewLimiter(rdb)
	rl := redis_rate.Limit{Rate: int(p.l.Rate), Burst: int(p.l.Rate), Period: p.l.Interval}
	keys := make([]string, len(p.names))
	for i, name := range p.names {
		keys[i] = p.prefix + name
	}
	return &target{
		n: len(keys),
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := lim.Allow(ctx, keys[i], rl)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		},
		redisKeys: func(i int) []string { return []string{"rate:" + keys[i]} },
		admin:     e.adminFor(p),
		close:     func() { rdb.Close() },
	}, nil
}

func prepareRedisson(ctx context.Context, e *env, p prep) (*target, error) {
	if e.redisson == nil {
		return nil, errors.New("the Redisson script is not loaded")
	}
	n, l := len(p.names), p.l
	rdb := e.client(p.callers)
	name := func(i int) string { return p.prefix + p.names[i] }
	keys := make([][]string, n)
	for i := range keys {
		keys[i] = redissonKeys(name(i), e.clientID)
	}
	// trySetRate(OVERALL, rate, interval): once per limiter, before use, as
	// an application does (and once per run: the config persists);
	// pipelined, outside the measurement.
	interval := l.Interval.Milliseconds()
	if !e.once(p.prefix + p.names[0]) {
		n = 0
	}
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
		n: len(keys),
		call: func(ctx context.Context, i int) (bool, error) {
			// ARGV: permits, System.currentTimeMillis(),
			// ThreadLocalRandom.nextLong() (LongCodec: decimal text).
			return redissonDecision(script.EvalSha(ctx, rdb, keys[i], 1, time.Now().UnixMilli(), strconv.FormatInt(rand.Int64(), 10)))
		},
		redisKeys: func(i int) []string { return redissonOverallKeys(name(i)) },
		close:     func() { rdb.Close() },
	}, nil
}

func prepareMemstore(alg redlimit.Algorithm, p prep) (*target, error) {
	ls, err := newLimiters(memstore.New(), alg, p)
	if err != nil {
		return nil, err
	}
	return &target{
		n: len(ls),
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := ls[i].TryAcquire(ctx, 1)
			return r.Allowed, err
		},
		close: func() {},
	}, nil
}

// prepareMemPolicy is a keyed policy of one limit, l under alg, on
// memstore: the like of go-limiter's keyed store, one call per decision
// naming its key.
func prepareMemPolicy(alg redlimit.Algorithm, p prep) (*target, error) {
	cfg := redlimit.Config{Algorithm: alg, Rate: p.l.Rate, Interval: p.l.Interval}
	pol, err := redlimit.NewPolicy(memstore.New(), "p", []redlimit.Config{cfg})
	if err != nil {
		return nil, err
	}
	return &target{
		n: len(p.names),
		call: func(ctx context.Context, i int) (bool, error) {
			r, err := pol.Key(p.names[i]).TryAcquire(ctx, 1)
			return r.Allowed, err
		},
		close: func() {},
	}, nil
}

// prepareXRate is x/time/rate as a user of it would write it: one
// *rate.Limiter, or for many keys a sync.Map of them, one per key, made on
// first use.
func prepareXRate(ctx context.Context, e *env, p prep) (*target, error) {
	per := rate.Limit(float64(p.l.Rate) / p.l.Interval.Seconds())
	burst := int(p.l.Rate)
	if len(p.names) == 1 {
		lim := rate.NewLimiter(per, burst)
		return &target{n: 1, call: func(context.Context, int) (bool, error) { return lim.Allow(), nil }, close: func() {}}, nil
	}
	var m sync.Map // key -> *rate.Limiter
	return &target{
		n: len(p.names),
		call: func(_ context.Context, i int) (bool, error) {
			name := p.names[i]
			v, ok := m.Load(name)
			if !ok {
				v, _ = m.LoadOrStore(name, rate.NewLimiter(per, burst))
			}
			return v.(*rate.Limiter).Allow(), nil
		},
		close: func() {},
	}, nil
}

// prepareGoLimiter is sethvargo/go-limiter's memory store: one store for
// every key, Take per decision (its sweeper left at the default, hours
// away), with goLimiterInterval.
func prepareGoLimiter(ctx context.Context, e *env, p prep) (*target, error) {
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(p.l.Rate), Interval: goLimiterInterval(p.l)})
	if err != nil {
		return nil, err
	}
	return &target{
		n: len(p.names),
		call: func(ctx context.Context, i int) (bool, error) {
			_, _, _, ok, err := st.Take(ctx, p.names[i])
			return ok, err
		},
		close: func() { _ = st.Close(context.Background()) },
	}, nil
}

// goLimiterInterval is the interval go-limiter is given for l. Its bucket
// refills, at each tick of its interval, interval/tokens tokens per tick
// gone by (in ns), so with more tokens than the square root of the
// interval in ns it refills fewer than it spent (sethvargo/go-limiter
// issue 29): at the granted limit in memory it would refuse nearly every
// call after its first second. A limit that large is there to grant every
// call, so go-limiter gets the same tokens over an hour instead, an
// interval no measurement reaches: every call is granted from the bucket
// it starts with.
func goLimiterInterval(l limit) time.Duration {
	if float64(l.Rate)*float64(l.Rate) > float64(l.Interval.Nanoseconds()) {
		return max(l.Interval, time.Hour)
	}
	return l.Interval
}
