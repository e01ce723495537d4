package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// call is one request to limiter.lua.
type call struct {
	op     op
	n, arg int64
}

// op is what a call does.
type op uint8

const (
	opAcquire op = iota
	opCancel
	opRelease
	opAvailable
)

// opArgs are the ops as limiter.lua reads them, put in interfaces once: a
// string put in one on every call would allocate.
var opArgs = [...]any{opAcquire: "acquire", opCancel: "cancel", opRelease: "release", opAvailable: "available"}

// work is the calls on one log that go in one script run, and their
// answers: a reply for each call, or the error that ended the work.
type work struct {
	key   redlimit.Key
	keys  scriptKeySet   // the script's KEYS for key; none: worked out
	known *encodedConfig // the config the client sent
	calls []call
	rs    []reply
	err   error
	// a lone call's call and reply, without allocations of their own
	one    [1]call
	oneRep [1]reply
}

// scriptKeySet is a log's KEYS, also as command arguments: a string put in
// an interface allocates, so a busy lane does it once.
type scriptKeySet struct {
	names []string
	args  []any
}

func newScriptKeySet(names []string) scriptKeySet {
	args := make([]any, len(names))
	for i, k := range names {
		args[i] = k
	}
	return scriptKeySet{names: names, args: args}
}

// loneWorks recycles the works of lone calls that were answered.
var loneWorks = sync.Pool{New: func() any { return new(work) }}

// lone makes w a work of the one call c.
func (w *work) lone(c call) {
	w.one[0] = c
	w.calls, w.rs = w.one[:], w.oneRep[:]
}

// runOne makes c on key's log in a script run of its own (WithoutBatching).
func (s *Store) runOne(ctx context.Context, key redlimit.Key, known *encodedConfig, c call) (reply, error) {
	w := &work{key: key, known: known}
	w.lone(c)
	s.runWorks(ctx, []*work{w})
	return w.rs[0], w.err
}

// limiterCalls recycles the commands of runs that were answered.
var limiterCalls = sync.Pool{New: func() any { return new(limiterCall) }}

// minusOne is the most common argument that would be boxed anew each
// time: a wait of -1, "without waiting".
var minusOne any = int64(-1)

func boxArg(v int64) any {
	if v == -1 {
		return minusOne
	}
	return v // 0..255 are boxed without an allocation
}

// runWorks makes the calls of several logs (of one server, or one Cluster
// slot) in one script run and sets each work's replies or error.
func (s *Store) runWorks(ctx context.Context, works []*work) {
	nk := 4 * len(works)
	n := 3 + nk + 1
	for _, w := range works {
		n += 2 + 3*len(w.calls)
	}
	c := limiterCalls.Get().(*limiterCall)
	c.cmd, c.keys = slices.Grow(c.cmd[:0], n), slices.Grow(c.keys[:0], nk)
	c.cmd = append(c.cmd, fcallName, limiterFunctionName, nk)
	for _, w := range works {
		if w.keys.names == nil {
			w.keys = newScriptKeySet(scriptKeys(s.prefix, w.key.Name, w.key.Client))
		}
		c.keys = append(c.keys, w.keys.names...)
		c.cmd = append(c.cmd, w.keys.args...)
	}
	c.cmd = append(c.cmd, s.nowArg())
	writes := false
	for _, w := range works {
		c.cmd = append(c.cmd, w.known.arg, len(w.calls))
		for _, cl := range w.calls {
			c.cmd = append(c.cmd, opArgs[cl.op], boxArg(cl.n), boxArg(cl.arg))
			writes = writes || cl.op != opAvailable
		}
	}
	c.args = c.cmd[3+nk:]
	s.runs.Add(1)
	raw, err := s.evalLimiter(ctx, writes, c, works)
	if err == nil {
		// Answered: nothing reads c any more.
		clear(c.cmd)
		clear(c.keys)
		c.args = nil
		limiterCalls.Put(c)
	}
	if err != nil && len(works) > 1 && crossSlot(err) {
		// A clustered Redis behind one endpoint (a single-shard Cluster, a
		// proxy) refuses keys of several slots in one run, before running
		// anything: from now on each limiter's calls go alone.
		s.crossSlotRefused.Store(true)
		for _, w := range works {
			s.runWorks(ctx, []*work{w})
		}
		return
	}
	if err == nil {
		err = decodeReplies(raw, works)
	} else {
		err = wrap(err)
	}
	if err != nil {
		for _, w := range works {
			w.err = err
		}
	}
}

// Batching: calls on one log made while a script run for that log is in
// flight wait and then go together in the next run. A lone call still goes
// at once; under load each run carries many calls, loading and saving the
// state once for all of them.

// maxBatch bounds the calls in one script run.
const maxBatch = 256

// lane is the queue of one log's calls. It is found by the limiter's name
// in Store.lanes when its client is the one there (the common case: one
// client ID per process), else by name and client in Store.clientLanes.
type lane struct {
	mu      sync.Mutex
	busy    bool // a run is in flight
	dead    bool // removed from its map: take a new lane
	waiting []*pending
	client  string
	keys    scriptKeySet
	home    *sync.Map // the map that holds it, under mapKey
	mapKey  string
}

// laneFor returns key's lane, making one if there is none. Lanes are made
// under laneMu, after looking in both maps again, so that one log never has
// two lanes (which could run its calls out of order).
func (s *Store) laneFor(key redlimit.Key) *lane {
	if v, ok := s.lanes.Load(key.Name); ok {
		if ln := v.(*lane); ln.client == key.Client {
			return ln
		}
	}
	if s.clientLaneCount.Load() > 0 {
		if v, ok := s.clientLanes.Load(logKey(key)); ok {
			return v.(*lane)
		}
	}
	s.laneMu.Lock()
	defer s.laneMu.Unlock()
	if s.clientLaneCount.Load() > 0 {
		if v, ok := s.clientLanes.Load(logKey(key)); ok {
			return v.(*lane)
		}
	}
	keys := newScriptKeySet(scriptKeys(s.prefix, key.Name, key.Client))
	v, _ := s.lanes.LoadOrStore(key.Name, &lane{client: key.Client, keys: keys, home: &s.lanes, mapKey: key.Name})
	if ln := v.(*lane); ln.client == key.Client {
		return ln
	}
	lk := logKey(key)
	ln := &lane{client: key.Client, keys: keys, home: &s.clientLanes, mapKey: lk}
	s.clientLanes.Store(lk, ln)
	s.clientLaneCount.Add(1)
	return ln
}

// pending is a call waiting in a lane.
type pending struct {
	call     call
	known    *encodedConfig
	deadline time.Time // zero: none
	done     chan outcome
	state    atomic.Int32 // awaited, answered or abandoned (handback.go)
}

// pendings recycles pending calls (and their channels) that were answered;
// one whose caller gave up may still be answered, so it is never reused.
var pendings = sync.Pool{New: func() any { return &pending{done: make(chan outcome, 1)} }}

type outcome struct {
	r   reply
	err error
}

// batched makes c on key's log, together with the calls made meanwhile.
func (s *Store) batched(ctx context.Context, key redlimit.Key, known *encodedConfig, c call) (reply, error) {
	for {
		ln := s.laneFor(key)
		ln.mu.Lock()
		if ln.dead {
			ln.mu.Unlock()
			continue
		}
		if !ln.busy {
			// Nothing in flight: this call goes now, alone.
			ln.busy = true
			ln.mu.Unlock()
			w := loneWorks.Get().(*work)
			*w = work{key: key, keys: ln.keys, known: known}
			w.lone(c)
			err := s.send(ctx, w, time.Time{})
			if r := s.ranOn(ln); r != nil {
				go s.runLane(ln, key, r) // this caller returns
			}
			if err != nil {
				return reply{}, err // w may still be written to
			}
			r, err := w.rs[0], w.err
			*w = work{}
			loneWorks.Put(w)
			return r, err
		}
		p := pendings.Get().(*pending)
		p.call, p.known = c, known
		p.deadline, _ = ctx.Deadline()
		ln.waiting = append(ln.waiting, p)
		ln.mu.Unlock()
		select {
		case o := <-p.done:
			// Answered: nothing refers to p any more.
			*p = pending{done: p.done}
			pendings.Put(p)
			return o.r, o.err
		case <-ctx.Done():
			ln.mu.Lock()
			i := slices.Index(ln.waiting, p)
			if i >= 0 {
				ln.waiting = slices.Delete(ln.waiting, i, i+1)
			}
			ln.mu.Unlock()
			if i < 0 {
				// A run took the call: Redis may still carry it out, and
				// then runOnce hands back what it granted; unless the
				// reply came first, and is the caller's.
				s.hb.settling.add() // before the run can see it abandoned
				if !p.state.CompareAndSwap(awaited, abandoned) {
					s.hb.settling.done()
					o := <-p.done
					*p = pending{done: p.done}
					pendings.Put(p)
					return o.r, o.err
				}
				s.hb.abandoned.Add(1)
			}
			return reply{}, wrap(ctx.Err())
		}
	}
}

// ranOn ends ln's run: it returns the calls that queued up meanwhile, as
// the lane's next run, or retires the lane when none did (and returns nil).
// One run at a time keeps a log's calls in the order they were made.
func (s *Store) ranOn(ln *lane) *laneRun {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if len(ln.waiting) > 0 {
		all := len(ln.waiting)
		n := min(all, maxBatch)
		r := laneRunPool.Get().(*laneRun)
		r.batch = append(r.batch[:0], ln.waiting[:n]...)
		ln.waiting = append(ln.waiting[:0], ln.waiting[n:]...)
		clear(ln.waiting[len(ln.waiting):all]) // the calls moved to r are r's now
		return r
	}
	ln.busy, ln.dead = false, true
	if ln.home.CompareAndDelete(ln.mapKey, ln) && ln.home == &s.clientLanes {
		s.clientLaneCount.Add(-1)
	}
	return nil
}

// laneRun is a run of a lane's waiting calls; laneRunPool recycles them with
// their slices, so that a busy lane allocates little.
type laneRun struct {
	batch []*pending
	w     work
}

var laneRunPool = sync.Pool{New: func() any { return new(laneRun) }}

// runLane makes ln's runs, one after another, while calls keep queuing up.
func (s *Store) runLane(ln *lane, key redlimit.Key, r *laneRun) {
	for r != nil {
		s.runOnce(ln, key, r)
		r = s.ranOn(ln)
	}
}

// runOnce runs r's calls and answers their callers.
func (s *Store) runOnce(ln *lane, key redlimit.Key, r *laneRun) {
	w := &r.w
	n := len(r.batch)
	*w = work{key: key, keys: ln.keys, calls: slices.Grow(w.calls[:0], n)[:n], rs: slices.Grow(w.rs[:0], n)[:n]}
	var pt patience
	for i, p := range r.batch {
		w.calls[i] = p.call
		if w.known == nil || w.known.cfg.Rate == 0 {
			w.known = p.known
		}
		pt.add(p.deadline)
	}
	ctx, deadline := s.backgroundContext(&pt)
	err := s.send(ctx, w, deadline)
	abandoned := err != nil // a group's run may still write to w
	if err == nil {
		err = w.err
	}
	var back []call
	var cfg *redlimit.Config
	gone := 0
	for i, p := range r.batch {
		o := outcome{err: err}
		if err == nil {
			o = outcome{r: w.rs[i]}
		}
		if p.state.CompareAndSwap(awaited, answered) {
			p.done <- o
			continue
		}
		// Its caller has gone: what it was granted goes back. (A run
		// given up here may still be carried out: the group's run then
		// hands its grants back, as its work was abandoned.)
		gone++
		if err == nil && p.call.op == opAcquire {
			if b, ok := handBackCall(p.call.n, o.r); ok {
				back, cfg = append(back, b), o.r.cfg
			}
		}
	}
	s.handBack(key, cfg, back)
	for range gone {
		s.hb.settling.done()
	}
	clear(r.batch)
	if !abandoned {
		laneRunPool.Put(r)
	}
}

// crossSlot: Redis refused a run whose keys are in several hash slots.
func crossSlot(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "CROSSSLOT")
}

// runPatience bounds a shared run whose callers include one without a
// deadline (each caller still returns at its own context's end).
const runPatience = 5 * time.Second

// patience folds the deadlines of a shared run's callers into the run's,
// so that the run lasts as long as its most patient caller.
type patience struct {
	latest  time.Time
	forever bool // a caller without deadline: runPatience from now
}

func (p *patience) add(d time.Time) {
	if d.IsZero() {
		p.forever = true
	} else if d.After(p.latest) {
		p.latest = d
	}
}

func (p *patience) deadline() time.Time {
	if p.forever {
		if d := time.Now().Add(runPatience); d.After(p.latest) {
			return d
		}
	}
	return p.latest
}

// backgroundContext is the context of a run made in the background for the
// callers whose deadlines pt holds, and its deadline. A client that keeps
// to its own timeouts (without ContextTimeoutEnabled) needs none. One that
// stops at a context's deadline gets one that ends as late as the most
// patient caller, or up to runSlack later: such a context costs a timer and
// allocations, which the garbage collector makes callers pay for in
// latency, so runs share one while its deadline fits them.
func (s *Store) backgroundContext(pt *patience) (context.Context, time.Time) {
	if !s.bounded {
		return context.Background(), time.Time{}
	}
	need := pt.deadline()
	if c := s.runCtx.Load(); c != nil && !c.deadline.Before(need) && c.deadline.Sub(need) <= runSlack {
		return c.ctx, c.deadline
	}
	c := &sharedDeadline{deadline: need.Add(runSlack)}
	// Never cancelled but by its deadline: runs may still be using it.
	c.ctx, c.cancel = context.WithDeadline(context.Background(), c.deadline)
	s.runCtx.Store(c)
	return c.ctx, c.deadline
}

// runSlack is how much longer than its most patient caller a run in the
// background may wait for Redis.
const runSlack = time.Second

// sharedDeadline is a context with a deadline that runs share.
type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// Grouping: on one server (a *redis.Client, Sentinel's included) the works
// of different limiters go together too. At most maxInFlight runs are in
// flight at once; a work that comes while they are joins the group's next
// run, which carries up to maxWorks works. A limiter's works do not overlap:
// its lane sends the next only after the last is answered (or given up at
// its callers' deadline, when it may still be in a group's run). On a Cluster
// every limiter may live on another node, so works go one by one.

const (
	maxInFlight = 4
	maxWorks    = 64
)

// group is the runs of one server.
type group struct {
	mu       sync.Mutex
	inflight int
	waiting  []*queued
}

// queued is a work waiting for a run of its group.
type queued struct {
	w        *work
	deadline time.Time
	done     chan struct{} // the run is over
	state    atomic.Int32  // awaited, answered or abandoned (handback.go)
}

// queuedPool recycles the queued works that were answered (or withdrawn
// before a run took them).
var queuedPool = sync.Pool{New: func() any { return &queued{done: make(chan struct{}, 1)} }}

// send makes w's calls in a script run, with other limiters' works when the
// store groups them; deadline is that of the most patient caller (zero:
// ctx's). It returns an error when ctx ended before
// the run was over, and then w may still be written to by a group's run;
// otherwise w holds the outcome.
func (s *Store) send(ctx context.Context, w *work, deadline time.Time) error {
	g := s.group
	if g == nil || s.crossSlotRefused.Load() {
		s.runWorks(ctx, []*work{w})
		return nil
	}
	g.mu.Lock()
	if g.inflight < maxInFlight {
		g.inflight++
		g.mu.Unlock()
		s.runWorks(ctx, []*work{w})
		s.nextRun(g)
		return nil
	}
	if deadline.IsZero() {
		deadline, _ = ctx.Deadline()
	}
	q := queuedPool.Get().(*queued)
	q.w, q.deadline = w, deadline
	g.waiting = append(g.waiting, q)
	g.mu.Unlock()
	select {
	case <-q.done:
		*q = queued{done: q.done}
		queuedPool.Put(q)
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		i := slices.Index(g.waiting, q)
		if i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
		}
		g.mu.Unlock()
		if i >= 0 {
			*q = queued{done: q.done}
			queuedPool.Put(q)
			return wrap(ctx.Err())
		}
		s.hb.settling.add() // before the run can see it abandoned
		if !q.state.CompareAndSwap(awaited, abandoned) {
			// The run was over just now: w holds the outcome.
			s.hb.settling.done()
			<-q.done
			*q = queued{done: q.done}
			queuedPool.Put(q)
			return nil
		}
		// A run took w and may still write to it: w is the run's, and it
		// hands back what w's calls were granted.
		s.hb.abandoned.Add(int64(len(w.calls)))
		return wrap(ctx.Err())
	}
}

// nextRun hands a finished run's place to the works that queued meanwhile,
// all in one run in the background, or frees it.
func (s *Store) nextRun(g *group) {
	g.mu.Lock()
	if len(g.waiting) == 0 {
		g.inflight--
		g.mu.Unlock()
		return
	}
	batch := g.waiting
	if len(batch) > maxWorks {
		batch = batch[:maxWorks]
	}
	g.waiting = append([]*queued(nil), g.waiting[len(batch):]...)
	g.mu.Unlock()
	go func() {
		works := make([]*work, len(batch))
		var pt patience
		for i, q := range batch {
			works[i] = q.w
			pt.add(q.deadline)
		}
		ctx, _ := s.backgroundContext(&pt)
		s.runWorks(ctx, works)
		for _, q := range batch {
			if q.state.CompareAndSwap(awaited, answered) {
				q.done <- struct{}{}
				continue
			}
			if q.w.err == nil {
				s.handBackWork(q.w.key, q.w.calls, q.w.rs)
			}
			s.hb.settling.done()
		}
		s.nextRun(g)
	}()
}
