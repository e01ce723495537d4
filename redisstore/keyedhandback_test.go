package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestKeyedCancelInFlight: keyed acquires whose callers give up while
// their calls are in flight (done by Redis, the replies held in a proxy)
// are handed back by the store once the replies come: each key ends
// exactly as its twin, which nobody asked. Reservations on drained keys
// (every algorithm, and a policy of two limits) are cancelled; grants due
// at once on fresh keys are cancelled from their window, or, for a token
// bucket, released. With batching, a call runs on its caller's goroutine
// (the store watches the caller's context) or in the keyed batcher's runs;
// without, each runs alone.
func TestKeyedCancelInFlight(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, srv.Addr)
	type policyCase struct {
		limits  []redlimit.Config
		reserve bool // drained, then reservations; else grants due at once
	}
	var cases []policyCase
	for _, cfg := range cancelConfigs() {
		cases = append(cases, policyCase{limits: []redlimit.Config{cfg}, reserve: true})
		if cfg.Algorithm != redlimit.LeakyBucket { // its granted permits have left the queue
			cases = append(cases, policyCase{limits: []redlimit.Config{cfg}})
		}
	}
	cases = append(cases, policyCase{limits: []redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow),
		redlimit.TokenBucketConfig(20, time.Minute, 20)}, reserve: true})
	for _, batching := range []bool{true, false} {
		for i, pc := range cases {
			name := fmt.Sprintf("batching=%v/%d-%s-reserve=%v", batching, i, pc.limits[0].Algorithm, pc.reserve)
			t.Run(name, func(t *testing.T) {
				clk := clock.NewFake(storetest.T0)
				prefix := fmt.Sprintf("kc%d:", prefixes.Add(1))
				opts := []redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithTimeSource(clk)}
				if !batching {
					opts = append(opts, redisstore.WithoutBatching())
				}
				// No read timeout and no retries: a held reply must not
				// make go-redis send the call again.
				rdb := redis.NewClient(&redis.Options{Addr: p.addr(), Protocol: 2, DisableIdentity: true, PoolSize: 100, ReadTimeout: -1, MaxRetries: -1})
				t.Cleanup(func() { _ = rdb.Close() })
				st, err := redisstore.New(rdb, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				// The same keys seen straight from Redis, past the proxy.
				direct, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(prefix), redisstore.WithTimeSource(clk))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = direct.Close() })
				ctx := context.Background()
				known, _, err := st.SetPolicy(ctx, "p", redlimit.PolicyConfig{Limits: pc.limits}, redlimit.SetIfAbsent)
				if err != nil {
					t.Fatal(err)
				}
				const callers = 8
				keys := make([]redlimit.PolicyKey, callers)
				twins := make([]redlimit.PolicyKey, callers)
				for j := range keys {
					keys[j] = redlimit.PolicyKey{Policy: "p", Key: fmt.Sprint("k", j)}
					twins[j] = redlimit.PolicyKey{Policy: "p", Key: fmt.Sprint("twin", j)}
					if pc.reserve {
						drainKey(t, st, keys[j], known)
						drainKey(t, st, twins[j], known)
					}
				}
				status := func(k redlimit.PolicyKey) []redlimit.LimitState {
					d, err := direct.StatusKey(ctx, k, known)
					if err != nil {
						t.Fatal(err)
					}
					return d.Limits
				}
				wait := time.Duration(0)
				if pc.reserve {
					wait = time.Hour
				}
				p.setHold(true)
				t.Cleanup(func() { p.setHold(false) })
				base := st.Stats()
				cancels := make([]context.CancelFunc, callers)
				errs := make(chan error, callers)
				for j := range callers {
					cctx, cancel := context.WithCancel(ctx)
					cancels[j] = cancel
					go func() {
						_, err := st.AcquireKey(cctx, keys[j], known, 1, wait)
						errs <- err
					}()
				}
				// Runs sent and their replies held: their calls done by
				// Redis, their callers still waiting. Without batching
				// every call is such a run; with it, at least two are
				// (on a caller's goroutine or the batcher's), and the
				// other calls are in them or queued behind them (a caller
				// that leaves there is withdrawn, never run).
				p.waitFor(t, "held the runs' replies", func() bool {
					runs := int(st.Stats().KeyRuns - base.KeyRuns)
					if !batching {
						return runs == callers && len(p.held) == callers
					}
					return runs >= 2 && len(p.held) == runs
				})
				for _, cancel := range cancels {
					cancel()
				}
				for range callers {
					if err := <-errs; !errors.Is(err, context.Canceled) {
						t.Fatalf("a caller that gave up in flight: %v; want context.Canceled", err)
					}
				}
				p.setHold(false)
				if err := st.WaitHandBacks(ctx); err != nil {
					t.Fatal(err)
				}
				for j := range keys {
					if got, want := status(keys[j]), status(twins[j]); !reflect.DeepEqual(got, want) {
						t.Errorf("key %s after its callers gave up: %+v; its twin %+v", keys[j].Key, got, want)
					}
				}
				// Each call abandoned in flight handed back once; without
				// batching, every call was.
				s := st.Stats()
				if s.Abandoned < 2 || !batching && s.Abandoned != callers || s.HandedBack != s.Abandoned || s.HandBackFailed != 0 {
					t.Errorf("stats: %d abandoned, %d handed back, %d failed", s.Abandoned, s.HandedBack, s.HandBackFailed)
				}
			})
		}
	}
}

// drainKey takes every permit k has now.
func drainKey(t *testing.T, st *redisstore.Store, k redlimit.PolicyKey, known redlimit.PolicyConfig) {
	t.Helper()
	for range 1000 {
		d, err := st.AcquireKey(context.Background(), k, known, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Granted {
			return
		}
	}
	t.Fatalf("key %s never drained", k.Key)
}
