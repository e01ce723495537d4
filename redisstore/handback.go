package redisstore

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/batch"
)

// Handing back what callers that are gone were granted.
//
// A caller may give up (its context ends) while its call is in flight: sent
// to Redis, or in a run that was. Redis may still carry the call out, and a
// grant nobody waits for would hold its permits (a reservation, up to as
// far ahead as the caller's wait allowed) for nobody. So the store, not the
// caller, sees the call through: the run goes on in the background, and when
// its reply shows a grant for a caller that has gone, the store hands it
// back itself (a Cancel, or a Release for a token bucket's immediate grant),
// in the background: the grants of one run in one script run, within
// handBackTimeout, at most maxHandBacks at once.
// Stats counts the calls abandoned and the grants handed back. A caller's
// own hand-back (Cancel, Release) is never dropped either: queued when its
// caller leaves, it stays queued (batch.go, Keep) and WaitHandBacks waits
// for it.
//
// A call is abandoned where its caller stops waiting for it: in within (a
// client that does not keep to contexts: guarded, abandonRun), and in a
// run of the batcher's (internal/batch, which gives the call and its reply
// to handBackWork once the run is over). Each place settles the race
// between the reply and the caller with one compare-and-swap: the caller
// that wins takes the reply; the reply that wins is the store's.

// The states of an answer that a caller may stop waiting for.
const (
	awaited   int32 = iota // the caller waits
	answered               // the reply went to the caller
	abandoned              // the caller left: the reply is the store's
)

// handBackTimeout bounds the hand-back of one grant.
const handBackTimeout = 2 * time.Second

// maxHandBacks bounds the hand-backs in flight at once; beyond it a grant is
// not handed back (counted as failed): the caller's wait, which bounded the
// reservation, bounds what it holds.
const maxHandBacks = 1 << 16

// handBackStats are the store's counters of abandoned calls.
type handBackStats struct {
	abandoned, handedBack, failed atomic.Int64
	inflight                      atomic.Int64
	settling                      batch.Settling
}

// WaitHandBacks waits until every call abandoned by its caller before now
// has been seen through: its grant handed back, or found to be none (a
// refusal, an error). Tests use it, and a process that shuts down can, so
// that the permits of callers that gave up are not left behind.
func (s *Store) WaitHandBacks(ctx context.Context) error {
	if s.batch != nil {
		// The batcher hands its calls to handBackWork, which counts
		// them in s.hb.settling before the batcher lets go of them.
		if err := s.batch.Wait(ctx); err != nil {
			return err
		}
	}
	if err := s.keyedWait(ctx); err != nil {
		return err
	}
	return s.hb.settling.Wait(ctx)
}

// abandoned is the calls abandoned by their callers while in flight: in a
// script run the caller made (guarded), or in one of the batcher's.
func (s *Store) abandoned() int64 {
	n := s.hb.abandoned.Load()
	if s.batch != nil {
		n += s.batch.Abandoned()
	}
	return n + s.keyedAbandoned()
}

// guarded runs f in r.ctx, returning at the end of r.watch, the caller's
// context, when the client would not. If the caller leaves first, abandon
// (called then, before the caller returns: what f works on is still the
// caller's) says what to do with f's answer when it comes; nil: nothing.
func guarded[T any](r refusable, f func(context.Context) (T, error), abandon func() func(T, error)) (T, error) {
	if r.watch == nil {
		return f(r.ctx)
	}
	fl := &flight[T]{done: make(chan flightResult[T], 1), f: f, ctx: r.ctx}
	go fl.run() // a method: no closure to allocate
	select {
	case res := <-fl.done:
		return res.v, res.err
	case <-r.watch.Done():
		if !fl.state.CompareAndSwap(awaited, abandoned) {
			res := <-fl.done // answered just now: the caller has it
			return res.v, res.err
		}
		if abandon != nil {
			fl.late = abandon()
		}
		fl.done <- flightResult[T]{}
		var zero T
		return zero, r.watch.Err()
	}
}

// flight is a call that guarded may leave to the store.
type flight[T any] struct {
	state atomic.Int32 // awaited, answered or abandoned
	// done carries the answer to the caller, or (abandoned) word from the
	// caller that late is set.
	done chan flightResult[T]
	late func(T, error)
	f    func(context.Context) (T, error)
	ctx  context.Context
}

type flightResult[T any] struct {
	v   T
	err error
}

func (fl *flight[T]) run() {
	v, err := fl.f(fl.ctx)
	if fl.state.CompareAndSwap(awaited, answered) {
		fl.done <- flightResult[T]{v, err}
		return
	}
	// Abandoned: the caller sends word on done once late is set.
	<-fl.done
	if fl.late != nil {
		fl.late(v, err)
	}
}

// abandonRun is what to do when the caller of a run of works leaves it:
// the works are copied (their callers may reuse them), and the run's reply,
// when it comes, is seen through.
func (s *Store) abandonRun(works []*work) func(any, error) {
	s.hb.settling.Add()
	shadows := make([]*work, len(works))
	for i, w := range works {
		s.hb.abandoned.Add(int64(len(w.calls)))
		shadows[i] = &work{key: w.key, keys: w.keys, known: w.known, calls: slices.Clone(w.calls), rs: make([]reply, len(w.calls))}
	}
	return func(raw any, err error) {
		defer s.hb.settling.Done()
		if err != nil || decodeReplies(raw, shadows) != nil {
			return
		}
		for _, w := range shadows {
			if w.err == nil {
				s.handBackWork(w.key, w.calls, w.rs)
			}
		}
	}
}

// handBackWork hands back, in the background, the grants in the replies rs
// to calls, whose callers have gone.
func (s *Store) handBackWork(key redlimit.Key, calls []call, rs []reply) {
	var back []call
	var cfg *redlimit.Config
	for i, c := range calls {
		if c.op != opAcquire || i >= len(rs) {
			continue
		}
		if b, ok := handBackCall(c.n, rs[i]); ok {
			back, cfg = append(back, b), rs[i].cfg
		}
	}
	s.handBack(key, cfg, back)
}

// handBackCall is the call that hands back the grant r of n permits, if r
// is a grant that can be handed back.
func handBackCall(n int64, r reply) (call, bool) {
	if r.code != 1 || r.cfg == nil {
		return call{}, false
	}
	if r.wait == 0 {
		switch r.cfg.Algorithm {
		case redlimit.TokenBucket:
			// Already due: Cancel would hand back nothing; Release puts
			// back what no reservation was promised since.
			return call{op: opRelease, n: n}, true
		case redlimit.LeakyBucket:
			return call{}, false // granted permits have left the queue
		}
	}
	return call{op: opCancel, n: n, arg: r.at()}, true
}

// handBack makes the calls back on key's log in one script run in the
// background (not through the batcher: hand-backs need no order), under the
// stored config cfg.
func (s *Store) handBack(key redlimit.Key, cfg *redlimit.Config, back []call) {
	if len(back) == 0 {
		return // cfg may be nil: no grant
	}
	known := encode(*cfg)
	s.inBackground(len(back), func(ctx context.Context) {
		for len(back) > 0 {
			w := &work{key: key, known: known, calls: back[:min(len(back), maxBatch)]}
			back = back[len(w.calls):]
			w.rs = make([]reply, len(w.calls))
			s.calls.Add(int64(len(w.calls)))
			s.runWorks(ctx, []*work{w})
			if w.err != nil {
				s.hb.failed.Add(int64(len(w.calls)))
				continue
			}
			s.hb.handedBack.Add(int64(len(w.calls)))
		}
		s.forget(key) // a cancel or release may free permits
	})
}

// inBackground runs f, the hand-back of k grants, on a goroutine of its
// own within handBackTimeout, counted in s.hb (WaitHandBacks waits for
// it); beyond maxHandBacks in flight it does not, and counts the k failed.
func (s *Store) inBackground(k int, f func(ctx context.Context)) {
	n := int64(k)
	if n == 0 {
		return
	}
	if s.hb.inflight.Add(n) > maxHandBacks {
		s.hb.inflight.Add(-n)
		s.hb.failed.Add(n)
		return
	}
	s.hb.settling.Add()
	go func() {
		defer s.hb.settling.Done()
		defer s.hb.inflight.Add(-n)
		ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
		defer cancel()
		f(ctx)
	}()
}
