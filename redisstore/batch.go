package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// work is the calls on one log that go in one script run.
type work struct {
	key   redlimit.Key
	known redlimit.Config
	calls []call
	one   [1]call // calls of a lone call, without an allocation of its own
}

// result is a work's replies, or the error that ended it.
type result struct {
	rs  []reply
	err error
}

// runCalls makes calls on key's log in one script run, one after another at
// the same instant, and returns a reply for each.
func (s *Store) runCalls(ctx context.Context, key redlimit.Key, known redlimit.Config, calls []call) ([]reply, error) {
	r := s.runWorks(ctx, []*work{{key: key, known: known, calls: calls}})[0]
	return r.rs, r.err
}

// runWorks makes the calls of several logs (of one server, or one Cluster
// slot) in one script run and returns a result for each work.
func (s *Store) runWorks(ctx context.Context, works []*work) []result {
	out := make([]result, len(works))
	nk := 4 * len(works)
	n := 3 + nk + 1
	for _, w := range works {
		n += 2 + 3*len(w.calls)
	}
	c := limiterCall{cmd: make([]any, 3, n), keys: make([]string, 0, nk)}
	c.cmd[0], c.cmd[1], c.cmd[2] = fcallName, limiterFunctionName, nk
	for _, w := range works {
		for _, k := range limiterKeys(s.prefix, w.key.Name).scriptKeys(w.key.Client) {
			c.keys = append(c.keys, k)
			c.cmd = append(c.cmd, k)
		}
	}
	c.cmd = append(c.cmd, s.nowArg())
	writes := false
	for _, w := range works {
		c.cmd = append(c.cmd, s.knownArg(w.known), len(w.calls))
		for _, cl := range w.calls {
			c.cmd = append(c.cmd, opArgs[cl.op], cl.n, cl.arg)
			writes = writes || cl.op != opAvailable
		}
	}
	c.args = c.cmd[3+nk:]
	s.runs.Add(1)
	raw, err := s.evalLimiter(ctx, writes, c)
	if err != nil && len(works) > 1 && crossSlot(err) {
		// A clustered Redis behind one endpoint (a single-shard Cluster, a
		// proxy) refuses keys of several slots in one run, before running
		// anything: from now on each limiter's calls go alone.
		s.crossSlotRefused.Store(true)
		for i, w := range works {
			out[i] = s.runWorks(ctx, []*work{w})[0]
		}
		return out
	}
	if err == nil {
		err = decodeReplies(raw, works, out)
	} else {
		err = wrap(err)
	}
	if err != nil {
		for i := range out {
			out[i] = result{err: err}
		}
	}
	return out
}

// decodeReplies reads limiter.lua's reply to works into out, trusting
// nothing of its shape: an error for the whole reply is returned, one for a
// limiter (not initialized, unreadable config) goes to its work. The reply
// carries a stored config only when it is not the one the client sent.
func decodeReplies(raw any, works []*work, out []result) error {
	r, ok := raw.([]any)
	if !ok {
		return fmt.Errorf("%w: unexpected script reply %T", redlimit.ErrCorrupt, raw)
	}
	i := 0
	for wi, w := range works {
		if len(r) < i+2 {
			return fmt.Errorf("%w: script reply has %d elements, too few for %d limiters", redlimit.ErrCorrupt, len(r), len(works))
		}
		now, ok := r[i].(int64)
		if !ok {
			return fmt.Errorf("%w: script reply time is %T", redlimit.ErrCorrupt, r[i])
		}
		stored := &w.known
		switch r[i+1] {
		case int64(-1):
			out[wi] = result{err: redlimit.ErrNotInitialized}
			i += 2
			continue
		case int64(-3):
			out[wi] = result{err: fmt.Errorf("limiter %q: %w: stored config", w.key.Name, redlimit.ErrCorrupt)}
			i += 2
			continue
		case int64(0):
			if stored.Rate == 0 {
				return fmt.Errorf("%w: script reply: the same config as none", redlimit.ErrCorrupt)
			}
			i += 2
		case int64(1):
			if len(r) < i+3 {
				return fmt.Errorf("%w: script reply cut short", redlimit.ErrCorrupt)
			}
			cfg, err := decodeConfig(r[i+2])
			if err != nil {
				return fmt.Errorf("limiter %q: %w", w.key.Name, err)
			}
			stored = &cfg
			i += 3
		default:
			return fmt.Errorf("%w: script reply config flag %v", redlimit.ErrCorrupt, r[i+1])
		}
		if len(r) < i+3*len(w.calls) {
			return fmt.Errorf("%w: script reply cut short", redlimit.ErrCorrupt)
		}
		rs := make([]reply, len(w.calls))
		for ci := range rs {
			o := &rs[ci]
			o.now, o.cfg = now, stored
			for _, p := range [3]*int64{&o.code, &o.value, &o.wait} {
				v, ok := r[i].(int64)
				if !ok {
					return fmt.Errorf("%w: script reply element %d is %T", redlimit.ErrCorrupt, i, r[i])
				}
				*p = v
				i++
			}
			if o.code < -2 || o.code > 1 {
				return fmt.Errorf("%w: script reply code %d", redlimit.ErrCorrupt, o.code)
			}
		}
		out[wi] = result{rs: rs}
	}
	if i != len(r) {
		return fmt.Errorf("%w: script reply has %d elements, want %d", redlimit.ErrCorrupt, len(r), i)
	}
	return nil
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
	busy    bool
	dead    bool // removed from its map: take a new lane
	waiting []*pending
	client  string
	home    *sync.Map // the map that holds it, under mapKey
	mapKey  string
	// spare and calls are reused by the lane's runs, one at a time, so
	// that a busy lane allocates little: the slice waiting calls queue in
	// and a run's calls.
	spare []*pending
	calls []call
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
	lk := logKey(key)
	if v, ok := s.clientLanes.Load(lk); ok {
		return v.(*lane)
	}
	v, _ := s.lanes.LoadOrStore(key.Name, &lane{client: key.Client, home: &s.lanes, mapKey: key.Name})
	if ln := v.(*lane); ln.client == key.Client {
		return ln
	}
	ln := &lane{client: key.Client, home: &s.clientLanes, mapKey: lk}
	s.clientLanes.Store(lk, ln)
	s.clientLaneCount.Add(1)
	return ln
}

// pending is a call waiting in a lane.
type pending struct {
	call     call
	known    redlimit.Config
	deadline time.Time // zero: none
	done     chan outcome
}

// pendings recycles pending calls (and their channels) that were answered;
// one whose caller gave up may still be answered, so it is never reused.
var pendings = sync.Pool{New: func() any { return &pending{done: make(chan outcome, 1)} }}

type outcome struct {
	r   reply
	err error
}

// batched makes c on key's log, together with the calls made meanwhile.
func (s *Store) batched(ctx context.Context, key redlimit.Key, known redlimit.Config, c call) (reply, error) {
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
			w := &work{key: key, known: known}
			w.one[0] = c
			w.calls = w.one[:]
			rs, err := s.send(ctx, w, time.Time{})
			s.next(ln, key)
			if err != nil {
				return reply{}, err
			}
			return rs[0], nil
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
			if i := slices.Index(ln.waiting, p); i >= 0 {
				ln.waiting = slices.Delete(ln.waiting, i, i+1)
			}
			ln.mu.Unlock()
			// If the call had already been sent, Redis may still carry it
			// out: a permit granted that nobody uses, never one too many.
			return reply{}, wrap(ctx.Err())
		}
	}
}

// next sends the calls that queued up while a run was in flight, in the
// background, and retires the lane when none are left.
func (s *Store) next(ln *lane, key redlimit.Key) {
	ln.mu.Lock()
	if len(ln.waiting) == 0 {
		ln.busy, ln.dead = false, true
		if ln.home.CompareAndDelete(ln.mapKey, ln) && ln.home == &s.clientLanes {
			s.clientLaneCount.Add(-1)
		}
		ln.mu.Unlock()
		return
	}
	batch := ln.waiting
	if len(batch) > maxBatch {
		batch = batch[:maxBatch]
	}
	ln.waiting = append(ln.spare[:0], ln.waiting[len(batch):]...)
	ln.spare = nil
	calls := ln.calls
	ln.calls = nil
	ln.mu.Unlock()
	go func() {
		if cap(calls) < len(batch) {
			calls = make([]call, len(batch))
		}
		w := &work{key: key, calls: calls[:len(batch)]}
		var deadline time.Time
		for i, p := range batch {
			w.calls[i] = p.call
			if w.known.Rate == 0 {
				w.known = p.known
			}
			deadline = patient(deadline, p.deadline)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		rs, err := s.send(ctx, w, deadline)
		cancel()
		for i, p := range batch {
			if err != nil {
				p.done <- outcome{err: err}
			} else {
				p.done <- outcome{r: rs[i]}
			}
			batch[i] = nil
		}
		ln.mu.Lock()
		ln.spare = batch[:0]
		if err == nil {
			// The run is over; after an error (a deadline) it may still
			// be about to read w.calls.
			ln.calls = w.calls[:0]
		}
		ln.mu.Unlock()
		s.next(ln, key)
	}()
}

// crossSlot: Redis refused a run whose keys are in several hash slots.
func crossSlot(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "CROSSSLOT")
}

// runPatience bounds a shared run whose callers include one without a
// deadline (each caller still returns at its own context's end).
const runPatience = 5 * time.Second

// patient folds a caller's deadline d (zero: none) into a shared run's,
// so that the run lasts as long as its most patient caller.
func patient(run, d time.Time) time.Time {
	if d.IsZero() {
		d = time.Now().Add(runPatience)
	}
	if run.IsZero() || d.After(run) {
		return d
	}
	return run
}

// Grouping: on one server (a *redis.Client, Sentinel's included) the works
// of different limiters go together too. At most maxInFlight runs are in
// flight at once; a work that comes while they are joins the group's next
// run, which carries up to maxWorks works. A limiter's works never overlap:
// its lane sends the next only after the last is answered. On a Cluster
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
	done     chan result
}

// send makes w's calls in a script run, with other limiters' works when the
// store groups them; deadline is that of the most patient caller (zero: ctx's).
func (s *Store) send(ctx context.Context, w *work, deadline time.Time) ([]reply, error) {
	g := s.group
	if g == nil || s.crossSlotRefused.Load() {
		r := s.runWorks(ctx, []*work{w})[0]
		return r.rs, r.err
	}
	g.mu.Lock()
	if g.inflight < maxInFlight {
		g.inflight++
		g.mu.Unlock()
		r := s.runWorks(ctx, []*work{w})[0]
		s.nextRun(g)
		return r.rs, r.err
	}
	if deadline.IsZero() {
		deadline, _ = ctx.Deadline()
	}
	q := &queued{w: w, deadline: deadline, done: make(chan result, 1)}
	g.waiting = append(g.waiting, q)
	g.mu.Unlock()
	select {
	case r := <-q.done:
		return r.rs, r.err
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.waiting, q); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
		}
		g.mu.Unlock()
		return nil, wrap(ctx.Err())
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
		var deadline time.Time
		for i, q := range batch {
			works[i] = q.w
			deadline = patient(deadline, q.deadline)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		rs := s.runWorks(ctx, works)
		cancel()
		for i, q := range batch {
			q.done <- rs[i]
		}
		s.nextRun(g)
	}()
}
