package refusalcache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
	"github.com/redlimit/redlimit/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
		s, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Full())
}

// fixture is a cache in front of a memory store, on a fake clock.
type fixture struct {
	t     *testing.T
	clk   *clock.Fake
	mem   *memstore.Store
	cache *refusalcache.Store
}

func newFixture(t *testing.T, set refusalcache.Settings) *fixture {
	clk := clock.NewFake(storetest.T0)
	mem := memstore.New(memstore.WithTimeSource(clk))
	set.Clock = clk
	cache, err := refusalcache.New(mem, set)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t, clk, mem, cache}
}

// setConfig stores cfg under name through the cache and returns it as stored.
func (f *fixture) setConfig(name string, cfg redlimit.Config) redlimit.Config {
	f.t.Helper()
	stored, _, err := f.cache.SetConfig(context.Background(), name, cfg, redlimit.SetResetState)
	if err != nil {
		f.t.Fatal(err)
	}
	return stored
}

func (f *fixture) acquire(key redlimit.Key, known redlimit.Config, maxWait time.Duration) redlimit.Decision {
	f.t.Helper()
	d, err := f.cache.Acquire(context.Background(), key, known, 1, maxWait)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *fixture) local() int64 { return f.cache.Stats().LocalRefusals }

// exhaust takes the one permit of a limiter of one permit per interval and
// returns the first refusal, made by the store.
func (f *fixture) exhaust(key redlimit.Key, cfg redlimit.Config) redlimit.Decision {
	f.t.Helper()
	if d := f.acquire(key, cfg, 0); !d.Granted {
		f.t.Fatalf("first permit: %+v", d)
	}
	local := f.local()
	d := f.acquire(key, cfg, 0)
	if d.Granted || f.local() != local {
		f.t.Fatalf("second call: %+v, local refusals %d -> %d; want a refusal by the store", d, local, f.local())
	}
	return d
}

// TestAnswersUntilAPermitFrees: after the store refused, the same refusal is
// answered locally with the retry-after counting down, exactly as the store
// would answer it, to calls that cannot wait long enough; a call that can
// wait exactly until the permit frees gets its reservation from the store,
// and so does every call once the permit is free.
func TestAnswersUntilAPermitFrees(t *testing.T) {
	for _, alg := range redlimit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
			key := redlimit.Key{Name: "l", Client: "c"}
			cfg := f.setConfig("l", redlimit.PerInterval(1, 100*time.Millisecond).WithAlgorithm(alg))
			first := f.exhaust(key, cfg)
			f.clk.Advance(30*time.Millisecond + 1500*time.Nanosecond)
			at := f.clk.Now().Truncate(unit(alg)) // the stores' instant
			d := f.acquire(key, cfg, 0)
			if f.local() != 1 || d.Granted || d.Wait != first.Wait-at.Sub(first.Now) || !d.Now.Equal(at) {
				t.Fatalf("30 ms later: %+v (local %d), first %+v; want the refusal answered locally, the wait %v shorter", d, f.local(), first, at.Sub(first.Now))
			}
			if alg == redlimit.LeakyBucket {
				return // calls that may wait go to the store: TestFullQueue
			}
			if d := f.acquire(key, cfg, d.Wait-time.Microsecond); d.Granted || f.local() != 2 {
				t.Fatalf("a wait a µs too short: %+v (local %d); want a local refusal", d, f.local())
			}
			if got := f.acquire(key, cfg, d.Wait); !got.Granted || got.Wait != d.Wait || f.local() != 2 {
				t.Fatalf("a wait exactly long enough: %+v (local %d); want a reservation of %v by the store", got, f.local(), d.Wait)
			}
		})
	}
	t.Run("until", func(t *testing.T) {
		f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
		key := redlimit.Key{Name: "l", Client: "c"}
		cfg := f.setConfig("l", redlimit.TokenBucketConfig(1, 100*time.Millisecond, 1))
		first := f.exhaust(key, cfg)
		f.clk.Advance(first.Wait - time.Microsecond)
		if d := f.acquire(key, cfg, 0); d.Granted || d.Wait != time.Microsecond || f.local() != 1 {
			t.Fatalf("a µs before the permit frees: %+v (local %d)", d, f.local())
		}
		f.clk.Advance(time.Microsecond)
		if d := f.acquire(key, cfg, 0); !d.Granted || f.local() != 1 {
			t.Fatalf("when the permit frees: %+v (local %d); want a grant by the store", d, f.local())
		}
	})
}

// unit is the unit the stores count time in for alg.
func unit(alg redlimit.Algorithm) time.Duration {
	if alg == redlimit.SlidingLog {
		return time.Millisecond
	}
	return time.Microsecond
}

// TestChangesThroughTheCache: a release, a cancel, a config change, a
// deletion or an expiry made through the cache ends its cached refusals:
// the next call goes to the store and gets what the change freed.
func TestChangesThroughTheCache(t *testing.T) {
	ctx := context.Background()
	changes := []struct {
		name string
		// reserve: a reservation is made before the limiter is exhausted.
		reserve bool
		change  func(f *fixture, key redlimit.Key, cfg redlimit.Config, res redlimit.Decision) redlimit.Config
		// want: the store's answer after the change.
		want func(d, res redlimit.Decision, mode redlimit.Mode) bool
	}{
		{"release", false, func(f *fixture, key redlimit.Key, cfg redlimit.Config, _ redlimit.Decision) redlimit.Config {
			if got, err := f.cache.Release(ctx, key, cfg, 1, time.Time{}); got != 1 || err != nil {
				t.Fatalf("Release = %d, %v", got, err)
			}
			return cfg
		}, granted},
		{"cancel", true, func(f *fixture, key redlimit.Key, cfg redlimit.Config, res redlimit.Decision) redlimit.Config {
			if got, err := f.cache.Cancel(ctx, key, cfg, res.At, 1); got != 1 || err != nil {
				t.Fatalf("Cancel = %d, %v", got, err)
			}
			return cfg
		}, func(d, res redlimit.Decision, _ redlimit.Mode) bool {
			return !d.Granted && d.Wait == res.Wait // the reserved permit is free again at its instant
		}},
		{"set config", false, func(f *fixture, _ redlimit.Key, _ redlimit.Config, _ redlimit.Decision) redlimit.Config {
			return f.setConfig("l", redlimit.TokenBucketConfig(5, time.Hour, 5))
		}, granted},
		{"delete", false, func(f *fixture, _ redlimit.Key, cfg redlimit.Config, _ redlimit.Decision) redlimit.Config {
			if ok, err := f.cache.Delete(ctx, "l"); !ok || err != nil {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
			return cfg // restored from the caller's config
		}, func(d, _ redlimit.Decision, mode redlimit.Mode) bool {
			// The Overall state goes with the config; a client's
			// state stays, under the restored config's epoch.
			return d.Granted == (mode == redlimit.Overall)
		}},
	}
	for _, mode := range []redlimit.Mode{redlimit.Overall, redlimit.PerClient} {
		for _, c := range changes {
			t.Run(fmt.Sprint(mode, "/", c.name), func(t *testing.T) {
				f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
				key := redlimit.Key{Name: "l", Client: "c"}
				cfg := f.setConfig("l", redlimit.TokenBucketConfig(1, time.Hour, 1).WithMode(mode))
				if d := f.acquire(key, cfg, 0); !d.Granted {
					t.Fatalf("first permit: %+v", d)
				}
				var res redlimit.Decision
				if c.reserve {
					if res = f.acquire(key, cfg, -1); !res.Granted || res.Wait <= 0 {
						t.Fatalf("reservation: %+v", res)
					}
				}
				f.exhaust2(key, cfg)
				cfg = c.change(f, key, cfg, res)
				if d := f.acquire(key, cfg, 0); !c.want(d, res, mode) || f.local() != 1 {
					t.Fatalf("after the %s: %+v (local %d); want the store's answer", c.name, d, f.local())
				}
			})
		}
	}
}

func granted(d, _ redlimit.Decision, _ redlimit.Mode) bool { return d.Granted }

// exhaust2 checks that a limiter with no permit left is refused by the
// store, then locally.
func (f *fixture) exhaust2(key redlimit.Key, cfg redlimit.Config) {
	f.t.Helper()
	local := f.local()
	for i := range 2 {
		if d := f.acquire(key, cfg, 0); d.Granted || f.local() != local+int64(i) {
			f.t.Fatalf("call %d on an exhausted limiter: %+v (local %d)", i, d, f.local())
		}
	}
}

// TestPerClientEntries: a PerClient limiter's refusals are cached per
// client: another client is asked of the store, and a release by one client
// ends only that client's entry.
func TestPerClientEntries(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour).WithMode(redlimit.PerClient))
	a, b := redlimit.Key{Name: "l", Client: "a"}, redlimit.Key{Name: "l", Client: "b"}
	f.exhaust(a, cfg)
	if d := f.acquire(b, cfg, 0); !d.Granted {
		t.Fatalf("client b after a's refusal: %+v; want its own permit", d)
	}
	f.exhaust2(b, cfg) // b refused by the store, then locally
	if d := f.acquire(a, cfg, 0); d.Granted || f.local() != 2 {
		t.Fatalf("a: %+v (local %d); want a local refusal", d, f.local())
	}
	if got, err := f.cache.Release(ctx, b, cfg, 1, time.Time{}); got != 1 || err != nil {
		t.Fatalf("Release(b) = %d, %v", got, err)
	}
	if d := f.acquire(a, cfg, 0); d.Granted || f.local() != 3 {
		t.Fatalf("a after b's release: %+v (local %d); want a's entry kept", d, f.local())
	}
	if d := f.acquire(b, cfg, 0); !d.Granted || f.local() != 3 {
		t.Fatalf("b after its release: %+v (local %d); want its permit from the store", d, f.local())
	}
}

// TestExpire: a refusal cached before a limiter's TTL runs out is not
// answered after it: the state is gone then, and the store answers afresh.
func TestExpire(t *testing.T) {
	ctx := context.Background()
	for _, ttl := range []time.Duration{20 * time.Millisecond, 20*time.Millisecond + 300*time.Microsecond} {
		t.Run(ttl.String(), func(t *testing.T) {
			f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
			key := redlimit.Key{Name: "l", Client: "c"}
			cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour))
			f.exhaust(key, cfg)
			if ok, err := f.cache.Expire(ctx, "l", ttl); !ok || err != nil {
				t.Fatalf("Expire = %v, %v", ok, err)
			}
			f.clk.Advance(5 * time.Millisecond)
			f.exhaust2(key, cfg) // refused by the store (the Expire ended the entry), then locally
			f.clk.Advance(ttl - 5*time.Millisecond)
			if d := f.acquire(key, cfg, 0); !d.Granted || f.local() != 1 {
				t.Fatalf("once the TTL ran out: %+v (local %d); want a grant from a fresh state", d, f.local())
			}
			// Calls sent after the expiry's latest instant are cached
			// as any other.
			f.clk.Advance(time.Microsecond)
			f.exhaust2(key, cfg)
		})
	}
	t.Run("cleared", func(t *testing.T) {
		f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
		key := redlimit.Key{Name: "l", Client: "c"}
		cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour))
		f.exhaust(key, cfg)
		if ok, err := f.cache.Expire(ctx, "l", 20*time.Millisecond); !ok || err != nil {
			t.Fatalf("Expire = %v, %v", ok, err)
		}
		if ok, err := f.cache.ClearExpire(ctx, "l"); !ok || err != nil {
			t.Fatalf("ClearExpire = %v, %v", ok, err)
		}
		f.exhaust2(key, cfg)
		f.clk.Advance(time.Second)
		if d := f.acquire(key, cfg, 0); d.Granted || f.local() != 2 {
			t.Fatalf("past the cleared TTL: %+v (local %d); want the refusal still answered locally", d, f.local())
		}
	})
}

// TestOtherProcessesSeenWithinMaxStale: a release the cache does not see
// (another process's, straight to the store) is seen once MaxStale passed
// since the refusal's call, not before: the cost of answering locally.
func TestOtherProcessesSeenWithinMaxStale(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, refusalcache.Settings{MaxStale: 50 * time.Millisecond})
	key := redlimit.Key{Name: "l", Client: "c"}
	cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour))
	f.exhaust(key, cfg)
	if got, err := f.mem.Release(ctx, redlimit.Key{Name: "l", Client: "other"}, cfg, 1, time.Time{}); got != 1 || err != nil {
		t.Fatalf("Release = %d, %v", got, err)
	}
	f.clk.Advance(50*time.Millisecond - time.Nanosecond)
	if d := f.acquire(key, cfg, 0); d.Granted || f.local() != 1 {
		t.Fatalf("within MaxStale: %+v (local %d); want the stale refusal", d, f.local())
	}
	f.clk.Advance(time.Nanosecond)
	if d := f.acquire(key, cfg, 0); !d.Granted || f.local() != 1 {
		t.Fatalf("MaxStale after the refusal: %+v (local %d); want the released permit", d, f.local())
	}
}

// gate is a memory store whose Acquire, once armed, holds its decision
// back until the test lets it go: the reply of a remote store delayed on
// its way back.
type gate struct {
	*memstore.Store
	decided chan redlimit.Decision // armed: the held decision
	proceed chan struct{}
}

func (g *gate) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	d, err := g.Store.Acquire(ctx, key, known, n, maxWait)
	if g.decided != nil {
		g.decided <- d
		<-g.proceed
	}
	return d, err
}

// TestReleaseDuringRefusal: a release made through the cache while a
// refusal of the same limiter is on its way back leaves no cached refusal
// behind, though the refusal's reply comes after the release's: the store
// made the refusal before the release.
func TestReleaseDuringRefusal(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0)
	g := &gate{Store: memstore.New(memstore.WithTimeSource(clk))}
	cache, err := refusalcache.New(g, refusalcache.Settings{Clock: clk, MaxStale: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := cache.SetConfig(ctx, "l", redlimit.PerInterval(1, time.Hour), redlimit.SetResetState)
	if err != nil {
		t.Fatal(err)
	}
	a, b := redlimit.Key{Name: "l", Client: "a"}, redlimit.Key{Name: "l", Client: "b"}
	if d, err := cache.Acquire(ctx, a, cfg, 1, 0); err != nil || !d.Granted {
		t.Fatalf("first permit: %+v, %v", d, err)
	}
	g.decided, g.proceed = make(chan redlimit.Decision), make(chan struct{})
	refused := make(chan error, 1)
	go func() {
		d, err := cache.Acquire(ctx, a, cfg, 1, 0)
		if err == nil && d.Granted {
			err = fmt.Errorf("granted: %+v", d)
		}
		refused <- err
	}()
	if d := <-g.decided; d.Granted {
		t.Fatalf("the store granted the second permit: %+v", d)
	}
	g.decided = nil // the gate holds only that one
	if got, err := cache.Release(ctx, b, cfg, 1, time.Time{}); got != 1 || err != nil {
		t.Fatalf("Release = %d, %v", got, err)
	}
	close(g.proceed)
	if err := <-refused; err != nil {
		t.Fatalf("the call made before the release: %v; want a refusal", err)
	}
	if d, err := cache.Acquire(ctx, a, cfg, 1, 0); err != nil || !d.Granted {
		t.Fatalf("after the release: %+v, %v; want the released permit (local refusals: %d)", d, err, cache.Stats().LocalRefusals)
	}
}

// TestFullQueue: a leaky bucket whose queue is full is refused locally to
// calls that cannot wait, while a call that may wait asks the store and
// learns that the queue is full; a refusal to a call that could not wait
// (which need not say whether the queue is full) answers only such calls.
func TestFullQueue(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	key := redlimit.Key{Name: "full", Client: "c"}
	cfg := f.setConfig("full", redlimit.LeakyBucketConfig(1, time.Second, 2))
	for i := 0; ; i++ {
		d, err := f.cache.Acquire(ctx, key, cfg, 1, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Granted {
			if !d.Full {
				t.Fatalf("call %d refused, not as full: %+v", i, d)
			}
			break
		}
	}
	for range 3 {
		if d := f.acquire(key, cfg, 0); d.Granted {
			t.Fatalf("TryAcquire on a full queue: %+v", d)
		}
	}
	if got := f.local(); got != 3 {
		t.Fatalf("3 TryAcquires on a full queue: %d answered locally; want 3", got)
	}
	if d := f.acquire(key, cfg, time.Hour); d.Granted || !d.Full || f.local() != 3 {
		t.Fatalf("a call that may wait an hour: %+v (local %d); want refused by the store as full", d, f.local())
	}

	// The entry made by a call that could not wait.
	g := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	cfg = g.setConfig("full", redlimit.LeakyBucketConfig(1, time.Second, 2))
	for range 2 {
		if d := g.acquire(key, cfg, -1); !d.Granted {
			t.Fatalf("filling the queue: %+v", d)
		}
	}
	g.exhaust2(key, cfg)
	if d := g.acquire(key, cfg, time.Millisecond); d.Granted || !d.Full || g.local() != 1 {
		t.Fatalf("a call that may wait a ms: %+v (local %d); want refused by the store as full", d, g.local())
	}
}

// TestBadInputGoesToStore: a call with a bad argument on a log that has a
// cached refusal gets the store's error, as without the cache.
func TestBadInputGoesToStore(t *testing.T) {
	f := newFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	key := redlimit.Key{Name: "l", Client: "c"}
	cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour))
	f.exhaust(key, cfg)
	bad := cfg
	bad.Rate = -1
	for _, c := range []struct {
		key   redlimit.Key
		known redlimit.Config
	}{
		{key, bad},
		{redlimit.Key{Name: "l", Client: "bad\x01id"}, cfg},
	} {
		_, want := f.mem.Acquire(context.Background(), c.key, c.known, 1, 0)
		d, err := f.cache.Acquire(context.Background(), c.key, c.known, 1, 0)
		if f.local() != 0 || (want == nil) != (err == nil) || (want != nil && !errors.Is(err, redlimit.ErrInvalidArgument)) {
			t.Errorf("Acquire(%+v, %+v) = %+v, %v (local %d); want the store's %v", c.key, c.known, d, err, f.local(), want)
		}
	}
	if _, err := refusalcache.New(nil, refusalcache.Settings{}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := refusalcache.New(f.mem, refusalcache.Settings{MaxStale: -1}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("New(MaxStale -1) = %v", err)
	}
}

// TestSweep: entries past their end, of logs never asked again, are
// swept as new ones come: the cache's memory follows the refusals of the
// last MaxStale, not every log ever refused.
func TestSweep(t *testing.T) {
	f := newFixture(t, refusalcache.Settings{MaxStale: 10 * time.Millisecond})
	cfg := f.setConfig("l", redlimit.PerInterval(1, time.Hour).WithMode(redlimit.PerClient))
	for i := range 3000 {
		key := redlimit.Key{Name: "l", Client: fmt.Sprint("c", i)}
		f.acquire(key, cfg, 0)
		if d := f.acquire(key, cfg, 0); d.Granted {
			t.Fatalf("client %d: %+v", i, d)
		}
		if i%1000 == 999 {
			f.clk.Advance(20 * time.Millisecond)
		}
	}
	if n := f.cache.Stats().Entries; n > 2048 {
		t.Fatalf("%d entries held after 3000 clients refused in three rounds, each past its end by the next; want at most 2048", n)
	}
}
