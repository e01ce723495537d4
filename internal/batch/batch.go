// Package batch puts concurrent calls on shared logs into runs: a store
// whose every round trip costs far more than the work it carries (a Redis
// script run) makes the calls that come while others are in flight
// together, in one run, instead of one run each. It knows nothing of what
// a run is: the store gives it the function that makes one (Config.Run).
//
// A log is what a key names: one limiter's state (a Redis store's one
// log of one limiter, or of one client of it). A work is the calls of one
// log that go in one run; a run is one or more works, made by one call of
// Run. Calls are made with Do.
//
// # The queue discipline
//
// There is one: every log has a FIFO queue of calls, and the logs whose
// queues hold calls while no run of theirs is in flight wait, in the order
// they became so, for a run. At most MaxRuns runs are in flight at once
// (0: no bound); a run takes up to MaxWorks waiting logs, oldest first,
// and of each up to MaxCalls calls from the head of its queue.
//
// A call on a log that has nothing queued or in flight, made while fewer
// than MaxRuns runs are in flight, is run at once on its caller's
// goroutine, alone, under the caller's context: a lone call waits for
// nothing and costs no goroutine. Every other call is queued, and runs are
// made on goroutines of the Batcher, which live while calls are waiting.
//
// # Invariants
//
//   - Order per log: the calls on one log are run in the order they were
//     made (queued, or run at once), run after run. A call withdrawn (below)
//     is simply not run.
//   - At most one work per log per run, and at most one run per log in
//     flight: a log's next run is made only once its last one is over.
//     (Over means Run returned: if Run gives up on a run that the server
//     may still carry out, say at a read timeout, the next may overtake
//     it there; the store's Run must not return before that is settled if
//     it needs order across such runs.)
//   - A run groups the works of different logs (up to MaxWorks), for a
//     store whose Run can make them together (one script on one server,
//     one pipeline on a Cluster); MaxWorks 1 never groups, and Ungroup
//     stops grouping for good (a server that turned a group down).
//   - Runs are sized: at most MaxCalls calls per work, MaxWorks works per
//     run, MaxRuns runs in flight.
//
// # Cancellation
//
// A caller whose context ends before its call's answer gets the context's
// error at once. What becomes of the call depends on where it is:
//
//   - queued (no run has taken it): it is withdrawn, and never run; but
//     a call that must not be lost (Config.Keep: one that hands permits
//     back) stays queued and is run in its turn, with no deadline of its
//     caller's, its result going to Config.HandBack, and Wait waits
//     until its run is over;
//   - in a run of the Batcher's, in flight: the run goes on; when it is
//     over, the call and its result (if the work succeeded) go to
//     Config.HandBack, so that the store can undo what the call was
//     granted. Abandoned counts these calls, and Wait waits until each
//     was handed back (or found failed).
//   - run at once on its caller's goroutine: that run has the caller's
//     context, and Run itself sees the call through (the Batcher cannot
//     tell a cancelled run from a failed one).
//
// A call's answer and its caller's leaving race; one compare-and-swap per
// call settles it: the answer that wins is the caller's, the leaving that
// wins leaves the answer to HandBack, never both, never neither.
//
// # Deadlines
//
// A run on the Batcher's goroutine serves callers with deadlines of their
// own: it is given a context that ends as late as the most patient one
// (with Config.Deadlines: Run stops at its context's deadline), or Patience
// from the run's start when one of them has none; runs share one such
// context while its deadline is no earlier than they need and at most
// Slack later (a context costs a timer and allocations per run otherwise).
// Without Deadlines, runs get context.Background().
package batch

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config's sizes and times.
const (
	DefaultMaxCalls = 256
	DefaultMaxWorks = 64
	// DefaultPatience bounds a background run whose callers include one
	// without a deadline (each caller still returns at its own context's
	// end).
	DefaultPatience = 5 * time.Second
	// DefaultSlack is how much longer than its most patient caller a run
	// in the background may last.
	DefaultSlack = time.Second
)

// Work is the calls of one log that go in one run, and their answers.
type Work[K comparable, C, R any] struct {
	Key   K
	Calls []C
	// Results has one element per call, for Run to set.
	Results []R
	// Err, set by Run, is what ended the work: each of its calls fails
	// with it, and Results are not read.
	Err error
}

// Config is what a Batcher needs. Run is required; zero sizes and times
// take the defaults (MaxRuns 0: no bound).
type Config[K comparable, C, R any] struct {
	// Run makes the calls of works in one run and sets each work's
	// Results or Err; it returns when the run is over. Works are of
	// different logs. Run must not keep works after it returns.
	Run func(ctx context.Context, works []*Work[K, C, R])
	// HandBack receives, once their run is over, the calls whose callers
	// left while it was in flight (or while they were queued, for those
	// Keep keeps), with their results (only calls of works that
	// succeeded), on the goroutine that made the run. nil: such results
	// are dropped.
	HandBack func(key K, calls []C, results []R)
	// Keep reports whether c must be run even if its caller leaves while
	// it is queued (nil: none): a call that hands permits back, which a
	// busy log must not turn into permits held for nobody.
	Keep func(c C) bool
	// MaxCalls bounds the calls of one work, MaxWorks the works of one
	// run (1: each log alone), MaxRuns the runs in flight (0: no bound).
	MaxCalls, MaxWorks, MaxRuns int
	// Deadlines: Run stops at its context's deadline; runs in the
	// background then get contexts with deadlines (see the package doc).
	Deadlines bool
	// Patience and Slack: see the package doc (defaults DefaultPatience,
	// DefaultSlack).
	Patience, Slack time.Duration
}

// Batcher makes calls on logs in runs. It is safe for concurrent use.
type Batcher[K comparable, C, R any] struct {
	run       func(context.Context, []*Work[K, C, R])
	handBack  func(K, []C, []R)
	keep      func(C) bool
	maxCalls  int
	deadlines bool
	patience  time.Duration
	slack     time.Duration

	mu       sync.Mutex
	logs     map[K]*log[K, C, R] // logs with calls queued or in flight
	ready    []*log[K, C, R]     // logs with calls queued and no run in flight, oldest first
	inflight int
	maxWorks int
	maxRuns  int // 0: no bound

	shared    atomic.Pointer[sharedDeadline]
	abandoned atomic.Int64
	settling  Settling

	// pendings recycles answered calls with their channels; lones the
	// works of calls run at once; runs the background runs with their
	// slices.
	pendings, lones, runs sync.Pool
	// spare holds logs dropped, with their queues, for the next logs
	// made: calls spread over many keys make and drop a log per call.
	// b.mu guards it.
	spare []*log[K, C, R]

	// hook, in tests, sees under mu each call admitted (run at once or
	// queued), each withdrawn, and each run over.
	hook func(ev event, key K, c C)
}

type event uint8

const (
	evInline event = iota
	evQueued
	evWithdrawn
	evKept    // a call whose caller left while it was queued, kept (Keep)
	evRunOver // a run is over and its logs finished (c: zero)
)

// New returns a Batcher making runs with cfg.Run.
func New[K comparable, C, R any](cfg Config[K, C, R]) *Batcher[K, C, R] {
	b := &Batcher[K, C, R]{
		run: cfg.Run, handBack: cfg.HandBack, keep: cfg.Keep, deadlines: cfg.Deadlines,
		maxCalls: cfg.MaxCalls, maxWorks: cfg.MaxWorks, maxRuns: max(cfg.MaxRuns, 0),
		patience: cfg.Patience, slack: cfg.Slack,
		logs: map[K]*log[K, C, R]{},
	}
	if b.maxCalls <= 0 {
		b.maxCalls = DefaultMaxCalls
	}
	if b.maxWorks <= 0 {
		b.maxWorks = DefaultMaxWorks
	}
	if b.patience <= 0 {
		b.patience = DefaultPatience
	}
	if b.slack <= 0 {
		b.slack = DefaultSlack
	}
	b.pendings.New = func() any { return &pending[C, R]{done: make(chan struct{}, 1)} }
	b.lones.New = func() any { return new(lone[K, C, R]) }
	b.runs.New = func() any { return new(batchRun[K, C, R]) }
	return b
}

// log is a log's queue.
type log[K comparable, C, R any] struct {
	key   K
	queue []*pending[C, R]
	busy  bool // a run of its calls is in flight
	ready bool // in Batcher.ready
}

// pending is a queued call, and then its answer.
type pending[C, R any] struct {
	call     C
	deadline time.Time // zero: none
	res      R
	err      error
	done     chan struct{} // the answer is in res and err
	state    atomic.Int32  // awaited, answered or abandoned
}

// The states of a pending call's answer.
const (
	awaited   int32 = iota // the caller waits
	answered               // the answer went to the caller
	abandoned              // the caller left: the answer goes to HandBack
)

// lone is the work of a call run at once, without allocations of its own.
type lone[K comparable, C, R any] struct {
	w     Work[K, C, R]
	ptr   [1]*Work[K, C, R]
	call  [1]C
	reply [1]R
}

// batchRun is a run on the Batcher's goroutine.
type batchRun[K comparable, C, R any] struct {
	items []item[K, C, R]
	works []*Work[K, C, R]
}

type item[K comparable, C, R any] struct {
	log   *log[K, C, R]
	ps    []*pending[C, R]
	w     Work[K, C, R]
	calls []C
	res   []R
}

// Do makes the call c on key's log and returns its result: Run's, or the
// error that ended its work, or ctx's error if ctx ended first (see the
// package doc for what then becomes of the call).
func (b *Batcher[K, C, R]) Do(ctx context.Context, key K, c C) (R, error) {
	b.mu.Lock()
	lg := b.logs[key]
	if lg == nil && (b.maxRuns == 0 || b.inflight < b.maxRuns) {
		lg = b.newLog(key)
		lg.busy = true
		b.logs[key] = lg
		b.inflight++
		if b.hook != nil {
			b.hook(evInline, key, c)
		}
		b.mu.Unlock()
		return b.inline(ctx, lg, c)
	}
	if lg == nil {
		lg = b.newLog(key)
		b.logs[key] = lg
	}
	p := b.pendings.Get().(*pending[C, R])
	p.call = c
	p.deadline, _ = ctx.Deadline()
	lg.queue = append(lg.queue, p)
	if b.hook != nil {
		b.hook(evQueued, key, c)
	}
	if !lg.busy && !lg.ready {
		lg.ready = true
		b.ready = append(b.ready, lg)
		b.dispatch()
	}
	b.mu.Unlock()
	done := ctx.Done()
	if done == nil {
		// A context that never ends: a plain receive costs less than a
		// select.
		<-p.done
		return b.answer(p)
	}
	select {
	case <-p.done:
		return b.answer(p)
	case <-done:
	}
	b.mu.Lock()
	if i := slices.Index(lg.queue, p); i >= 0 && b.keep != nil && b.keep(c) {
		// Still queued, and to be run all the same: left to the run,
		// which lasts as its other callers' or Patience (the deadline
		// that just passed is no longer anybody's).
		p.deadline = time.Time{}
		p.state.Store(abandoned)
		b.settling.Add()
		if b.hook != nil {
			b.hook(evKept, key, c)
		}
		b.mu.Unlock()
		var zero R
		return zero, ctx.Err()
	} else if i >= 0 {
		// Still queued: withdrawn.
		lg.queue = slices.Delete(lg.queue, i, i+1)
		if len(lg.queue) == 0 && !lg.busy {
			b.ready = slices.DeleteFunc(b.ready, func(l *log[K, C, R]) bool { return l == lg })
			delete(b.logs, key)
			b.dropLog(lg)
		}
		if b.hook != nil {
			b.hook(evWithdrawn, key, c)
		}
		b.mu.Unlock()
		*p = pending[C, R]{done: p.done}
		b.pendings.Put(p)
		var zero R
		return zero, ctx.Err()
	}
	b.mu.Unlock()
	// A run took it: in flight.
	b.settling.Add() // before the run can see it abandoned
	if !p.state.CompareAndSwap(awaited, abandoned) {
		b.settling.Done() // answered just now: the answer is the caller's
		<-p.done
		return b.answer(p)
	}
	b.abandoned.Add(1)
	var zero R
	return zero, ctx.Err()
}

// answer returns p's answer and recycles p.
func (b *Batcher[K, C, R]) answer(p *pending[C, R]) (R, error) {
	r, err := p.res, p.err
	*p = pending[C, R]{done: p.done}
	b.pendings.Put(p)
	return r, err
}

// inline runs c, the only call of lg, on its caller's goroutine.
func (b *Batcher[K, C, R]) inline(ctx context.Context, lg *log[K, C, R], c C) (R, error) {
	l := b.lones.Get().(*lone[K, C, R])
	l.call[0] = c
	l.w = Work[K, C, R]{Key: lg.key, Calls: l.call[:], Results: l.reply[:]}
	l.ptr[0] = &l.w
	b.run(ctx, l.ptr[:])
	var r R
	err := l.w.Err
	if err == nil {
		r = l.w.Results[0]
	}
	*l = lone[K, C, R]{}
	b.lones.Put(l)
	key := lg.key
	b.mu.Lock()
	b.finish(lg)
	b.inflight--
	b.dispatch()
	if b.hook != nil {
		var zero C
		b.hook(evRunOver, key, zero)
	}
	b.mu.Unlock()
	return r, err
}

// finish ends lg's run: it waits for the next if calls queued meanwhile,
// or is dropped. b.mu is held.
func (b *Batcher[K, C, R]) finish(lg *log[K, C, R]) {
	lg.busy = false
	if len(lg.queue) == 0 {
		delete(b.logs, lg.key)
		b.dropLog(lg)
		return
	}
	lg.ready = true
	b.ready = append(b.ready, lg)
}

// Bounds of the logs kept for reuse: how many, and the longest queue
// one keeps (a longer one is let go, so that a burst on one key holds no
// memory for long).
const (
	maxSpare      = 1024
	maxSpareQueue = 64
)

// newLog returns an empty log for key: a spare one if there is one.
// b.mu is held.
func (b *Batcher[K, C, R]) newLog(key K) *log[K, C, R] {
	if n := len(b.spare); n > 0 {
		lg := b.spare[n-1]
		b.spare[n-1] = nil
		b.spare = b.spare[:n-1]
		lg.key = key
		return lg
	}
	return &log[K, C, R]{key: key}
}

// dropLog keeps lg, dropped from b.logs with nothing queued or in flight,
// for newLog. A caller that still holds lg (one whose context ended) finds
// its call in no queue of lg's, whatever key lg is made for next: a call
// is queued on its own log only. b.mu is held.
func (b *Batcher[K, C, R]) dropLog(lg *log[K, C, R]) {
	if len(b.spare) >= maxSpare {
		return
	}
	q := lg.queue[:0]
	if cap(q) > maxSpareQueue {
		q = nil
	}
	var zero K
	*lg = log[K, C, R]{key: zero, queue: q}
	b.spare = append(b.spare, lg)
}

// free: a run may start now. b.mu is held.
func (b *Batcher[K, C, R]) free() bool {
	return len(b.ready) > 0 && (b.maxRuns == 0 || b.inflight < b.maxRuns)
}

// dispatch starts runs of the waiting logs while there is room. b.mu is
// held.
func (b *Batcher[K, C, R]) dispatch() {
	for b.free() {
		r := b.take()
		go b.background(r)
	}
}

// take makes the next run of the waiting logs and counts it in flight.
// b.mu is held; b.free().
func (b *Batcher[K, C, R]) take() *batchRun[K, C, R] {
	r := b.runs.Get().(*batchRun[K, C, R])
	k := min(len(b.ready), b.maxWorks)
	r.items = slices.Grow(r.items[:0], k)[:k]
	for i, lg := range b.ready[:k] {
		lg.ready, lg.busy = false, true
		n := min(len(lg.queue), b.maxCalls)
		it := &r.items[i]
		it.log = lg
		it.ps = append(it.ps[:0], lg.queue[:n]...)
		m := copy(lg.queue, lg.queue[n:])
		clear(lg.queue[m:])
		lg.queue = lg.queue[:m]
	}
	m := copy(b.ready, b.ready[k:])
	clear(b.ready[m:])
	b.ready = b.ready[:m]
	b.inflight++
	return r
}

// background makes r, and then further runs while logs wait and there is
// room.
func (b *Batcher[K, C, R]) background(r *batchRun[K, C, R]) {
	for r != nil {
		b.runOnce(r)
		// The callers just answered mostly call again at once: yielding
		// lets them queue before the next run is taken. Without it a busy
		// log's callers split in two halves that take turns, one run in
		// flight each, and a round trip carries half of them.
		runtime.Gosched()
		b.mu.Lock()
		for i := range r.items {
			b.finish(r.items[i].log)
		}
		b.inflight--
		r.reset()
		b.runs.Put(r)
		r = nil
		if b.free() {
			r = b.take() // this goroutine makes the next run itself
		}
		b.dispatch()
		if b.hook != nil {
			var zero K
			var none C
			b.hook(evRunOver, zero, none)
		}
		b.mu.Unlock()
	}
}

func (r *batchRun[K, C, R]) reset() {
	for i := range r.items {
		it := &r.items[i]
		clear(it.ps)
		clear(it.calls)
		clear(it.res)
		it.log, it.w = nil, Work[K, C, R]{}
	}
	clear(r.works)
}

// runOnce makes r's run and answers its callers.
func (b *Batcher[K, C, R]) runOnce(r *batchRun[K, C, R]) {
	var pt patience
	r.works = r.works[:0]
	for i := range r.items {
		it := &r.items[i]
		n := len(it.ps)
		it.calls = slices.Grow(it.calls[:0], n)[:n]
		it.res = slices.Grow(it.res[:0], n)[:n]
		for j, p := range it.ps {
			it.calls[j] = p.call
			pt.add(p.deadline)
		}
		it.w = Work[K, C, R]{Key: it.log.key, Calls: it.calls, Results: it.res}
		r.works = append(r.works, &it.w)
	}
	b.run(b.context(&pt), r.works)
	for i := range r.items {
		it := &r.items[i]
		w := &it.w
		var backCalls []C
		var backRes []R
		gone := 0
		for j, p := range it.ps {
			if w.Err != nil {
				p.err = w.Err
			} else {
				p.res = w.Results[j]
			}
			if p.state.CompareAndSwap(awaited, answered) {
				p.done <- struct{}{}
				continue
			}
			// Its caller has left: the answer is the store's.
			gone++
			if w.Err == nil {
				backCalls, backRes = append(backCalls, p.call), append(backRes, w.Results[j])
			}
		}
		if len(backCalls) > 0 && b.handBack != nil {
			b.handBack(w.Key, backCalls, backRes)
		}
		for range gone {
			b.settling.Done()
		}
	}
}

// Ungroup makes every run from now on carry one log's calls only, with no
// bound on the runs in flight: for a server that turned a group down.
func (b *Batcher[K, C, R]) Ungroup() {
	b.mu.Lock()
	b.maxWorks, b.maxRuns = 1, 0
	b.dispatch()
	b.mu.Unlock()
}

// Grouping reports whether runs may carry the calls of several logs.
func (b *Batcher[K, C, R]) Grouping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxWorks > 1
}

// Queued is the number of calls queued on key's log, not yet taken by a
// run: tests wait on it to know their calls are in line.
func (b *Batcher[K, C, R]) Queued(key K) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lg := b.logs[key]; lg != nil {
		return len(lg.queue)
	}
	return 0
}

// InFlight is the number of runs in flight: tests that stall the server
// wait for 0 first, as a run's callers are answered before it is over.
func (b *Batcher[K, C, R]) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight
}

// Abandoned is the number of calls whose callers left while their run
// was in flight on the Batcher's goroutine.
func (b *Batcher[K, C, R]) Abandoned() int64 { return b.abandoned.Load() }

// Wait waits until every call abandoned in flight before now has had its
// run over and its result handed back (or found failed), or ctx ends.
func (b *Batcher[K, C, R]) Wait(ctx context.Context) error { return b.settling.Wait(ctx) }

// patience folds the deadlines of a run's callers into the run's, so
// that the run lasts as long as its most patient caller.
type patience struct {
	latest  time.Time
	forever bool // a caller without deadline
}

func (p *patience) add(d time.Time) {
	if d.IsZero() {
		p.forever = true
	} else if d.After(p.latest) {
		p.latest = d
	}
}

// deadline is the run's deadline: the latest caller's, or patience from
// now when a caller has none (whichever is later).
func (p *patience) deadline(patience time.Duration) time.Time {
	if p.forever {
		if d := time.Now().Add(patience); d.After(p.latest) {
			return d
		}
	}
	return p.latest
}

// sharedDeadline is a context with a deadline that runs share.
type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// context is the context of a background run for the callers whose
// deadlines pt holds.
func (b *Batcher[K, C, R]) context(pt *patience) context.Context {
	ctx, _ := b.contextFor(pt)
	return ctx
}

// contextFor is context, and its deadline (zero: none).
func (b *Batcher[K, C, R]) contextFor(pt *patience) (context.Context, time.Time) {
	if !b.deadlines {
		return context.Background(), time.Time{}
	}
	need := pt.deadline(b.patience)
	if c := b.shared.Load(); c != nil && !c.deadline.Before(need) && c.deadline.Sub(need) <= b.slack {
		return c.ctx, c.deadline
	}
	c := &sharedDeadline{deadline: need.Add(b.slack)}
	// Never cancelled but by its deadline: runs may still be using it.
	c.ctx, c.cancel = context.WithDeadline(context.Background(), c.deadline)
	b.shared.Store(c)
	return c.ctx, c.deadline
}

// Settling counts work not yet seen through (abandoned calls not yet
// handed back), so that a Wait can wait for it. The zero value is ready;
// redisstore counts its own abandoned runs with one too.
type Settling struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

// Add counts one more.
func (t *Settling) Add() {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

// Done counts one less.
func (t *Settling) Done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
}

// Wait returns once the count is 0, or with ctx's error.
func (t *Settling) Wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
