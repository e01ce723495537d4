package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// A Redis that is down with its port closed refuses connections at once,
// but go-redis dials again and again (DialerRetries, 5 by default, with a
// backoff between them), in a goroutine of its own that does not see the
// caller's context, and then retries the command: a call would wait out
// its deadline for a server that cannot answer. So the store watches the
// dials of its client (a dial hook) and runs its calls in a context that
// ends at the first refused dial: the call then fails at once, with the
// refusal as its cause.
//
// One refusal ends every call of the store then in flight: a port that
// refuses has no server behind it. (During a Sentinel failover, a dial to
// the old primary's address may so end a call already sent to the new
// one; it fails as a call to a failed primary would.)

// dialSignals signals refused dials to the store's calls.
type dialSignals struct {
	mu  sync.Mutex
	cur atomic.Pointer[refusalSignal]
	// down: the last dial was refused (set by a refusal, cleared by a
	// dial that connected).
	down atomic.Bool
}

// refusalSignal is a context ended (with the dial's error as its cause) at
// the first refused dial after it was made.
type refusalSignal struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	refused atomic.Bool
}

// live returns a signal not yet ended: after a refusal, the next call
// makes a new one, so that it tries Redis again.
func (r *dialSignals) live() *refusalSignal {
	if s := r.cur.Load(); s != nil && !s.refused.Load() {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.cur.Load(); s != nil && !s.refused.Load() {
		return s
	}
	s := &refusalSignal{}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	r.cur.Store(s)
	return s
}

// refused ends the calls in flight with err.
func (r *dialSignals) refused(err error) {
	r.down.Store(true)
	if s := r.cur.Load(); s != nil && !s.refused.Load() {
		s.refused.Store(true)
		s.cancel(err)
	}
}

// refusable is where a call to Redis runs: a context that a refused dial
// ends too.
type refusable struct {
	ctx context.Context
	// watch is the caller's context when the store itself must return at
	// its end (a client that does not keep to contexts: see within); the
	// call then runs in the signal's context, with the caller's values.
	watch  context.Context
	sig    *refusalSignal
	cancel context.CancelCauseFunc // of a child of the caller's context
	stop   func() bool
}

// failFast returns where a call within ctx runs. A context that carries
// nothing (a background run's) is replaced by the signal's own, at no
// cost, and so is one the store watches itself (with the caller's values:
// one small allocation). A client that keeps to contexts itself gets, once
// a dial was refused and until one connects again, a child of ctx that the
// signal cancels; while Redis answers it runs in ctx as it is (a child
// context per call costs more than the call's other allocations together),
// so the calls that meet the first refusal wait out their deadline, or
// go-redis's dial retries, and the ones after them fail at once.
func (s *Store) failFast(ctx context.Context) refusable {
	sig := s.dials.live()
	switch {
	case ctx == context.Background():
		return refusable{ctx: sig.ctx, sig: sig}
	case s.mustGuard(ctx):
		return refusable{ctx: &detached{Context: sig.ctx, values: ctx}, watch: ctx, sig: sig}
	case !s.dials.down.Load():
		return refusable{ctx: ctx, sig: sig}
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(sig.ctx, func() { cancel(context.Cause(sig.ctx)) })
	return refusable{ctx: c, sig: sig, cancel: cancel, stop: stop}
}

// detached is the signal's context with the values of the caller's (a
// tracing hook's span, say).
type detached struct {
	context.Context
	values context.Context
}

func (d *detached) Value(key any) any { return d.values.Value(key) }

// done releases r and returns err, or the refused dial that ended the call.
func (r refusable) done(err error) error {
	if r.cancel != nil {
		r.stop()
		r.cancel(nil)
	}
	if err != nil && r.sig.refused.Load() {
		if cause := context.Cause(r.sig.ctx); cause != nil {
			return cause
		}
	}
	return err
}

// refusalHook tells the store of the refused dials of its client.
type refusalHook struct{ r *dialSignals }

func (h refusalHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
			h.r.refused(err)
		} else if err == nil && h.r.down.Load() {
			h.r.down.Store(false)
		}
		return conn, err
	}
}

func (refusalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (refusalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hookRefusals installs the hook on rdb: on one server or Sentinel's
// primary. A Cluster's nodes are told apart by address, which a call does
// not know before go-redis routes it, so there go-redis's own retries stay.
func (s *Store) hookRefusals(rdb redis.UniversalClient) {
	if c, ok := rdb.(*redis.Client); ok {
		c.AddHook(refusalHook{&s.dials})
	}
}
