package redissonstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The interop tests run random traces in which Java clients (Redisson's own
// scripts, see javaside_test.go) and this store act on ONE limiter, all on
// one virtual clock. The same sequence of script calls is replayed through
// Redisson's scripts alone on a second Redis database (the model: a single
// Redisson client doing everything). Every decision of the mixed run must
// equal the model's, step by step, and after every step the limiter's state
// must mean the same in both (counter as Redisson would read it now, grants
// still in the window, config hash, TTLs). Finally no window of interval may
// hold more than rate permits in the mixed run.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// entry is a grant in the log, random part aside.
type entry struct{ at, permits int64 }

// view is what a limiter's state means at a time: the permits a request
// could get (Redisson's availablePermits) and the grants still counting.
type view struct {
	config          map[string]string
	left            int64
	live            []entry
	ttlHash, ttlVal bool
	ttlLog          bool
}

func readView(t *testing.T, rdb *redis.Client, layout Layout, name, client string, now int64) view {
	t.Helper()
	ctx := context.Background()
	k := KeysOf(name)
	cfg, err := rdb.HGetAll(ctx, k.Config).Result()
	if err != nil {
		t.Fatal(err)
	}
	v := view{config: cfg}
	if len(cfg) == 0 {
		return v
	}
	rate, _ := strconv.ParseInt(cfg["rate"], 10, 64)
	interval, _ := strconv.ParseInt(cfg["interval"], 10, 64)
	vk, pk := k.Value, k.Permits
	if cfg["type"] == "1" {
		vk, pk = k.ClientValue(client), k.ClientPermits(client)
	}
	raw, err := rdb.Get(ctx, vk).Result()
	hasValue := err == nil
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	value, _ := strconv.ParseInt(raw, 10, 64)
	zs, err := rdb.ZRangeWithScores(ctx, pk, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var released, used int64
	for _, z := range zs {
		m, err := DecodeMember([]byte(z.Member.(string)), layout)
		if err != nil || m.Encoding != layout.encoding() {
			t.Fatalf("member %q of %s: %v (encoding %s)", z.Member, pk, err, m.Encoding)
		}
		if int64(z.Score) <= now-interval {
			released += m.Permits
		} else {
			used += m.Permits
			v.live = append(v.live, entry{int64(z.Score), m.Permits})
		}
	}
	slices.SortFunc(v.live, func(a, b entry) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(a.permits - b.permits)
	})
	switch {
	case !hasValue:
		v.left = rate - used
	case layout == Current && value+released > rate:
		v.left = rate - used
	default:
		v.left = value + released
	}
	ttl := func(key string) bool {
		d, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d > 0
	}
	v.ttlHash = ttl(k.Config)
	if hasValue {
		v.ttlVal = ttl(vk)
	}
	if len(v.live) > 0 {
		v.ttlLog = ttl(pk)
	}
	return v
}

// interopRun is one trace.
type interopRun struct {
	t            *testing.T
	ctx          context.Context
	layout       Layout
	rnd          *rand.Rand
	clk          *clock.Fake
	mixed, model *redis.Client
	store        *Store
	lim          *redlimit.Limiter
	javaMixed    *javaSide // a Java client on the mixed database
	javaModel    *javaSide // the model's single Redisson client
	name, id     string
	attempts     chan attempt
	ack          chan struct{}

	rate, interval int64
	typ            string
	grants         [][]entry // per config segment
	steps          int
	stats          map[string]int
	log            []string
}

func (r *interopRun) now() int64 { return r.clk.Now().UnixMilli() }

func (r *interopRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("@%d ", r.now()-t0.UnixMilli())+fmt.Sprintf(format, args...))
}

func (r *interopRun) fail(format string, args ...any) {
	r.t.Helper()
	tail := r.log
	if len(tail) > 25 {
		tail = tail[len(tail)-25:]
	}
	for _, l := range tail {
		r.t.Log(l)
	}
	r.t.Fatalf(format, args...)
}

// compare checks that the mixed and the model states mean the same.
func (r *interopRun) compare() {
	r.t.Helper()
	a := readView(r.t, r.mixed, r.layout, r.name, r.id, r.now())
	b := readView(r.t, r.model, r.layout, r.name, r.id, r.now())
	// Redisson's SET of the counter drops its TTL (availablePermits then
	// leaves it without one until the next acquire); the store's KEEPTTL
	// keeps it. So the mixed counter has a TTL at least whenever the
	// model's has.
	if b.ttlVal && !a.ttlVal {
		r.fail("the mixed counter lost its TTL:\nmixed %+v\nmodel %+v", a, b)
	}
	a.ttlVal, b.ttlVal = false, false
	if fmt.Sprint(a) != fmt.Sprint(b) {
		r.fail("state differs:\nmixed %+v\nmodel %+v", a, b)
	}
}

func (r *interopRun) grant(n int64) {
	seg := &r.grants[len(r.grants)-1]
	*seg = append(*seg, entry{r.now(), n})
}

// javaAcquire: a Java client acquires on the mixed limiter; the model's
// client does the same alone.
func (r *interopRun) javaAcquire(n int64) {
	r.t.Helper()
	g1, d1, err1 := r.javaMixed.acquire(r.ctx, r.mixed, r.name, n, r.now())
	g2, d2, err2 := r.javaModel.acquire(r.ctx, r.model, r.name, n, r.now())
	if err1 != nil || err2 != nil {
		r.fail("java tryAcquire(%d): %v / %v", n, err1, err2)
	}
	r.note("java acquire %d: %v %d", n, g1, d1)
	r.stats[fmt.Sprintf("java granted %v", g1)]++
	if g1 != g2 || d1 != d2 {
		r.fail("java tryAcquire(%d): mixed %v/%d, model %v/%d", n, g1, d1, g2, d2)
	}
	if g1 {
		r.grant(n)
	}
	r.steps++
}

// goAcquire: the Go store acquires through redlimit's Limiter, waiting up to
// maxWait (0: TryAcquire, negative: Acquire). Each script run of the store
// (seen through its hook) is checked against the model's client trying at
// the same instant; while the store sleeps, Java clients may act.
func (r *interopRun) goAcquire(n int64, maxWait time.Duration) {
	r.t.Helper()
	type outcome struct {
		res redlimit.Result
		err error
	}
	done := make(chan outcome, 1)
	start := r.clk.Now()
	go func() {
		var o outcome
		switch {
		case maxWait < 0:
			o.res, o.err = r.lim.Acquire(r.ctx, n)
		case maxWait == 0:
			o.res, o.err = r.lim.TryAcquire(r.ctx, n)
		default:
			o.res, o.err = r.lim.TryAcquireWait(r.ctx, n, maxWait)
		}
		done <- o
	}()
	for tries := 0; ; tries++ {
		var a attempt
		select {
		case a = <-r.attempts:
		case o := <-done:
			r.fail("go acquire(%d, %v) returned %+v, %v without trying", n, maxWait, o.res, o.err)
		}
		g, d, err := r.javaModel.acquire(r.ctx, r.model, r.name, n, r.now())
		if err != nil {
			r.fail("model tryAcquire: %v", err)
		}
		r.note("go acquire %d (wait %v): %v %v", n, maxWait, a.granted, a.delay)
		if a.now.UnixMilli() != r.now() || a.granted != g || (!g && a.delay != time.Duration(d)*time.Millisecond) {
			r.fail("go acquire(%d, %v), try %d at %v: store %v/%v, model %v/%dms", n, maxWait, tries, a.now, a.granted, a.delay, g, d)
		}
		r.steps++
		r.stats[fmt.Sprintf("go granted %v", a.granted)]++
		r.ack <- struct{}{}
		if a.granted {
			o := <-done
			if o.err != nil || !o.res.Allowed || !o.res.At.Equal(r.clk.Now()) {
				r.fail("go acquire granted by the script, Limiter says %+v, %v", o.res, o.err)
			}
			r.grant(n)
			return
		}
		elapsed := r.clk.Now().Sub(start)
		if maxWait == 0 || (maxWait > 0 && elapsed+a.delay > maxWait) {
			o := <-done
			if o.err != nil || o.res.Allowed || o.res.RetryAfter != a.delay {
				r.fail("go acquire refused by the script, Limiter says %+v, %v", o.res, o.err)
			}
			return
		}
		guard := make(chan struct{})
		timer := time.AfterFunc(30*time.Second, func() { close(guard) })
		ok := r.clk.WaitForTimers(1, guard)
		timer.Stop()
		if !ok {
			r.fail("the store never slept after a refusal")
		}
		wake := r.clk.Now().Add(a.delay)
		// Java clients act while the store sleeps (fewer as tries go on, so
		// that the waiter is not starved forever).
		if tries < 20 {
			for k := r.rnd.IntN(3); k > 0; k-- {
				at := r.clk.Now().Add(time.Duration(r.rnd.Int64N(int64(wake.Sub(r.clk.Now())/time.Millisecond)+1)) * time.Millisecond)
				if !at.Before(wake) {
					break
				}
				r.clk.Set(at)
				r.javaAcquire(1 + r.rnd.Int64N(r.rate))
			}
		}
		r.stats["go slept and retried"]++
		r.clk.Set(wake)
	}
}

func (r *interopRun) goAvailable() {
	r.t.Helper()
	got, err := r.lim.AvailablePermits(r.ctx)
	if err != nil {
		r.fail("AvailablePermits: %v", err)
	}
	want, err := r.javaModel.available(r.ctx, r.model, r.name, r.now())
	if err != nil {
		r.fail("model availablePermits: %v", err)
	}
	r.note("go available: %d", got)
	if got != want {
		r.fail("AvailablePermits = %d, model %d", got, want)
	}
	r.steps++
}

func (r *interopRun) config() redlimit.Config {
	c := redlimit.PerInterval(r.rate, time.Duration(r.interval)*time.Millisecond)
	if r.typ == "1" {
		c = c.WithMode(redlimit.PerClient)
	}
	return c
}

// trySet: trySetRate by Java or Go; both must report the same.
func (r *interopRun) trySet(byGo bool) {
	r.t.Helper()
	var set bool
	var err error
	if byGo {
		set, err = r.lim.TrySetRate(r.ctx, r.config())
		if errors.Is(err, redlimit.ErrConfigMismatch) {
			err = nil
		}
	} else {
		set, err = r.javaMixed.trySet(r.ctx, r.mixed, r.name, r.rate, r.interval, r.typ)
	}
	want, err2 := r.javaModel.trySet(r.ctx, r.model, r.name, r.rate, r.interval, r.typ)
	if err != nil || err2 != nil || set != want {
		r.fail("trySetRate (go %v): mixed %v, %v; model %v, %v", byGo, set, err, want, err2)
	}
	r.note("trySetRate %d/%d type %s by go %v: %v", r.rate, r.interval, r.typ, byGo, set)
	r.steps++
}

// set: setRate (state reset) by Java or Go.
func (r *interopRun) set(byGo bool) {
	r.t.Helper()
	var err error
	if byGo {
		err = r.lim.SetRate(r.ctx, r.config(), redlimit.ResetState())
	} else {
		err = r.javaMixed.set(r.ctx, r.mixed, r.name, r.rate, r.interval, r.typ)
	}
	if err2 := r.javaModel.set(r.ctx, r.model, r.name, r.rate, r.interval, r.typ); err != nil || err2 != nil {
		r.fail("setRate (go %v): %v / %v", byGo, err, err2)
	}
	r.note("setRate %d/%d type %s by go %v", r.rate, r.interval, r.typ, byGo)
	r.grants = append(r.grants, nil)
}

// randomConfig picks the next config. Legacy Redisson's setRate deletes the
// Overall state only, so a PER_CLIENT client keeps its counter across it: a
// new rate would leave that counter out of step with the log, and Redisson's
// script then fails on a nil (TestLegacyStaleClientState). Legacy traces
// therefore keep their type, and PER_CLIENT ones their rate.
func (r *interopRun) randomConfig() {
	first := r.rate == 0
	if first || r.layout == Current || r.typ == "0" {
		r.rate = 1 + r.rnd.Int64N(6)
	}
	r.interval = []int64{10, 50, 100, 1000}[r.rnd.IntN(4)]
	if first || r.layout == Current {
		r.typ = []string{"0", "1"}[r.rnd.IntN(2)]
	}
}

// advance moves the clock: a little, or exactly onto the instant a grant in
// the window ages out (the boundary), or one ms before it.
func (r *interopRun) advance() {
	live := readView(r.t, r.model, r.layout, r.name, r.id, r.now()).live
	if len(live) > 0 && r.rnd.IntN(2) == 0 {
		e := live[r.rnd.IntN(len(live))]
		to := e.at + r.interval - int64(r.rnd.IntN(2))
		if to > r.now() {
			r.clk.Set(time.UnixMilli(to))
			return
		}
	}
	r.clk.Advance(time.Duration(r.rnd.Int64N(r.interval/3+1)) * time.Millisecond)
}

// checkWindows: in every config segment, no window of interval holds more
// than rate permits of the mixed run's grants.
func (r *interopRun) checkWindows(rates, intervals []int64) {
	for i, seg := range r.grants {
		for _, g := range seg {
			var sum int64
			for _, h := range seg {
				if h.at >= g.at && h.at < g.at+intervals[i] {
					sum += h.permits
				}
			}
			if sum > rates[i] {
				r.fail("segment %d: the window from %d holds %d permits, rate %d per %d ms", i, g.at, sum, rates[i], intervals[i])
			}
		}
	}
}

func runInterop(t *testing.T, layout Layout, traces, stepsPer int) {
	srv := redistest.Start(t)
	mixed := srv.Client(t)
	model := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { _ = model.Close() })
	ctx := context.Background()
	total, stats := 0, map[string]int{}
	for trace := 0; trace < traces; trace++ {
		seed := uint64(trace) + 1000*uint64(layout)
		rnd := rand.New(rand.NewPCG(seed, 42))
		clk := clock.NewFake(t0.Add(time.Duration(trace) * time.Hour))
		r := &interopRun{t: t, ctx: ctx, layout: layout, rnd: rnd, clk: clk, mixed: mixed, model: model,
			name: fmt.Sprintf("limiter-%d", trace), id: fmt.Sprintf("redisson-%d", trace),
			attempts: make(chan attempt), ack: make(chan struct{}), grants: [][]entry{nil}, stats: stats}
		if trace%3 == 2 {
			r.name = fmt.Sprintf("{shared}limiter-%d", trace) // a name with its own hash tag
		}
		var keepAlive int64
		if layout == Current && trace%2 == 1 {
			keepAlive = time.Hour.Milliseconds()
		}
		r.javaMixed = newJavaSide(t, mixed, layout, r.id, keepAlive, rnd)
		r.javaModel = newJavaSide(t, model, layout, r.id, keepAlive, rnd)
		opts := []Option{WithLayout(layout), WithTimeSource(clk), WithKeepAlive(time.Duration(keepAlive) * time.Millisecond)}
		if layout == Current {
			// The store acts as the Java client's Redisson instance, so a
			// PER_CLIENT limit is shared too. (Legacy: the Limiter's client
			// id does it, and setRate then resets exactly Redisson's keys.)
			opts = append(opts, WithClientID(r.id))
		}
		store, err := New(mixed, opts...)
		if err != nil {
			t.Fatal(err)
		}
		store.hook = func(a attempt) { r.attempts <- a; <-r.ack }
		r.store = store
		if r.lim, err = redlimit.New(store, r.name, redlimit.WithClientID(r.id), redlimit.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
		r.randomConfig()
		rates, intervals := []int64{r.rate}, []int64{r.interval}
		r.trySet(rnd.IntN(2) == 0)
		for step := 0; step < stepsPer; step++ {
			switch p := rnd.IntN(100); {
			case p < 28:
				r.javaAcquire(1 + rnd.Int64N(r.rate))
			case p < 56:
				r.goAcquire(1+rnd.Int64N(r.rate), 0)
			case p < 64:
				r.goAcquire(1+rnd.Int64N(r.rate), time.Duration(rnd.Int64N(2*r.interval+1))*time.Millisecond)
			case p < 67:
				r.goAcquire(1+rnd.Int64N(r.rate), -1)
			case p < 74:
				r.goAvailable()
			case p < 95:
				r.advance()
			case p < 97:
				r.trySet(rnd.IntN(2) == 0) // a config exists: nobody writes
			default:
				r.randomConfig()
				r.set(rnd.IntN(2) == 0)
				rates, intervals = append(rates, r.rate), append(intervals, r.interval)
			}
			r.compare()
		}
		r.checkWindows(rates, intervals)
		total += r.steps
	}
	t.Logf("%s layout: %d traces, %d decisions checked against a Redisson client alone (%v)", layout, traces, total, stats)
}

// TestSeedVariants: the article quotes tryAcquire three times (the Java
// string, a fenced Lua block, a commented copy); every complete copy must
// decide the same on one random sequence, or the extraction is wrong.
func TestSeedVariants(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := loadSeedScripts(t, rdb)
	if len(s.variants) < 2 {
		t.Fatalf("only %d complete tryAcquire variants in seed 001: %v", len(s.variants), s.variants)
	}
	var first []string
	for from, src := range s.variants {
		sc := redis.NewScript(src)
		name := "variant-" + from
		if err := redis.NewScript(s.trySetRate).Run(ctx, rdb, []string{name}, 3, 100, 0).Err(); err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(7, 7))
		now := t0.UnixMilli()
		var got []string
		for i := 0; i < 300; i++ {
			now += rnd.Int64N(40)
			k := KeysOf(name)
			v, err := sc.Run(ctx, rdb, []string{k.Config, k.Value, k.ClientValue("c"), k.Permits, k.ClientPermits("c")}, 1+rnd.Int64N(3), now, int64(rnd.Uint64())).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("%s: %v", from, err)
			}
			got = append(got, fmt.Sprint(v, errors.Is(err, redis.Nil)))
		}
		if first == nil {
			first = got
		} else if !slices.Equal(first, got) {
			t.Fatalf("%s decides differently from another variant", from)
		}
	}
	t.Logf("%d variants of tryAcquire in seed 001 agree over 300 calls", len(s.variants))
}

func TestInteropLegacy(t *testing.T) {
	srv := redistest.Start(t)
	s := loadSeedScripts(t, srv.Client(t))
	t.Logf("seed 001 tryAcquire taken from %s", s.tryAcquireFrom)
	runInterop(t, Legacy, 40, 200)
}

func TestInteropCurrent(t *testing.T) {
	runInterop(t, Current, 40, 200)
}
