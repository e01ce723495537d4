package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
)

// call is one request to limiter.lua.
type call struct {
	op     string
	n, arg int64
}

// runCalls makes calls on key's log in one script run, one after another at
// the same instant, and returns a reply for each.
func (s *Store) runCalls(ctx context.Context, key redlimit.Key, known redlimit.Config, calls []call) ([]reply, error) {
	args := make([]any, 0, 8+3*len(calls))
	args = append(args, s.nowArg())
	args = append(args, configArgs(known)...)
	writes := false
	for _, c := range calls {
		args = append(args, c.op, c.n, c.arg)
		writes = writes || c.op != "available"
	}
	s.runs.Add(1)
	raw, err := s.eval(ctx, limiterScript, writes, limiterKeys(s.prefix, key.Name).scriptKeys(key.Client), args...)
	if err != nil {
		return nil, wrap(err)
	}
	out, err := decodeReplies(raw, len(calls), known)
	if err != nil {
		return nil, fmt.Errorf("limiter %q: %w", key.Name, err)
	}
	return out, nil
}

// decodeReplies reads limiter.lua's reply to calls calls, trusting nothing
// of its shape. The reply carries the stored config only when it is not the
// one the client sent (known).
func decodeReplies(raw any, calls int, known redlimit.Config) ([]reply, error) {
	r, err := asArray(raw, 1)
	if err != nil {
		return nil, err
	}
	if len(r) == 1 {
		switch r[0] {
		case int64(-1):
			return nil, redlimit.ErrNotInitialized
		case int64(-3):
			return nil, fmt.Errorf("%w: stored config", redlimit.ErrCorrupt)
		}
		return nil, fmt.Errorf("%w: script reply %v", redlimit.ErrCorrupt, r[0])
	}
	now, ok := r[0].(int64)
	if !ok {
		return nil, fmt.Errorf("%w: script reply time is %T", redlimit.ErrCorrupt, r[0])
	}
	cfg, first := known, 2
	switch {
	case r[1] == int64(0) && known.Rate != 0:
	case r[1] == int64(1) && len(r) >= 9:
		if cfg, err = decodeConfig(r[2:9]); err != nil {
			return nil, err
		}
		first = 9
	default:
		return nil, fmt.Errorf("%w: script reply config flag %v", redlimit.ErrCorrupt, r[1])
	}
	if len(r) != first+4*calls {
		return nil, fmt.Errorf("%w: script reply has %d elements, want %d", redlimit.ErrCorrupt, len(r), first+4*calls)
	}
	out := make([]reply, calls)
	for i := range out {
		o := &out[i]
		o.now, o.cfg = now, cfg
		for j, p := range [4]*int64{&o.code, &o.value, &o.wait, &o.at} {
			v, ok := r[first+4*i+j].(int64)
			if !ok {
				return nil, fmt.Errorf("%w: script reply element %d is %T", redlimit.ErrCorrupt, first+4*i+j, r[first+4*i+j])
			}
			*p = v
		}
		if o.code < -2 || o.code > 1 {
			return nil, fmt.Errorf("%w: script reply code %d", redlimit.ErrCorrupt, o.code)
		}
	}
	return out, nil
}

// Batching: calls on one log made while a script run for that log is in
// flight wait and then go together in the next run. A lone call still goes
// at once; under load each run carries many calls, loading and saving the
// state once for all of them.

// maxBatch bounds the calls in one script run.
const maxBatch = 256

// lane is the queue of one log's calls.
type lane struct {
	mu      sync.Mutex
	busy    bool
	dead    bool // removed from Store.lanes: take a new lane
	waiting []*pending
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

func laneKey(key redlimit.Key) string { return key.Name + "\x00" + key.Client }

// batched makes c on key's log, together with the calls made meanwhile.
func (s *Store) batched(ctx context.Context, key redlimit.Key, known redlimit.Config, c call) (reply, error) {
	lk := laneKey(key)
	for {
		v, ok := s.lanes.Load(lk)
		if !ok {
			v, _ = s.lanes.LoadOrStore(lk, &lane{})
		}
		ln := v.(*lane)
		ln.mu.Lock()
		if ln.dead {
			ln.mu.Unlock()
			continue
		}
		if !ln.busy {
			// Nothing in flight: this call goes now, alone.
			ln.busy = true
			ln.mu.Unlock()
			rs, err := s.runCalls(ctx, key, known, []call{c})
			s.next(lk, ln, key)
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
			for i, q := range ln.waiting {
				if q == p {
					ln.waiting = append(ln.waiting[:i], ln.waiting[i+1:]...)
					break
				}
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
func (s *Store) next(lk string, ln *lane, key redlimit.Key) {
	ln.mu.Lock()
	if len(ln.waiting) == 0 {
		ln.busy, ln.dead = false, true
		s.lanes.Delete(lk)
		ln.mu.Unlock()
		return
	}
	batch := ln.waiting
	if len(batch) > maxBatch {
		batch = batch[:maxBatch]
	}
	ln.waiting = append([]*pending(nil), ln.waiting[len(batch):]...)
	ln.mu.Unlock()
	go func() {
		calls := make([]call, len(batch))
		known := redlimit.Config{}
		var deadline time.Time
		for i, p := range batch {
			calls[i] = p.call
			if known.Rate == 0 {
				known = p.known
			}
			if p.deadline.After(deadline) {
				deadline = p.deadline
			}
		}
		// The run lasts as long as the most patient of its callers.
		if deadline.IsZero() {
			deadline = time.Now().Add(5 * time.Second)
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		rs, err := s.runCalls(ctx, key, known, calls)
		cancel()
		for i, p := range batch {
			if err != nil {
				p.done <- outcome{err: err}
			} else {
				p.done <- outcome{r: rs[i]}
			}
		}
		s.next(lk, ln, key)
	}()
}
