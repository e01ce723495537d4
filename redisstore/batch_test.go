package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
)

// TestBatchDifferential: one script run carrying batches of calls on
// several limiters answers each call as the Go rules (the memory store)
// answer the same calls made one by one at the run's instant; every
// algorithm and mode, random batches, limiters that are not initialized and
// clients that do not know the config among them.
func TestBatchDifferential(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	var runs, batches, calls int
	for trace := 0; trace < 150; trace++ {
		rng := rand.New(rand.NewPCG(uint64(trace), 99))
		clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		mem := memstore.New(memstore.WithTimeSource(clk))
		red, _ := New(rdb, WithPrefix(fmt.Sprintf("batch%d:", trace)), WithTimeSource(clk))
		// Limiter 0 has no config; the others one each.
		type limiter struct {
			key    redlimit.Key
			mc, rc redlimit.Config
		}
		lims := []limiter{{key: redlimit.Key{Name: "none", Client: "c"}}}
		for i, n := 1, 1+rng.IntN(4); i <= n; i++ {
			alg := redlimit.Algorithms[(trace+i)%len(redlimit.Algorithms)]
			cfg := redlimit.PerInterval(1+rng.Int64N(8), time.Duration(1+rng.Int64N(30))*time.Millisecond).WithAlgorithm(alg)
			if rng.IntN(2) == 0 {
				cfg = cfg.WithMode(redlimit.PerClient)
			}
			key := redlimit.Key{Name: fmt.Sprint("b", i), Client: fmt.Sprint("c", rng.IntN(2))}
			mc, _, _ := mem.SetConfig(ctx, key.Name, cfg, redlimit.SetResetState)
			rc, _, _ := red.SetConfig(ctx, key.Name, cfg, redlimit.SetResetState)
			lims = append(lims, limiter{key, mc, rc})
		}
		reserved := map[int][]redlimit.Decision{}
		for step := 0; step < 40; step++ {
			clk.Advance(time.Duration(rng.Int64N(12_000)) * time.Microsecond) // sub-ms steps too
			var works []*work
			var wants [][]string
			var errs []error
			var which []int
			for li, lim := range lims {
				if rng.IntN(3) == 0 && len(works) > 0 {
					continue // not in this run
				}
				key, mc, rc := lim.key, lim.mc, lim.rc
				if rng.IntN(4) == 0 {
					mc, rc = redlimit.Config{}, redlimit.Config{} // this client knows no config
				}
				most := max(lim.mc.MaxPermits(), 1)
				k := 1 + rng.IntN(8)
				batch := make([]call, k)
				want := make([]string, k)
				var werr error
				for i := range batch {
					n := 1 + rng.Int64N(most+1)
					var err error
					switch p := rng.IntN(10); {
					case p < 6:
						wait := []int64{0, -1, rng.Int64N(40_000)}[rng.IntN(3)] // µs
						batch[i] = call{op: opAcquire, n: n, arg: wait}
						maxWait := time.Duration(wait) * time.Microsecond
						if wait < 0 {
							maxWait = -1
						}
						var d redlimit.Decision
						d, err = mem.Acquire(ctx, key, mc, n, maxWait)
						if errors.Is(err, redlimit.ErrPermitsExceedRate) {
							want[i], err = "too many", nil
							continue
						}
						if d.Granted && d.Wait > 0 {
							reserved[li] = append(reserved[li], d)
						}
						want[i] = fmt.Sprint(d.Granted, d.Remaining, d.Wait.Microseconds(), atUS(d))
					case p < 7 && len(reserved[li]) > 0:
						// Any of the waiters, in any order; each at most once.
						j := rng.IntN(len(reserved[li]))
						d := reserved[li][j]
						reserved[li] = slices.Delete(reserved[li], j, j+1)
						batch[i] = call{op: opCancel, n: n, arg: d.At.UnixMicro()}
						got, e := mem.Cancel(ctx, key, mc, d.At, n)
						want[i], err = fmt.Sprint("cancel ", got), e
					case p < 8:
						batch[i] = call{op: opRelease, n: n, arg: -1}
						got, e := mem.Release(ctx, key, mc, n, time.Time{})
						want[i], err = fmt.Sprint("release ", got), e
					default:
						batch[i] = call{op: opAvailable}
						got, _, e := mem.Available(ctx, key, mc)
						want[i], err = fmt.Sprint("available ", got), e
					}
					if err != nil {
						werr = err
					}
				}
				works = append(works, &work{key: key, known: encode(rc), calls: batch})
				wants = append(wants, want)
				errs = append(errs, werr)
				which = append(which, li)
			}
			red.runWorks(ctx, works)
			for wi, w := range works {
				want := wants[wi]
				if errs[wi] != nil || w.err != nil {
					if !errors.Is(w.err, redlimit.ErrNotInitialized) || !errors.Is(errs[wi], redlimit.ErrNotInitialized) {
						t.Fatalf("trace %d step %d %s: redis %v, Go rules %v", trace, step, w.key.Name, w.err, errs[wi])
					}
					continue
				}
				for i, r := range w.rs {
					var got string
					switch c := w.calls[i]; {
					case r.code == -2:
						got = "too many"
					case c.op == opAcquire:
						at := int64(0)
						if r.code == 1 {
							at = r.at()
						}
						got = fmt.Sprint(r.code == 1, r.value, r.wait, at)
					case c.op == opCancel:
						got = fmt.Sprint("cancel ", r.value)
					case c.op == opRelease:
						got = fmt.Sprint("release ", r.value)
					default:
						got = fmt.Sprint("available ", r.value)
					}
					if got != want[i] {
						t.Fatalf("trace %d step %d %s call %d of %d %+v: redis %q, Go rules %q", trace, step, w.key.Name, i, len(w.calls), w.calls[i], got, want[i])
					}
					if stored := lims[which[wi]].mc; !r.cfg.SameLimit(stored) {
						t.Fatalf("trace %d step %d %s: config %v in the reply, %v stored", trace, step, w.key.Name, r.cfg, stored)
					}
				}
				batches++
				calls += len(w.calls)
			}
			runs++
		}
	}
	t.Logf("%d runs, %d batches on one limiter each, %d calls, every answer identical", runs, batches, calls)
}

func atUS(d redlimit.Decision) int64 {
	if !d.Granted {
		return 0
	}
	return d.At.UnixMicro()
}

// TestConcurrentClientsOneStore: callers of several client IDs on one
// PerClient limiter of one store (their calls queue in separate lanes) each
// get exactly their own limit, never another's.
func TestConcurrentClientsOneStore(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := New(rdb, WithTimeSource(clk), WithRefusalCache(0))
	if err != nil {
		t.Fatal(err)
	}
	const rate, clients, perClient = 50, 3, 8
	cfg := redlimit.PerMinute(rate).WithMode(redlimit.PerClient)
	granted := make([]atomic.Int64, clients)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		l, err := redlimit.New(s, "shared", redlimit.WithConfig(cfg), redlimit.WithClientID(fmt.Sprint("client-", c)))
		if err != nil {
			t.Fatal(err)
		}
		for g := 0; g < perClient; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					r, err := l.TryAcquire(ctx, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						granted[c].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	for c := range granted {
		if got := granted[c].Load(); got != rate {
			t.Errorf("client %d: %d grants of %d tries; want exactly %d", c, got, perClient*20, rate)
		}
	}
}

// TestClusterBehindOneEndpoint: a clustered Redis reached through a plain
// client (a single-shard Cluster, as behind some proxies) refuses runs whose
// keys span hash slots; concurrent calls on many limiters must still all be
// answered, each limiter's calls going alone once the server said so.
func TestClusterBehindOneEndpoint(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-single.conf")
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(rdb.ClusterInfo(ctx).Val(), "cluster_state:ok"); {
		if time.Now().After(deadline) {
			t.Fatal("the one-node cluster never became ok")
		}
		time.Sleep(10 * time.Millisecond) // waiting for Redis's own state change
	}
	s, err := New(rdb, WithRefusalCache(0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	for i := 0; i < 32; i++ {
		l, _ := redlimit.New(s, fmt.Sprint("limiter-", i), redlimit.WithConfig(redlimit.PerSecond(1<<20)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				if _, err := l.TryAcquire(ctx, 1); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 3200 calls failed, first: %v", n, first.Load())
	}
	if s.batch.Grouping() {
		t.Error("no run carried two limiters: the test did not reach the server's refusal")
	}
}

// TestForeignDataInARun: a limiter whose keys hold what redlimit did not
// write (a key of the wrong type, a state that is not numbers) is answered
// ErrCorrupt alone; the other limiters of the same run are served.
func TestForeignDataInARun(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	perClient := redlimit.PerSecond(10).WithMode(redlimit.PerClient)
	for _, name := range []string{"ok1", "wrongtype", "garbage", "ok2"} {
		if _, _, err := s.SetConfig(ctx, name, perClient, redlimit.SetResetState); err != nil {
			t.Fatal(err)
		}
	}
	rdb.HSet(ctx, s.Prefix()+"{wrongtype}:client:c", "x", "1") // a hash where a string belongs
	rdb.Set(ctx, s.Prefix()+"{garbage}:client:c", "not numbers at all", time.Minute)
	var works []*work
	for _, name := range []string{"ok1", "wrongtype", "garbage", "ok2"} {
		cfg, err := s.Config(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		works = append(works, &work{key: redlimit.Key{Name: name, Client: "c"}, known: encode(cfg), calls: []call{{op: opAcquire, n: 1}}})
	}
	s.runWorks(ctx, works)
	for i, want := range []error{nil, redlimit.ErrCorrupt, nil, nil} {
		w := works[i]
		if want == nil && (w.err != nil || w.rs[0].code != 1) {
			t.Errorf("%s: %v %+v; want a grant", w.key.Name, w.err, w.rs)
		}
		if want != nil && !errors.Is(w.err, want) {
			t.Errorf("%s: %v; want %v", w.key.Name, w.err, want)
		}
	}
}
