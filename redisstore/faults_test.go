package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// A fault done to a running Redis under load, and its undoing.
type fault struct {
	name string
	// kept: Redis keeps its data through the fault, so the limit must hold
	// exactly; otherwise the loss is measured and bounded by one window.
	kept   bool
	inject func(t *testing.T, srv *redistest.Server, admin *redis.Client)
	heal   func(t *testing.T, srv *redistest.Server, admin *redis.Client)
	// split: the fault leaves two primaries taking writes for a while
	// (a failover that leaves the old one up); the grants lost grow with
	// that while, so no bound is asserted, only figures.
	split bool
}

var faults = []fault{
	{"kill -9, restart without persistence", false,
		func(t *testing.T, s *redistest.Server, _ *redis.Client) { s.Kill() },
		func(t *testing.T, s *redistest.Server, _ *redis.Client) { s.Restart(t) }, false},
	{"stall (SIGSTOP, SIGCONT)", true,
		func(t *testing.T, s *redistest.Server, _ *redis.Client) { s.Pause() },
		func(t *testing.T, s *redistest.Server, _ *redis.Client) { s.Resume() }, false},
	{"busy script, then SCRIPT KILL", true,
		func(t *testing.T, s *redistest.Server, admin *redis.Client) {
			admin.ConfigSet(context.Background(), "busy-reply-threshold", "50")
			hog := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: -1})
			go func() { defer hog.Close(); hog.Eval(context.Background(), "while true do end", nil) }()
		},
		func(t *testing.T, s *redistest.Server, admin *redis.Client) {
			killer := redis.NewClient(&redis.Options{Addr: s.Addr})
			defer killer.Close()
			killer.ScriptKill(context.Background())
		}, false},
	{"FLUSHALL", false,
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) { admin.FlushAll(context.Background()) },
		func(t *testing.T, _ *redistest.Server, _ *redis.Client) {}, false},
	{"SCRIPT FLUSH", true,
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) { admin.ScriptFlush(context.Background()) },
		func(t *testing.T, _ *redistest.Server, _ *redis.Client) {}, false},
	{"maxmemory reached, noeviction", true,
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			ctx := context.Background()
			admin.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			admin.ConfigSet(ctx, "maxmemory", "1")
		},
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			admin.ConfigSet(context.Background(), "maxmemory", "0")
		}, false},
	{"maxmemory reached, allkeys-lru evicting", false,
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			ctx := context.Background()
			admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru")
			admin.ConfigSet(ctx, "maxmemory", "1")
		},
		func(t *testing.T, _ *redistest.Server, admin *redis.Client) {
			admin.ConfigSet(context.Background(), "maxmemory", "0")
		}, false},
}

// call is one TryAcquire of the load.
type call struct {
	start, end time.Time
	allowed    bool
	at         time.Time
	err        error
}

// The load every fault is run under.
const (
	loadClients  = 3
	loadWorkers  = 6
	loadDeadline = 300 * time.Millisecond
)

var loadConfig = redlimit.PerInterval(20, 100*time.Millisecond)

// underLoad runs TryAcquire from several clients (each from newClient, as
// separate processes would have) in many goroutines: 0.4 s healthy, then
// inject, 0.8 s later heal, then 1 s more. It returns every call and when
// the fault was healed. The sleeps set the fault's timeline; nothing waits
// on them for a result.
func underLoad(t *testing.T, newClient func() redis.UniversalClient, inject, heal func(), cfg redlimit.Config, opts ...redisstore.Option) ([]call, time.Time) {
	return underLoadUntil(t, newClient, inject, heal, nil, cfg, opts...)
}

// underLoadUntil is underLoad whose load, past its last second, goes on
// until seen reports true of the calls so far (nil: at once), at most
// 20 s more: a test that waits for an event of the load (a grant after
// the fault) does not depend on how soon it came.
func underLoadUntil(t *testing.T, newClient func() redis.UniversalClient, inject, heal func(), seen func([]call) bool, cfg redlimit.Config, opts ...redisstore.Option) ([]call, time.Time) {
	var (
		mu    sync.Mutex
		calls []call
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	for c := 0; c < loadClients; c++ {
		rdb := newClient()
		defer rdb.Close()
		s, err := redisstore.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := redlimit.New(s, "faults", redlimit.WithConfig(cfg))
		if err != nil {
			t.Fatal(err)
		}
		for w := 0; w < loadWorkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), loadDeadline)
					c := call{start: time.Now()}
					r, err := l.TryAcquire(ctx, 1)
					cancel()
					c.end, c.allowed, c.at, c.err = time.Now(), r.Allowed, r.At, err
					mu.Lock()
					calls = append(calls, c)
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(400 * time.Millisecond)
	inject()
	time.Sleep(800 * time.Millisecond)
	healed := time.Now()
	heal()
	time.Sleep(time.Second)
	for deadline := time.Now().Add(20 * time.Second); seen != nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		done := seen(calls)
		mu.Unlock()
		if done {
			break
		}
	}
	close(stop)
	wg.Wait()
	return calls, healed
}

// TestFaults runs each fault against a Redis under load from several
// clients and reports calls, errors, time to recover and over-admission.
func TestFaults(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			defer admin.Close()
			// No retries: a command that may have run is never sent twice.
			newClient := func() redis.UniversalClient {
				return redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			}
			calls, healed := underLoad(t, newClient, func() { f.inject(t, srv, admin) }, func() { f.heal(t, srv, admin) }, loadConfig)
			report(t, f, calls, healed, loadConfig, loadDeadline)
		})
	}
}

func report(t *testing.T, f fault, calls []call, healed time.Time, cfg redlimit.Config, deadline time.Duration) {
	t.Helper()
	var errs, untyped, grants int
	var slowest time.Duration
	recovered := time.Duration(-1)
	var at []time.Time
	for _, c := range calls {
		if d := c.end.Sub(c.start); d > slowest {
			slowest = d
		}
		switch {
		case c.err != nil:
			errs++
			// A context error is the answer to a call whose context
			// ended before it began (a starved goroutine), as documented.
			if !errors.Is(c.err, redlimit.ErrUnavailable) && !errors.Is(c.err, redlimit.ErrCorrupt) && !errors.Is(c.err, redlimit.ErrDenied) &&
				!errors.Is(c.err, context.DeadlineExceeded) {
				untyped++
				if untyped == 1 {
					t.Errorf("untyped error: %v", c.err)
				}
			}
		default:
			if c.allowed {
				grants++
				at = append(at, c.at)
			}
			if !c.start.Before(healed) && (recovered < 0 || c.end.Sub(healed) < recovered) {
				recovered = c.end.Sub(healed)
			}
		}
	}
	over := overAdmission(at, cfg)
	t.Logf("FIGURES | %s | calls %d | errors %d | grants %d | recovered in %v | slowest call %v (deadline %v) | over-admission %d",
		f.name, len(calls), errs, grants, recovered.Round(time.Millisecond), slowest.Round(time.Millisecond), deadline, over)
	if recovered < 0 {
		t.Errorf("no call succeeded after the fault was healed")
	}
	if f.kept && over > 0 {
		t.Errorf("Redis kept its data, yet %d permits beyond the limit were granted", over)
	}
	if !f.kept && !f.split && over > cfg.MaxPermits() {
		t.Errorf("over-admission %d exceeds one full allowance (%d)", over, cfg.MaxPermits())
	}
}

// overAdmission is the most permits granted beyond what the algorithm
// allows, judged by the grants' Redis times: for the sliding log, beyond
// the rate in any window of the interval; for the token bucket, beyond
// the burst plus what refilled, in any span.
func overAdmission(at []time.Time, cfg redlimit.Config) int64 {
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	var worst int64
	if cfg.Algorithm == redlimit.TokenBucket {
		for i := range at {
			for j := i; j < len(at); j++ {
				refill := int64(float64(cfg.Rate) * float64(at[j].Sub(at[i])) / float64(cfg.Interval))
				if n := int64(j-i+1) - cfg.Burst - refill; n > worst {
					worst = n
				}
			}
		}
		return worst
	}
	j := 0
	for i := range at {
		for at[j].Add(cfg.Interval).Compare(at[i]) <= 0 {
			j++
		}
		if n := int64(i - j + 1); n-cfg.Rate > worst {
			worst = n - cfg.Rate
		}
	}
	return worst
}

// TestRefusedFailsFast: with nothing listening on Redis's port, a call
// fails with ErrUnavailable after one refused dial, instead of dialling
// again until its deadline (go-redis's dial retries and command retries).
func TestRefusedFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, v := range []struct{ bounded, batching bool }{{false, true}, {false, false}, {true, true}, {true, false}} {
		// Dials are counted per client: go-redis retries a refused dial in
		// the background every 100 ms, and an earlier client's retries
		// must not count as this one's.
		var dials atomic.Int64
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: v.bounded, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
		defer rdb.Close()
		var opts []redisstore.Option
		if !v.batching {
			opts = append(opts, redisstore.WithoutBatching())
		}
		s, err := redisstore.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := redlimit.New(s, "refused", redlimit.WithConfig(redlimit.PerSecond(10)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if v.bounded {
			// A client that keeps to contexts runs the calls in theirs
			// until a dial is refused: the first call may wait out
			// go-redis's dial retries.
			if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrUnavailable) {
				t.Errorf("bounded client, first call: %v; want ErrUnavailable", err)
			}
		}
		calls := []func() error{
			func() error { _, err := l.TryAcquire(ctx, 1); return err },
			func() error { _, err := l.Config(ctx); return err },
			func() error { _, err := l.Delete(ctx); return err },
		}
		for i, call := range calls {
			before := dials.Load()
			err := call()
			if !errors.Is(err, redlimit.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
				t.Errorf("%+v, call %d: %v (context: %v); want ErrUnavailable with the refusal, before the deadline", v, i, err, ctx.Err())
			}
			if n := dials.Load() - before; n != 1 {
				t.Errorf("%+v, call %d: %d dials; want 1", v, i, n)
			}
		}
		cancel()
	}
}

// TestFlushAllBound: FLUSHALL loses every limiter's state; the clients
// restore the config they know, and the limiter starts again from empty.
// So a greedy client is granted at most one full allowance more than the
// algorithm alone grants it (Config.MaxPermits: the rate for the window
// algorithms, the burst for the token bucket, the capacity for the leaky
// bucket), whatever the moment of the flush. The test drives the same
// greedy client on Redis and, without the flush, on memstore (the same
// rules), on one fake clock, and measures the difference.
func TestFlushAllBound(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, alg := range redlimit.Algorithms {
		for _, flushAt := range []int{10, 25, 33} { // steps of a twentieth of the interval
			cfg, err := redlimit.Config{Algorithm: alg, Rate: 50, Interval: time.Second}.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
			rs, err := redisstore.New(rdb, redisstore.WithTimeSource(clk))
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("flush-%s-%d", alg, flushAt)
			onRedis, _ := redlimit.New(rs, name, redlimit.WithConfig(cfg))
			alone, _ := redlimit.New(memstore.New(memstore.WithTimeSource(clk)), name, redlimit.WithConfig(cfg))
			if err := onRedis.SetRate(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			drain := func(l *redlimit.Limiter) int64 {
				var n int64
				for n < 10*cfg.MaxPermits() {
					r, err := l.TryAcquire(ctx, 1)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !r.Allowed {
						break
					}
					n++
				}
				return n
			}
			var withFlush, without int64
			for step := 0; step < 60; step++ {
				if step == flushAt {
					rdb.FlushAll(ctx)
				}
				withFlush += drain(onRedis)
				without += drain(alone)
				clk.Advance(cfg.Interval / 20)
			}
			over := withFlush - without
			t.Logf("FIGURES | FLUSHALL | %s, flushed at %d/20 of an interval | granted %d with the flush, %d without | over-admission %d (bound %d)",
				alg, flushAt, withFlush, without, over, cfg.MaxPermits())
			if over < 0 || over > cfg.MaxPermits() {
				t.Errorf("%s flushed at step %d: over-admission %d; want 0..%d", alg, flushAt, over, cfg.MaxPermits())
			}
		}
	}
}
