// Package storetest is the conformance suite every redlimit.Store passes: one
// set of behaviours, run against the memory store, real Redis and Redisson's
// layout. A store declares what it can do (Capabilities; Full for all of
// it) and Run runs every case that applies, each algorithm-dependent case
// as a subtest per algorithm:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
//			return mystore.New(mystore.WithClock(clk))
//		}, storetest.Full())
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/clock"
)

// Factory returns a fresh, empty store that reads time from clk.
type Factory func(t *testing.T, clk *clock.Fake) redlimit.Store

// T0 is the fake clock's start in every test.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// env is one test's store, clock and helpers.
type env struct {
	t     *testing.T
	store redlimit.Store
	clock *clock.Fake
	ctx   context.Context
}

func newEnv(t *testing.T, f Factory) *env {
	clk := clock.NewFake(T0)
	return &env{t: t, store: f(t, clk), clock: clk, ctx: context.Background()}
}

func (e *env) limiter(name string, opts ...redlimit.Option) *redlimit.Limiter {
	e.t.Helper()
	l, err := redlimit.New(e.store, name, append([]redlimit.Option{redlimit.WithClock(e.clock)}, opts...)...)
	if err != nil {
		e.t.Fatalf("New(%q): %v", name, err)
	}
	return l
}

// configured returns a limiter with cfg set (replacing any stored config).
func (e *env) configured(name string, cfg redlimit.Config, opts ...redlimit.Option) *redlimit.Limiter {
	e.t.Helper()
	l := e.limiter(name, opts...)
	if err := l.SetRate(e.ctx, cfg); err != nil {
		e.t.Fatalf("SetRate(%v): %v", cfg, err)
	}
	return l
}

// waitTimers waits until n callers sleep on the fake clock (a real-time
// guard turns a bug that never gets there into a failure, not a hang).
func (e *env) waitTimers(n int) {
	e.t.Helper()
	guard := make(chan struct{})
	t := time.AfterFunc(30*time.Second, func() { close(guard) })
	defer t.Stop()
	if !e.clock.WaitForTimers(n, guard) {
		e.t.Fatalf("%d callers never waited on the clock (%d do)", n, e.clock.Timers())
	}
}

func (e *env) try(l *redlimit.Limiter, n int64) redlimit.Result {
	e.t.Helper()
	r, err := l.TryAcquire(e.ctx, n)
	if err != nil {
		e.t.Fatalf("TryAcquire(%d): %v", n, err)
	}
	return r
}

func (e *env) available(l *redlimit.Limiter) int64 {
	e.t.Helper()
	n, err := l.AvailablePermits(e.ctx)
	if err != nil {
		e.t.Fatalf("AvailablePermits: %v", err)
	}
	return n
}

func testTrySetRate(e *env) {
	l := e.limiter("try-set")
	if _, err := l.Config(e.ctx); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("Config before set: err = %v, want ErrNotInitialized", err)
	}
	cfg := redlimit.PerInterval(3, 10*time.Second)
	set, err := l.TrySetRate(e.ctx, cfg)
	if !set || err != nil {
		e.t.Fatalf("first TrySetRate = %v, %v; want true, nil", set, err)
	}
	set, err = l.TrySetRate(e.ctx, cfg)
	if set || err != nil {
		e.t.Fatalf("same TrySetRate again = %v, %v; want false, nil", set, err)
	}
	other := redlimit.PerInterval(5, 10*time.Second)
	set, err = e.limiter("try-set").TrySetRate(e.ctx, other)
	var mm *redlimit.MismatchError
	if set || !errors.Is(err, redlimit.ErrConfigMismatch) || !errors.As(err, &mm) {
		e.t.Fatalf("different TrySetRate = %v, %v; want false, ErrConfigMismatch", set, err)
	}
	if mm.Stored.Rate != 3 || mm.Requested.Rate != 5 {
		e.t.Fatalf("mismatch names stored %v and requested %v", mm.Stored, mm.Requested)
	}
	got, err := l.Config(e.ctx)
	if err != nil || !got.SameLimit(cfg) {
		e.t.Fatalf("Config = %v, %v; want %v", got, err, cfg)
	}
}

// testConfigEpoch: a config stored by TrySetRate carries an epoch.
func testConfigEpoch(e *env) {
	cfg := redlimit.PerInterval(3, 10*time.Second)
	l := e.limiter("epoch")
	if set, err := l.TrySetRate(e.ctx, cfg); !set || err != nil {
		e.t.Fatalf("TrySetRate = %v, %v; want true, nil", set, err)
	}
	got, err := l.Config(e.ctx)
	if err != nil || !got.SameLimit(cfg) || got.Epoch == 0 {
		e.t.Fatalf("Config = %v (epoch %d), %v; want %v with an epoch", got, got.Epoch, err, cfg)
	}
}

func testSlidingWindow(e *env) {
	l := e.configured("window", redlimit.PerInterval(3, 10*time.Second))
	for i := int64(0); i < 3; i++ {
		r := e.try(l, 1)
		if !r.Allowed || r.Remaining != 2-i || !r.At.Equal(e.clock.Now()) {
			e.t.Fatalf("grant %d: %+v", i, r)
		}
		e.clock.Advance(time.Second)
	}
	// At +3s the window holds grants at 0, 1 and 2 s; the first returns at 10 s.
	r := e.try(l, 1)
	if r.Allowed || r.RetryAfter != 7*time.Second || r.Remaining != 0 {
		e.t.Fatalf("4th call: %+v; want refused, retry after 7s", r)
	}
	if r := e.try(l, 2); r.Allowed || r.RetryAfter != 8*time.Second {
		e.t.Fatalf("2 permits: %+v; want retry after 8s", r)
	}
	e.clock.Advance(7*time.Second - time.Millisecond)
	if r := e.try(l, 1); r.Allowed || r.RetryAfter != time.Millisecond {
		e.t.Fatalf("1 ms early: %+v", r)
	}
	e.clock.Advance(time.Millisecond)
	if r := e.try(l, 1); !r.Allowed || r.Remaining != 0 {
		e.t.Fatalf("at 10 s: %+v; want granted, 0 left", r)
	}
	if n := e.available(l); n != 0 {
		e.t.Fatalf("available = %d, want 0", n)
	}
	e.clock.Advance(time.Second)
	if n := e.available(l); n != 1 {
		e.t.Fatalf("available at 11 s = %d, want 1", n)
	}
}

// testSeed002 is Redisson's documented scenario: 3 permits per 10 s, 20 calls with a 1 s
// pause before every third: only the first 3 are granted.
func testSeed002(e *env) {
	l := e.configured("seed002", redlimit.PerInterval(3, 10*time.Second))
	var granted []int
	for i := 0; i < 20; i++ {
		if i > 0 && i%3 == 0 {
			e.clock.Advance(time.Second)
		}
		if e.try(l, 1).Allowed {
			granted = append(granted, i)
		}
	}
	if fmt.Sprint(granted) != "[0 1 2]" {
		e.t.Fatalf("granted calls %v, want [0 1 2]", granted)
	}
}

func testSetRateKeepsGrants(e *env) {
	l := e.configured("keep", redlimit.PerInterval(3, 10*time.Second))
	for i := 0; i < 3; i++ {
		e.try(l, 1)
	}
	// A bigger rate adds only the difference: the 3 granted still count.
	if err := l.SetRate(e.ctx, redlimit.PerInterval(5, 10*time.Second)); err != nil {
		e.t.Fatal(err)
	}
	if n := e.available(l); n != 2 {
		e.t.Fatalf("available after raising rate 3->5 = %d, want 2", n)
	}
	// A client that never saw the change follows it at once.
	other := e.limiter("keep")
	if r := e.try(other, 2); !r.Allowed || r.Remaining != 0 {
		e.t.Fatalf("other client: %+v; want granted 2, 0 left", r)
	}
	// A lower rate keeps the grants too: nothing more until they age out.
	if err := l.SetRate(e.ctx, redlimit.PerInterval(1, 10*time.Second)); err != nil {
		e.t.Fatal(err)
	}
	if r := e.try(l, 1); r.Allowed || r.RetryAfter != 10*time.Second {
		e.t.Fatalf("after lowering: %+v; want refused for 10s", r)
	}
	// A shorter interval ages the grants out sooner.
	if err := l.SetRate(e.ctx, redlimit.PerInterval(1, time.Second)); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("after shortening the interval: %+v; want granted", r)
	}
}

func testSetRateReset(e *env) {
	l := e.configured("reset", redlimit.PerInterval(2, time.Minute))
	e.try(l, 2)
	if err := l.SetRate(e.ctx, redlimit.PerInterval(2, time.Minute), redlimit.ResetState()); err != nil {
		e.t.Fatal(err)
	}
	if n := e.available(l); n != 2 {
		e.t.Fatalf("Overall after reset: %d available, want 2", n)
	}
}

// testSetRateResetEveryClient: a reset by one client of a PerClient limiter
// empties another client's state too.
func testSetRateResetEveryClient(e *env) {
	pc := e.configured("reset-pc", redlimit.PerInterval(2, time.Minute).WithMode(redlimit.PerClient), redlimit.WithClientID("a"))
	e.try(pc, 2)
	if err := e.limiter("reset-pc", redlimit.WithClientID("b")).SetRate(e.ctx, redlimit.PerInterval(2, time.Minute).WithMode(redlimit.PerClient), redlimit.ResetState()); err != nil {
		e.t.Fatal(err)
	}
	if n := e.available(pc); n != 2 {
		e.t.Fatalf("PerClient after a reset by another client: %d available, want 2", n)
	}
}

func testModes(e *env) {
	cfg := redlimit.PerInterval(2, time.Minute)
	a := e.configured("overall", cfg)
	b := e.limiter("overall")
	e.try(a, 1)
	if r := e.try(b, 1); !r.Allowed || r.Remaining != 0 {
		e.t.Fatalf("overall, second client: %+v", r)
	}
	if r := e.try(a, 1); r.Allowed {
		e.t.Fatalf("overall limit shared: third grant %+v", r)
	}
	pcfg := cfg.WithMode(redlimit.PerClient)
	x := e.configured("per-client", pcfg, redlimit.WithClientID("x"))
	y := e.limiter("per-client", redlimit.WithClientID("y"))
	if r := e.try(x, 2); !r.Allowed {
		e.t.Fatalf("client x: %+v", r)
	}
	if r := e.try(y, 2); !r.Allowed {
		e.t.Fatalf("client y has its own limit: %+v", r)
	}
	if r := e.try(x, 1); r.Allowed {
		e.t.Fatalf("client x over its limit: %+v", r)
	}
	// Same client ID, another Limiter value: the same limit.
	if r := e.try(e.limiter("per-client", redlimit.WithClientID("y")), 1); r.Allowed {
		e.t.Fatalf("client y again: %+v", r)
	}
	// Switching modes takes effect for every client.
	if err := x.SetRate(e.ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
	if r := e.try(y, 2); !r.Allowed {
		e.t.Fatalf("after switching to overall: %+v", r)
	}
	if r := e.try(x, 1); r.Allowed {
		e.t.Fatalf("overall after switch, x: %+v", r)
	}
}

func testRelease(e *env) {
	l := e.configured("release", redlimit.PerInterval(5, time.Minute))
	e.try(l, 2)
	e.clock.Advance(time.Second)
	e.try(l, 3)
	got, err := l.Release(e.ctx, 4)
	if err != nil || got != 4 {
		e.t.Fatalf("Release(4) = %d, %v", got, err)
	}
	if n := e.available(l); n != 4 {
		e.t.Fatalf("available after release = %d, want 4", n)
	}
	got, err = l.Release(e.ctx, 10)
	if err != nil || got != 1 {
		e.t.Fatalf("Release(10) with 1 held = %d, %v; want 1", got, err)
	}
	got, err = l.Release(e.ctx, 1)
	if err != nil || got != 0 {
		e.t.Fatalf("Release with nothing held = %d, %v; want 0", got, err)
	}
	if n := e.available(l); n != 5 {
		e.t.Fatalf("available = %d, want 5", n)
	}
}

func testSelfHealing(e *env) {
	cfg := redlimit.PerInterval(2, time.Minute)
	knows := e.limiter("heal", redlimit.WithConfig(cfg))
	// Nothing stored yet, but the client knows the config: it creates it.
	if r := e.try(knows, 1); !r.Allowed || r.Remaining != 1 {
		e.t.Fatalf("first call with a known config: %+v", r)
	}
	// The store loses everything (as a Redis restart without persistence would).
	if existed, err := e.limiter("heal").Delete(e.ctx); !existed || err != nil {
		e.t.Fatalf("Delete = %v, %v", existed, err)
	}
	if r := e.try(knows, 2); !r.Allowed {
		e.t.Fatalf("after data loss, a client that knows the config: %+v", r)
	}
	got, err := e.limiter("heal").Config(e.ctx)
	if err != nil || !got.SameLimit(cfg) {
		e.t.Fatalf("restored config = %v, %v", got, err)
	}
	// A client that knows nothing gets a typed error, not a raw one.
	if _, err := e.limiter("never-set").TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("unknown limiter: %v, want ErrNotInitialized", err)
	}
	// The stored config wins over what a client remembers.
	if err := e.limiter("heal").SetRate(e.ctx, redlimit.PerInterval(10, time.Minute)); err != nil {
		e.t.Fatal(err)
	}
	if r := e.try(knows, 5); !r.Allowed {
		e.t.Fatalf("stale client after a SetRate elsewhere: %+v", r)
	}
}

func testDeleteExpire(e *env) {
	l := e.configured("del", redlimit.PerInterval(1, time.Minute))
	e.try(l, 1)
	if ok, err := l.Expire(e.ctx, time.Hour); !ok || err != nil {
		e.t.Fatalf("Expire = %v, %v", ok, err)
	}
	if ok, err := l.ClearExpire(e.ctx); !ok || err != nil {
		e.t.Fatalf("ClearExpire = %v, %v", ok, err)
	}
	if ok, err := l.ClearExpire(e.ctx); ok || err != nil {
		e.t.Fatalf("second ClearExpire = %v, %v; want false", ok, err)
	}
	if ok, err := l.Delete(e.ctx); !ok || err != nil {
		e.t.Fatalf("Delete = %v, %v", ok, err)
	}
	if ok, err := l.Delete(e.ctx); ok || err != nil {
		e.t.Fatalf("second Delete = %v, %v; want false", ok, err)
	}
	if _, err := l.TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		e.t.Fatalf("after Delete: %v; want ErrNotInitialized", err)
	}
	if ok, err := l.Expire(e.ctx, time.Hour); ok || err != nil {
		e.t.Fatalf("Expire of a deleted limiter = %v, %v; want false", ok, err)
	}
	// Re-created after Delete: a fresh limit, nothing of the old grants.
	l = e.configured("del", redlimit.PerInterval(1, time.Minute))
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("re-created: %+v", r)
	}
}

func testBadInput(e *env) {
	ctx := e.ctx
	good := redlimit.PerInterval(3, time.Second)
	l := e.configured("bad", good)
	e.try(l, 1)
	bad := []struct {
		name string
		call func() error
		want error
	}{
		{"permits 0", func() error { _, err := l.TryAcquire(ctx, 0); return err }, redlimit.ErrInvalidArgument},
		{"permits -1", func() error { _, err := l.Acquire(ctx, -1); return err }, redlimit.ErrInvalidArgument},
		{"permits > rate", func() error { _, err := l.TryAcquire(ctx, 4); return err }, redlimit.ErrPermitsExceedRate},
		{"permits > rate, config unknown to client", func() error { _, err := e.limiter("bad").TryAcquire(ctx, 4); return err }, redlimit.ErrPermitsExceedRate},
		{"permits > MaxRate", func() error { _, err := e.limiter("bad").TryAcquire(ctx, algorithm.MaxRate+1); return err }, redlimit.ErrPermitsExceedRate},
		{"negative wait", func() error { _, err := l.TryAcquireWait(ctx, 1, -time.Second); return err }, redlimit.ErrInvalidArgument},
		{"release 0", func() error { _, err := l.Release(ctx, 0); return err }, redlimit.ErrInvalidArgument},
		{"rate 0", func() error { return l.SetRate(ctx, redlimit.PerInterval(0, time.Second)) }, redlimit.ErrInvalidArgument},
		{"rate -5", func() error { _, err := l.TrySetRate(ctx, redlimit.PerInterval(-5, time.Second)); return err }, redlimit.ErrInvalidArgument},
		{"rate too large", func() error { return l.SetRate(ctx, redlimit.PerInterval(algorithm.MaxRate+1, time.Second)) }, redlimit.ErrInvalidArgument},
		{"interval 0", func() error { return l.SetRate(ctx, redlimit.PerInterval(1, 0)) }, redlimit.ErrInvalidArgument},
		{"interval negative", func() error { return l.SetRate(ctx, redlimit.PerInterval(1, -time.Second)) }, redlimit.ErrInvalidArgument},
		{"interval below 1ms", func() error { return l.SetRate(ctx, redlimit.PerInterval(1, time.Microsecond)) }, redlimit.ErrInvalidArgument},
		{"interval not whole ms", func() error { return l.SetRate(ctx, redlimit.PerInterval(1, 1500*time.Microsecond)) }, redlimit.ErrInvalidArgument},
		{"interval overflows", func() error { return l.SetRate(ctx, redlimit.PerInterval(1, time.Duration(1<<62))) }, redlimit.ErrInvalidArgument},
		{"unknown mode", func() error { return l.SetRate(ctx, good.WithMode(redlimit.Mode(7))) }, redlimit.ErrInvalidArgument},
		{"unknown algorithm", func() error { c := good; c.Algorithm = "magic"; return l.SetRate(ctx, c) }, redlimit.ErrInvalidArgument},
		{"algorithm misspelt", func() error {
			return l.SetRate(ctx, redlimit.Config{Algorithm: "Token-Bucket", Rate: 1, Interval: time.Second})
		}, redlimit.ErrInvalidArgument},
		{"ttl 0", func() error { _, err := l.Expire(ctx, 0); return err }, redlimit.ErrInvalidArgument},
		{"empty name", func() error { _, err := redlimit.New(e.store, ""); return err }, redlimit.ErrInvalidArgument},
		{"unknown set mode", func() error {
			_, _, err := e.store.SetConfig(ctx, "bad", good, redlimit.SetMode(9))
			return err
		}, redlimit.ErrInvalidArgument},
		{"oversize name", func() error { _, err := redlimit.New(e.store, strings.Repeat("n", 1024+1)); return err }, redlimit.ErrInvalidArgument},
		{"empty client ID", func() error { _, err := redlimit.New(e.store, "x", redlimit.WithClientID("")); return err }, redlimit.ErrInvalidArgument},
		{"bad known config", func() error {
			_, err := redlimit.New(e.store, "x", redlimit.WithConfig(redlimit.PerInterval(0, 0)))
			return err
		}, redlimit.ErrInvalidArgument},
		{"not initialized", func() error { _, err := e.limiter("bad-unset").AvailablePermits(ctx); return err }, redlimit.ErrNotInitialized},
		// The store itself checks too, for callers that use it directly.
		{"store: empty name", func() error {
			_, err := e.store.Acquire(ctx, redlimit.Key{Client: "c"}, good, 1, 0)
			return err
		}, redlimit.ErrInvalidArgument},
		{"store: permits 0", func() error {
			_, err := e.store.Acquire(ctx, redlimit.Key{Name: "bad", Client: "c"}, good, 0, 0)
			return err
		}, redlimit.ErrInvalidArgument},
		{"store: bad config", func() error {
			_, _, err := e.store.SetConfig(ctx, "bad", redlimit.PerInterval(1, 0), redlimit.SetKeepState)
			return err
		}, redlimit.ErrInvalidArgument},
	}
	for _, b := range bad {
		err := b.call()
		if !errors.Is(err, b.want) {
			e.t.Errorf("%s: err = %v; want errors.Is %v", b.name, err, b.want)
		}
		if strings.Contains(fmt.Sprint(err), "user_script") {
			e.t.Errorf("%s: raw Lua error leaked: %v", b.name, err)
		}
	}
	// Nothing stored was changed by any of it.
	got, err := l.Config(ctx)
	if err != nil || !got.SameLimit(good) {
		e.t.Fatalf("config after bad input = %v, %v; want %v", got, err, good)
	}
	if n := e.available(l); n != 2 {
		e.t.Fatalf("available after bad input = %d, want 2", n)
	}
}

// testWaitersFIFO: waiters are granted in the order they asked, one per
// interval, each after exactly one wait and no polling.
func testWaitersFIFO(e *env) {
	const waiters = 5
	cfg := redlimit.PerInterval(1, time.Second)
	first := e.configured("fifo", cfg)
	e.try(first, 1)
	type grant struct {
		who int
		res redlimit.Result
	}
	done := make(chan grant, waiters)
	for i := 0; i < waiters; i++ {
		l := e.limiter("fifo") // a separate client each
		go func(i int) {
			r, err := l.Acquire(e.ctx, 1)
			if err != nil {
				e.t.Errorf("waiter %d: %v", i, err)
			}
			done <- grant{i, r}
		}(i)
		// Let waiter i reserve its turn before the next one asks.
		e.waitTimers(i + 1)
	}
	for i := 0; i < waiters; i++ {
		e.clock.Advance(time.Second)
		g := <-done
		want := T0.Add(time.Duration(i+1) * time.Second)
		if g.who != i || !g.res.Allowed || !g.res.At.Equal(want) || g.res.Waited != time.Duration(i+1)*time.Second {
			e.t.Fatalf("grant %d went to waiter %d: %+v; want waiter %d at %v", i, g.who, g.res, i, want)
		}
	}
}

// testCancelledWaiter: a waiter whose context ends hands its reservation back.
func testCancelledWaiter(e *env) {
	cfg := redlimit.PerInterval(2, time.Second)
	l := e.configured("cancel", cfg)
	e.try(l, 2)
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, 2)
		errc <- err
	}()
	e.waitTimers(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("cancelled waiter: %v; want context.Canceled", err)
	}
	// The 2 reserved permits are back: at 1 s, both are free again.
	e.clock.Advance(time.Second)
	if r := e.try(l, 2); !r.Allowed {
		e.t.Fatalf("after the waiter gave up: %+v; want its 2 permits granted", r)
	}
}

func testTryAcquireWait(e *env) {
	l := e.configured("wait", redlimit.PerInterval(1, 10*time.Second))
	e.try(l, 1)
	// 10 s away: a 5 s wait refuses at once, without reserving.
	r, err := l.TryAcquireWait(e.ctx, 1, 5*time.Second)
	if err != nil || r.Allowed || r.RetryAfter != 10*time.Second {
		e.t.Fatalf("TryAcquireWait(5s) = %+v, %v; want refused, retry after 10s", r, err)
	}
	done := make(chan redlimit.Result, 1)
	go func() {
		r, err := l.TryAcquireWait(e.ctx, 1, 10*time.Second)
		if err != nil {
			e.t.Errorf("TryAcquireWait(10s): %v", err)
		}
		done <- r
	}()
	e.waitTimers(1)
	e.clock.Advance(10 * time.Second)
	if r := <-done; !r.Allowed || r.Waited != 10*time.Second {
		e.t.Fatalf("TryAcquireWait(10s) = %+v", r)
	}
	// A context that has already ended asks nothing of the store.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := l.TryAcquireWait(ctx, 1, time.Hour); !errors.Is(err, context.Canceled) {
		e.t.Fatalf("TryAcquireWait with an ended context: %v", err)
	}
}

// testClockBackwards: a clock that steps back grants nothing extra.
func testClockBackwards(e *env) {
	l := e.configured("backwards", redlimit.PerInterval(2, 10*time.Second))
	e.clock.Advance(30 * time.Second)
	e.try(l, 2)
	e.clock.Set(T0) // 30 s back
	if r := e.try(l, 1); r.Allowed {
		e.t.Fatalf("after the clock stepped back: %+v; want refused", r)
	}
	e.clock.Set(T0.Add(40 * time.Second))
	if r := e.try(l, 2); !r.Allowed {
		e.t.Fatalf("10 s after the grants: %+v", r)
	}
}

// testNamesApart: names that look alike or hold braces never share state.
func testNamesApart(e *env) {
	names := []string{"a", "{a}", "a}", "{a", "%7Ba%7D", "a:log", "a b", "a\x00b", "\xff\xfe", "名字", "{}", "}{"}
	for _, n := range names {
		l := e.configured(n, redlimit.PerInterval(1, time.Hour))
		if r := e.try(l, 1); !r.Allowed {
			e.t.Fatalf("name %q: first grant refused (%+v): another name's state leaked in", n, r)
		}
	}
	for _, n := range names {
		c, err := e.limiter(n).Config(e.ctx)
		if err != nil || c.Rate != 1 {
			e.t.Fatalf("name %q: config %v, %v", n, c, err)
		}
	}
}

// testConcurrentClients: many goroutines over several clients on one limiter;
// the log of every grant, with its store time, never has more than rate
// permits in any window.
func testConcurrentClients(e *env) {
	const (
		clients = 4
		workers = 8
		calls   = 60
		rate    = 7
	)
	cfg := redlimit.PerInterval(rate, 50*time.Millisecond)
	e.configured("concurrent", cfg)
	var (
		mu     sync.Mutex
		grants []Grant
		wg     sync.WaitGroup
	)
	for c := 0; c < clients; c++ {
		l := e.limiter("concurrent", redlimit.WithConfig(cfg))
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < calls; i++ {
					n := int64(1 + (i+w)%3)
					r, err := l.TryAcquire(e.ctx, n)
					if err != nil {
						e.t.Errorf("TryAcquire: %v", err)
						return
					}
					if r.Allowed {
						mu.Lock()
						grants = append(grants, Grant{r.At, n})
						mu.Unlock()
					}
					if i%10 == 0 {
						e.clock.Advance(time.Millisecond * time.Duration(1+w%3))
					}
				}
			}(w)
		}
	}
	wg.Wait()
	if len(grants) == 0 {
		e.t.Fatal("nothing granted")
	}
	if worst := MaxInWindow(grants, cfg.Interval); worst > rate {
		e.t.Fatalf("a window of %v held %d permits; the rate is %d", cfg.Interval, worst, rate)
	}
}

// Grant is one grant of a log: its store time and its permits.
type Grant struct {
	At      time.Time
	Permits int64
}

// MaxInWindow returns the most permits granted in any window of length
// interval, judged by the grants' store times.
func MaxInWindow(grants []Grant, interval time.Duration) int64 {
	var worst int64
	for _, g := range grants {
		var sum int64
		for _, h := range grants {
			if !h.At.Before(g.At) && h.At.Before(g.At.Add(interval)) {
				sum += h.Permits
			}
		}
		if sum > worst {
			worst = sum
		}
	}
	return worst
}
