package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// holdProxy is a loopback TCP proxy in front of Redis that the test
// controls: Redis carries every command out at once, but while the proxy
// holds, the replies to scripts wait in it until the test releases them.
// So a call can be in flight (done by Redis, its reply not yet back) for as
// long as a test needs, without timing luck. It speaks RESP2.
type holdProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	holding  bool
	acquires int     // "acquire" calls seen in scripts sent
	held     []*hold // replies held, oldest first
	changed  chan struct{}
	conns    []net.Conn
}

type hold struct {
	to    net.Conn
	reply []byte
	sent  *sync.Mutex // the client connection's writes, in order
}

func startProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target, changed: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

// sent is the number of acquire calls seen so far, read under p.mu: the
// proxy's goroutines count them.
func (p *holdProxy) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquires
}

func (p *holdProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// notify wakes waitFor; p.mu is held.
func (p *holdProxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitFor waits until cond (called under p.mu) holds; a real-time guard
// turns a bug that never gets there into a failure, not a hang.
func (p *holdProxy) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	guard := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		ok, ch := cond(), p.changed
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-guard:
			t.Fatalf("proxy: never %s", what)
		}
	}
}

// setHold starts holding script replies, or (false) sends every held one
// and passes all through from then on.
func (p *holdProxy) setHold(on bool) {
	p.mu.Lock()
	p.holding = on
	var out []*hold
	if !on {
		out, p.held = p.held, nil
	}
	p.mu.Unlock()
	for _, h := range out {
		h.send()
	}
}

// release sends the n oldest held replies.
func (p *holdProxy) release(n int) {
	p.mu.Lock()
	out := p.held[:n:n]
	p.held = p.held[n:]
	p.mu.Unlock()
	for _, h := range out {
		h.send()
	}
}

func (h *hold) send() {
	h.sent.Lock()
	defer h.sent.Unlock()
	_, _ = h.to.Write(h.reply)
}

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		scripts := make(chan bool, 4096) // per command sent: is it a script
		var writes sync.Mutex
		go p.requests(c, s, scripts)
		go p.replies(s, c, scripts, &writes)
	}
}

// requests forwards the client's commands, noting which are scripts and
// how many acquire calls they carry.
func (p *holdProxy) requests(c, s net.Conn, scripts chan<- bool) {
	defer close(scripts)
	r := bufio.NewReader(c)
	for {
		raw, args, err := readRESP(r)
		if err != nil {
			_ = s.Close()
			return
		}
		name := ""
		if len(args) > 0 {
			name = string(bytes.ToLower(args[0]))
		}
		script := name == "fcall" || name == "evalsha" || name == "eval"
		n := 0
		for _, a := range args {
			if script && string(a) == "acquire" {
				n++
			}
		}
		if name == "fcall" && len(args) > 1 && bytes.HasSuffix(args[1], []byte("_1")) {
			n = 1 // the library's lone function: one acquire
		}
		scripts <- script
		// Counted before Redis has the call: a test that reads the count
		// once the reply is back must see this call in it.
		if n > 0 {
			p.mu.Lock()
			p.acquires += n
			p.notify()
			p.mu.Unlock()
		}
		if _, err := s.Write(raw); err != nil {
			return
		}
	}
}

// replies forwards Redis's replies, holding those to scripts (and any
// after them on the connection, to keep their order) while p holds.
func (p *holdProxy) replies(s, c net.Conn, scripts <-chan bool, writes *sync.Mutex) {
	r := bufio.NewReader(s)
	for {
		raw, _, err := readRESP(r)
		if err != nil {
			_ = c.Close()
			return
		}
		script := <-scripts
		h := &hold{to: c, reply: raw, sent: writes}
		p.mu.Lock()
		queued := false
		for _, o := range p.held {
			queued = queued || o.to == c
		}
		if (p.holding && script) || queued {
			p.held = append(p.held, h)
			p.notify()
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		h.send()
	}
}

// readRESP reads one RESP2 message: its bytes, and for an array of bulk
// strings (a command) its elements.
func readRESP(r *bufio.Reader) ([]byte, [][]byte, error) {
	var raw []byte
	var args [][]byte
	var one func(top bool) error
	one = func(top bool) error {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		raw = append(raw, line...)
		if len(line) < 3 {
			return io.ErrUnexpectedEOF
		}
		n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
		switch line[0] {
		case '$':
			if n < 0 {
				return nil
			}
			b := make([]byte, n+2)
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			raw = append(raw, b...)
			if !top {
				args = append(args, b[:n])
			}
		case '*':
			for i := 0; i < n; i++ {
				if err := one(false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := one(true)
	return raw, args, err
}

// inFlightCase is one limiter of the five algorithms (10 per s) under a
// store whose Redis is behind p.
type inFlightCase struct {
	t          *testing.T
	clk        *clock.Fake
	store      *redisstore.Store
	rdb        *redis.Client
	l, twin    *redlimit.Limiter
	cfg        redlimit.Config
	ctx        context.Context
	base       int // timers asleep before the case
	cancels    []context.CancelFunc
	errs       []chan error
	name, mode string
}

func newInFlightCase(t *testing.T, p *holdProxy, clk *clock.Fake, cfg redlimit.Config, mode string, opts ...redisstore.Option) *inFlightCase {
	t.Helper()
	// No read timeout and no retries: a reply held longer than go-redis's
	// ReadTimeout (3 s, reached on a loaded machine) must not make it send
	// the call again.
	rdb := redis.NewClient(&redis.Options{Addr: p.addr(), Protocol: 2, DisableIdentity: true, PoolSize: 1000, ReadTimeout: -1, MaxRetries: -1})
	st := newStore(t, rdb, append([]redisstore.Option{redisstore.WithTimeSource(clk)}, opts...)...)
	c := &inFlightCase{t: t, clk: clk, store: st, rdb: rdb, cfg: cfg, ctx: context.Background(), name: string(cfg.Algorithm), mode: mode}
	var err error
	for _, x := range []**redlimit.Limiter{&c.l, &c.twin} {
		name := "in-flight"
		if x == &c.twin {
			name = "in-flight-twin"
		}
		if *x, err = redlimit.New(st, name, redlimit.WithClock(clk)); err != nil {
			t.Fatal(err)
		}
		if err := (*x).SetRate(c.ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for {
			r, err := (*x).TryAcquire(c.ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				break
			}
		}
	}
	c.base = clk.Timers()
	return c
}

// start starts k more waiters, each with a context of its own.
func (c *inFlightCase) start(k int) {
	for range k {
		ctx, cancel := context.WithCancel(c.ctx)
		errc := make(chan error, 1)
		c.cancels, c.errs = append(c.cancels, cancel), append(c.errs, errc)
		go func() {
			_, err := c.l.Acquire(ctx, 1)
			errc <- err
		}()
	}
}

// retryAfter is how long a TryAcquire of l waits for a permit, or 0 when
// one is granted at once (only asked when none is available: a refusal
// changes nothing).
func (c *inFlightCase) retryAfter(l *redlimit.Limiter) time.Duration {
	n, err := l.AvailablePermits(c.ctx)
	if err != nil || n > 0 {
		return 0
	}
	r, err := l.TryAcquire(c.ctx, 1)
	if err != nil || r.Allowed {
		c.t.Fatalf("TryAcquire with none available: %+v, %v", r, err)
	}
	return r.RetryAfter
}

// allBut lists every waiter but i.
func (c *inFlightCase) allBut(i int) []int {
	var out []int
	for j := range c.cancels {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// cancelAll cancels every waiter but those in skip, in random order, and
// checks they all return context.Canceled (wrapped in ErrUnavailable when
// in flight).
func (c *inFlightCase) cancelAll(skip ...int) {
	for _, i := range rand.Perm(len(c.cancels)) {
		if slices.Contains(skip, i) {
			continue
		}
		c.cancels[i]()
		if err := <-c.errs[i]; !errors.Is(err, context.Canceled) {
			c.t.Fatalf("%s: waiter %d: %v; want context.Canceled", c.name, i, err)
		}
	}
}

// check: after the store saw the abandoned calls through, the limiter is
// as its twin, which had no waiters.
func (c *inFlightCase) check(waiters, asleep int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.store.WaitHandBacks(ctx); err != nil {
		c.t.Fatalf("%s: hand-backs never done: %v", c.name, err)
	}
	avail := func(l *redlimit.Limiter) int64 {
		n, err := l.AvailablePermits(c.ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		return n
	}
	after, want := avail(c.l), avail(c.twin)
	retry, wantRetry := c.retryAfter(c.l), c.retryAfter(c.twin)
	st := c.store.Stats()
	c.clk.Advance(1500 * time.Millisecond)
	later, wantLater := avail(c.l), avail(c.twin)
	r, err := c.l.TryAcquire(c.ctx, 1)
	others := fmt.Sprintf("%d asleep (handed back by their callers)", asleep)
	if asleep < 0 { // not known: all but those the store saw through
		others = fmt.Sprintf("%d asleep (handed back by their callers) or still queued (never sent)", waiters-int(st.Abandoned))
	}
	c.t.Logf("%v, %s: %d waiters cancelled: %d in flight, seen through by the store (%d grants handed back, %d failed), %s; then AvailablePermits %d and retry-after %v (with no waiters %d, %v), 1.5 s later %d (%d), TryAcquire granted: %v",
		c.cfg, c.mode, waiters, st.Abandoned, st.HandedBack, st.HandBackFailed, others, after, retry, want, wantRetry, later, wantLater, r.Allowed)
	if after != want || retry != wantRetry || later != wantLater || err != nil || !r.Allowed {
		c.t.Fatalf("%s: the limiter is not as if the waiters had never asked", c.name)
	}
	// Held in flight by the proxy, every abandoned call was done by Redis
	// and granted. Cancelled at any moment, some were abandoned before
	// they were sent (go-redis then gives up too): nothing to hand back.
	if st.HandBackFailed != 0 || st.HandedBack > st.Abandoned || (asleep >= 0 && st.HandedBack != st.Abandoned) {
		c.t.Fatalf("%s: %+v: every abandoned call that was granted is to be handed back", c.name, st)
	}
	if c.rdb != nil {
		_ = c.rdb.Close() // its connections: without batching, one per waiter
	}
}

func cancelConfigs() []redlimit.Config {
	return []redlimit.Config{
		redlimit.PerSecond(10),
		redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow),
		redlimit.PerSecond(10).WithAlgorithm(redlimit.SlidingCounter),
		redlimit.TokenBucketConfig(10, time.Second, 10),
		redlimit.LeakyBucketConfig(10, time.Second, 1000),
	}
}

// TestCancelInFlightBatched: a drained limiter of each algorithm, with the
// store's default batching. While Redis's replies are held, 257 waiters
// ask: the first goes alone, the other 256 queue and go in the next run
// once the first's reply is let through (its caller then sleeps on its
// reservation). With that run done by Redis and its reply held, every
// waiter gives up: the sleeper hands its reservation back itself, the 256
// in flight leave theirs to the store, which hands them back when the
// reply comes. Then the limiter is exactly as if none had asked.
func TestCancelInFlightBatched(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, srv.Addr)
	for _, cfg := range cancelConfigs() {
		clk := clock.NewFake(storetest.T0)
		c := newInFlightCase(t, p, clk, cfg, "batched")
		const waiters = 257
		p.setHold(true)
		before := p.sent()
		c.start(1)
		p.waitFor(t, "sent the first run", func() bool { return p.acquires > before && len(p.held) == 1 })
		sent, calls := p.sent(), c.store.Stats().Calls
		// The others queue in the limiter's lane meanwhile; the first's
		// reply lets the lane send them, and its caller sleeps.
		c.start(waiters - 1)
		waitFor(t, "queued the waiters", func() bool { return c.store.Stats().Calls >= calls+waiters-1 })
		p.release(1)
		guard := make(chan struct{})
		tm := time.AfterFunc(30*time.Second, func() { close(guard) })
		if !clk.WaitForTimers(c.base+1, guard) {
			t.Fatal("the first waiter never slept")
		}
		tm.Stop()
		p.waitFor(t, "sent the queued waiters", func() bool { return p.acquires > sent && len(p.held) == 1 })
		// The waiters in flight give up; then, with Redis answering again,
		// the one asleep (its hand-back would wait for the lane's run).
		// (A waiter that had not queued yet when the first reply came
		// may have gone in a later run, or not at all.)
		c.cancelAll(0)
		inFlight := p.sent() - sent
		p.setHold(false)
		c.cancelAll(c.allBut(0)...)
		c.check(waiters, 1)
		if st := c.store.Stats(); st.Abandoned != int64(inFlight) {
			t.Fatalf("%s: %d calls abandoned; %d were in flight", c.name, st.Abandoned, inFlight)
		}
	}
}

// TestCancelHandBackQueued: a waiter's hand-back (Cancel) that queues
// behind a run in flight on its limiter, and whose caller stops waiting
// there (as the limiter's bounded hand-back does when thousands of waiters
// give up at once), is still made: with a waiter in flight given up too,
// the limiter ends as its twin.
func TestCancelHandBackQueued(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, srv.Addr)
	for _, cfg := range cancelConfigs() {
		clk := clock.NewFake(storetest.T0)
		c := newInFlightCase(t, p, clk, cfg, "hand-back queued")
		key := redlimit.Key{Name: c.l.Name(), Client: c.l.ClientID()} // the waiters' lane
		d, err := c.store.Acquire(c.ctx, key, cfg, 1, -1)
		if err != nil || !d.Granted || d.Wait <= 0 {
			t.Fatalf("%s: %+v, %v; want a reservation", c.name, d, err)
		}
		p.setHold(true)
		before := p.sent()
		c.start(1)
		p.waitFor(t, "sent the waiter's run", func() bool { return p.acquires > before && len(p.held) == 1 })
		calls := c.store.Stats().Calls
		ctx, cancel := context.WithCancel(c.ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := c.store.Cancel(ctx, key, d.Config, d.At, 1)
			errc <- err
		}()
		waitFor(t, "queued the hand-back", func() bool { return c.store.Stats().Calls > calls })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: hand-back queued behind a held run: %v; want context.Canceled", c.name, err)
		}
		c.cancelAll()
		p.setHold(false)
		c.check(1, 0)
	}
}

// TestCancelInFlightAlone: the same without batching, 400 waiters per
// algorithm each in a script run of its own, all done by Redis and their
// replies held when every waiter gives up.
func TestCancelInFlightAlone(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, srv.Addr)
	for _, cfg := range cancelConfigs() {
		clk := clock.NewFake(storetest.T0)
		c := newInFlightCase(t, p, clk, cfg, "without batching", redisstore.WithoutBatching())
		const waiters = 400
		p.setHold(true)
		before := p.sent()
		c.start(waiters)
		p.waitFor(t, fmt.Sprintf("sent %d runs", waiters), func() bool {
			return p.acquires-before == waiters && len(p.held) == waiters
		})
		c.cancelAll()
		p.setHold(false)
		c.check(waiters, 0)
		if st := c.store.Stats(); st.Abandoned != waiters {
			t.Fatalf("%s: %d calls abandoned; %d were in flight", c.name, st.Abandoned, waiters)
		}
	}
}

// TestCancelStormAnyMoment: waiters on a drained limiter each give up 1 to
// 10 ms (real time) after asking, whatever their call is doing then:
// queued in the store, in flight, or asleep on its reservation (the
// limiter's clock is fake and never moves: no reservation comes due). The
// moment each is cancelled is left to the scheduler, so the split between
// hand-backs by the callers and by the store varies from run to run; what
// may not vary is the end: once the store has seen every abandoned call
// through, the limiter is exactly its twin with no waiters. 10,000 on a
// sliding log, 2,000 on each other algorithm.
func TestCancelStormAnyMoment(t *testing.T) {
	// No read timeout (as newInFlightCase): a reply that a loaded machine
	// delays past go-redis's 3 s would fail a waiter's call with an i/o
	// timeout instead of its cancellation, and lose what its run did.
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: -1, PoolSize: 1000})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, cfg := range cancelConfigs() {
		waiters := 2000
		if cfg.Algorithm == redlimit.SlidingLog {
			waiters = 10000
		}
		if cfg.Algorithm == redlimit.LeakyBucket {
			cfg.Capacity = int64(waiters) + 10
		}
		clk := clock.NewFake(storetest.T0)
		st := newStore(t, rdb, redisstore.WithTimeSource(clk))
		c := &inFlightCase{t: t, clk: clk, store: st, cfg: cfg, ctx: context.Background(), name: string(cfg.Algorithm), mode: "cancelled at 1-10 ms"}
		var err error
		for _, x := range []**redlimit.Limiter{&c.l, &c.twin} {
			name := "storm"
			if x == &c.twin {
				name = "storm-twin"
			}
			if *x, err = redlimit.New(st, name, redlimit.WithClock(clk)); err != nil {
				t.Fatal(err)
			}
			if err := (*x).SetRate(c.ctx, cfg); err != nil {
				t.Fatal(err)
			}
			for r, err := (*x).TryAcquire(c.ctx, 1); r.Allowed || err != nil; r, err = (*x).TryAcquire(c.ctx, 1) {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		kinds := map[string]int{}
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(c.ctx)
				defer cancel()
				time.AfterFunc(time.Duration(1+i%10)*time.Millisecond, cancel)
				r, err := c.l.Acquire(ctx, 1)
				kind := "cancelled"
				switch {
				case err == nil:
					kind = fmt.Sprintf("granted %+v", r)
				case !errors.Is(err, context.Canceled):
					kind = err.Error()
				}
				mu.Lock()
				kinds[kind]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if kinds["cancelled"] != waiters {
			t.Fatalf("%s: waiters ended %v; want all cancelled", c.name, kinds)
		}
		c.check(waiters, -1)
	}
}

// TestCancelInFlightGrouped: on one server the calls of different limiters
// share script runs, at most four in flight; a call that comes meanwhile
// waits for the group's next run. Eight limiters get a waiter each while
// Redis's replies are held: four runs go, four calls wait; the first reply
// let through puts its waiter to sleep and sends the four waiting calls in
// one run, whose reply is held too. Then every waiter gives up: the seven
// in flight (alone, or in the group's run) are the store's to hand back,
// the sleeper hands back its own. Every limiter is then its twin's equal.
func TestCancelInFlightGrouped(t *testing.T) {
	srv := redistest.Start(t)
	p := startProxy(t, srv.Addr)
	clk := clock.NewFake(storetest.T0)
	cfg := redlimit.PerSecond(10)
	c := newInFlightCase(t, p, clk, cfg, "grouped")
	ls := []*redlimit.Limiter{c.l}
	for i := 1; i < 8; i++ {
		l, err := redlimit.New(c.store, fmt.Sprintf("grouped-%d", i), redlimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetRate(c.ctx, cfg); err != nil {
			t.Fatal(err)
		}
		for r, err := l.TryAcquire(c.ctx, 1); r.Allowed || err != nil; r, err = l.TryAcquire(c.ctx, 1) {
			if err != nil {
				t.Fatal(err)
			}
		}
		ls = append(ls, l)
	}
	p.setHold(true)
	before, calls := p.sent(), c.store.Stats().Calls
	errs := make(chan error, len(ls))
	var cancels []context.CancelFunc
	for _, l := range ls {
		ctx, cancel := context.WithCancel(c.ctx)
		cancels = append(cancels, cancel)
		go func() {
			_, err := l.Acquire(ctx, 1)
			errs <- err
		}()
	}
	p.waitFor(t, "sent four runs", func() bool { return p.acquires-before == 4 && len(p.held) == 4 })
	waitFor(t, "queued the other calls", func() bool { return c.store.Stats().Calls >= calls+8 })
	p.release(1)
	guard := make(chan struct{})
	tm := time.AfterFunc(30*time.Second, func() { close(guard) })
	defer tm.Stop()
	if !clk.WaitForTimers(c.base+1, guard) {
		t.Fatal("the first waiter never slept")
	}
	p.waitFor(t, "sent the group's run", func() bool { return p.acquires-before > 4 && len(p.held) == 4 })
	inFlight := p.sent() - before - 1
	for _, cancel := range cancels {
		cancel()
	}
	// The seven in flight return at once; the sleeper's hand-back waits
	// for a place in the group, which Redis's replies free.
	for i := range ls {
		if i == len(ls)-1 {
			p.setHold(false)
		}
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v; want context.Canceled", err)
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.store.WaitHandBacks(ctx); err != nil {
		t.Fatal(err)
	}
	want, wantRetry := c.twin.AvailablePermits(c.ctx)
	if wantRetry != nil {
		t.Fatal(wantRetry)
	}
	for i, l := range ls {
		if got, err := l.AvailablePermits(c.ctx); err != nil || got != want || c.retryAfter(l) != c.retryAfter(c.twin) {
			t.Fatalf("limiter %d: AvailablePermits %d, %v, retry-after %v; twin %d, %v", i, got, err, c.retryAfter(l), want, c.retryAfter(c.twin))
		}
	}
	retry := c.retryAfter(c.twin)
	clk.Advance(1500 * time.Millisecond)
	want, _ = c.twin.AvailablePermits(c.ctx)
	for i, l := range ls {
		if got, err := l.AvailablePermits(c.ctx); err != nil || got != want {
			t.Fatalf("limiter %d: 1.5 s later AvailablePermits %d, %v; twin %d", i, got, err, want)
		}
	}
	st := c.store.Stats()
	t.Logf("%v, 8 limiters grouped: %d waiters in flight (%d in the group's run), 1 asleep: handed back by the store %d (failed %d), by the caller 1; every limiter then as its twin with no waiters (retry-after %v, 1.5 s later %d available)",
		cfg, inFlight, inFlight-3, st.HandedBack, st.HandBackFailed, retry, want)
	if st.Abandoned != int64(inFlight) || st.HandedBack != st.Abandoned || inFlight < 4 {
		t.Fatalf("%+v with %d in flight", st, inFlight)
	}
	_ = c.rdb.Close()
}
