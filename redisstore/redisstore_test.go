package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

var prefixes atomic.Int64

// newStore returns a store with a prefix of its own on rdb.
func newStore(t *testing.T, rdb redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	p := fmt.Sprintf("t%d:", prefixes.Add(1))
	s, err := redisstore.New(rdb, append([]redisstore.Option{redisstore.WithPrefix(p)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() }) // a keyed policy's subscription
	return s
}

func TestConformance(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		return newStore(t, rdb, redisstore.WithTimeSource(clk))
	}, storetest.Full())
}

// TestRedisTime runs without an injected clock: time comes from Redis TIME.
func TestRedisTime(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	l, err := redlimit.New(newStore(t, rdb), "redis-time")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetRate(ctx, redlimit.PerInterval(2, time.Hour)); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	r, err := l.TryAcquire(ctx, 2)
	if err != nil || !r.Allowed || r.At.Before(before) || r.At.After(time.Now().Add(time.Second)) {
		t.Fatalf("TryAcquire = %+v, %v; want granted at Redis's current time", r, err)
	}
	r, err = l.TryAcquire(ctx, 1)
	if err != nil || r.Allowed || r.RetryAfter <= 59*time.Minute {
		t.Fatalf("over the limit: %+v, %v", r, err)
	}
}

// TestKeysExpire: state keys carry a TTL of at most one interval past the
// newest grant; the config has none until Expire, and Expire removes it.
func TestKeysExpire(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	cfg := redlimit.PerInterval(5, 2*time.Second).WithMode(redlimit.PerClient)
	l, _ := redlimit.New(s, "ttl", redlimit.WithClientID("c1"))
	if err := l.SetRate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, s.Prefix()+"*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys = %v, %v; want the limiter hash, state and log of client c1", keys, err)
	}
	for _, k := range keys {
		ttl := rdb.PTTL(ctx, k).Val()
		if strings.HasSuffix(k, "}") { // the limiter hash: config and Overall state
			if ttl != -1 {
				t.Errorf("limiter hash %s has TTL %v; want none", k, ttl)
			}
			continue
		}
		if ttl <= 0 || ttl > 2*time.Second {
			t.Errorf("%s has TTL %v; want (0, 2s]", k, ttl)
		}
	}
	if ok, err := l.Expire(ctx, 20*time.Millisecond); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	// Wait for Redis to expire the config: a bounded poll of the condition.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := s.Config(ctx, "ttl"); errors.Is(err, redlimit.ErrNotInitialized) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("config still there 5s after a 20ms Expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// An expired limiter takes its Overall state along, as Delete does: a
	// client that still knows the config restores it afresh.
	o, _ := redlimit.New(s, "ttl-overall")
	if err := o.SetRate(ctx, redlimit.PerInterval(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, err := o.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("first grant: %+v, %v", r, err)
	}
	if ok, err := o.Expire(ctx, 20*time.Millisecond); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	for {
		if n, _ := rdb.Exists(ctx, s.Prefix()+"{ttl-overall}").Result(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("limiter hash still there 5s after a 20ms Expire")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r, err := o.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("after the limiter expired: %+v, %v; want a grant from a fresh state", r, err)
	}
}

// TestMemoryBounded: grants in one millisecond share one entry, so the log
// of a huge rate stays small.
func TestMemoryBounded(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0)
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	l, _ := redlimit.New(s, "big", redlimit.WithClock(clk))
	if err := l.SetRate(ctx, redlimit.PerMinute(1_000_000)); err != nil {
		t.Fatal(err)
	}
	for ms := 0; ms < 50; ms++ {
		for i := 0; i < 20; i++ {
			if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
				t.Fatalf("grant: %+v, %v", r, err)
			}
		}
		clk.Advance(time.Millisecond)
	}
	n, err := rdb.LLen(ctx, s.Prefix()+"{big}:log").Result()
	if err != nil || n != 100 {
		t.Fatalf("log holds %d elements (%v); want 100: 50 entries for 1000 grants", n, err)
	}
}

// TestCorruptData: foreign data under a limiter's keys is a typed error.
func TestCorruptData(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	l, _ := redlimit.New(s, "corrupt")
	if err := rdb.Set(ctx, s.Prefix()+"{corrupt}", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("config of the wrong type: %v; want ErrCorrupt", err)
	}
	rdb.Del(ctx, s.Prefix()+"{corrupt}")
	rdb.HSet(ctx, s.Prefix()+"{corrupt}", "c", "sliding-log overall abc 1000 1 0 0")
	if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("unreadable rate: %v; want ErrCorrupt", err)
	}
	if _, err := l.Config(ctx); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("Config of unreadable rate: %v; want ErrCorrupt", err)
	}
}

// TestUnavailable: a stopped Redis is a typed error within the deadline.
func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	l, _ := redlimit.New(newStore(t, rdb), "down", redlimit.WithConfig(redlimit.PerSecond(1)))
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrUnavailable) {
		t.Fatalf("Redis down: %v; want ErrUnavailable", err)
	}
}

// TestScriptFlush: the scripts come back after SCRIPT FLUSH (NOSCRIPT fallback).
func TestScriptFlush(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	l, _ := redlimit.New(newStore(t, rdb), "flush", redlimit.WithConfig(redlimit.PerSecond(100)))
	for i := 0; i < 3; i++ {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
		}
		// The limiter function goes too: the store loads it again.
		if err := rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("after FUNCTION FLUSH: %+v, %v", r, err)
		}
		if libs := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Val(); len(libs) != 1 {
			t.Fatalf("after a call: %d function libraries; want redlimit's", len(libs))
		}
	}
}

func TestBadPrefix(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := redisstore.New(rdb, redisstore.WithPrefix("a{b}:")); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("prefix with braces: %v", err)
	}
	if _, err := redisstore.New(nil); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("nil client: %v", err)
	}
}

// TestManyClientsRedisTime: several independent clients (each its own
// connection pool, as separate processes would have), many goroutines each,
// on one limiter with Redis's own clock. The log of every grant, with its
// store time, never holds more than rate permits in a window.
func TestManyClientsRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	const (
		clients = 4
		workers = 16
		calls   = 150
		rate    = 25
	)
	cfg := redlimit.PerInterval(rate, 20*time.Millisecond)
	prefix := fmt.Sprintf("many%d:", prefixes.Add(1))
	type grant = storetest.Grant
	results := make(chan []grant, clients*workers)
	var asked atomic.Int64
	for c := 0; c < clients; c++ {
		s, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := redlimit.New(s, "shared", redlimit.WithConfig(cfg))
		for w := 0; w < workers; w++ {
			go func(w int) {
				var mine []grant
				defer func() { results <- mine }()
				for i := 0; i < calls; i++ {
					n := int64(1 + (i+w)%3)
					asked.Add(n)
					r, err := l.TryAcquire(context.Background(), n)
					if err != nil {
						t.Errorf("TryAcquire: %v", err)
						return
					}
					if r.Allowed {
						mine = append(mine, storetest.Grant{At: r.At, Permits: n})
					}
				}
			}(w)
		}
	}
	var all []grant
	for i := 0; i < clients*workers; i++ {
		all = append(all, <-results...)
	}
	worst := storetest.MaxInWindow(all, cfg.Interval)
	t.Logf("%d permits asked, %d grants; fullest window of %v held %d (rate %d)", asked.Load(), len(all), cfg.Interval, worst, rate)
	if worst > rate {
		t.Fatalf("a window held %d permits; the rate is %d", worst, rate)
	}
	if len(all) == 0 {
		t.Fatal("nothing granted")
	}
}

// TestFailurePolicies: with Redis down, each policy answers as documented,
// within the deadline.
func TestFailurePolicies(t *testing.T) {
	srv := redistest.Start(t)
	// No retries: each call to the stopped server fails at once.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	s := newStore(t, rdb)
	cfg := redlimit.PerInterval(4, time.Hour)
	closed, _ := redlimit.New(s, "fp", redlimit.WithConfig(cfg))
	open, _ := redlimit.New(s, "fp", redlimit.WithConfig(cfg), redlimit.WithFailurePolicy(redlimit.FailOpen))
	local, _ := redlimit.New(s, "fp", redlimit.WithConfig(cfg), redlimit.WithFallback(memstore.New(), 0.5))
	if r, err := closed.TryAcquire(context.Background(), 1); err != nil || !r.Allowed || r.Degraded {
		t.Fatalf("Redis up: %+v, %v", r, err)
	}
	srv.Stop()
	call := func(l *redlimit.Limiter) (redlimit.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return l.TryAcquire(ctx, 1)
	}
	if r, err := call(closed); !errors.Is(err, redlimit.ErrUnavailable) || r.Allowed || !r.Degraded {
		t.Fatalf("fail closed: %+v, %v; want a refusal and ErrUnavailable", r, err)
	}
	if r, err := call(open); err != nil || !r.Allowed || !r.Degraded {
		t.Fatalf("fail open: %+v, %v; want a degraded grant", r, err)
	}
	var granted int
	for i := 0; i < 4; i++ {
		r, err := call(local)
		if err != nil || !r.Degraded {
			t.Fatalf("fallback: %+v, %v", r, err)
		}
		if r.Allowed {
			granted++
		}
	}
	if granted != 2 {
		t.Fatalf("fallback at half of 4 granted %d, want 2", granted)
	}
}

// TestUnsafeClient: New refuses a client that retries commands (go-redis's
// default), saying how to fix it, unless AllowRetries is given.
func TestUnsafeClient(t *testing.T) {
	retrying := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // MaxRetries 0: go-redis's default of 3
	defer retrying.Close()
	_, err := redisstore.New(retrying)
	if !errors.Is(err, redisstore.ErrUnsafeClient) || !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("New(default client) = %v; want ErrUnsafeClient", err)
	}
	if !strings.Contains(err.Error(), "MaxRetries: -1") || !strings.Contains(err.Error(), "AllowRetries") {
		t.Fatalf("error %q does not say how to fix it", err)
	}
	if _, err := redisstore.New(retrying, redisstore.AllowRetries()); err != nil {
		t.Fatalf("New with AllowRetries: %v", err)
	}
	safe := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer safe.Close()
	if _, err := redisstore.New(safe); err != nil {
		t.Fatalf("New(MaxRetries -1): %v", err)
	}
	for _, url := range []string{"redis://127.0.0.1:1", "redis+sentinel://127.0.0.1:1?master_name=m", "redis+cluster://127.0.0.1:1"} {
		c, err := redisstore.OpenURL(url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := redisstore.New(c); err != nil {
			t.Errorf("New(OpenURL(%s)): %v", url, err)
		}
		_ = c.Close()
	}
}
