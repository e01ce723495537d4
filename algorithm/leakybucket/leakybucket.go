// Package leakybucket holds the rules of the leaky bucket as a queue that
// drains at a constant rate (traffic shaping): grants are spaced evenly,
// Interval/Rate apart, with no bursts. A request joins the queue and is
// granted when the work ahead of it has drained; the queue holds at most
// Capacity permits, and a request that would overflow it is refused
// whatever it is willing to wait. O(1) state.
//
// Release has no meaning here (a granted permit has already left the queue)
// and hands back nothing; Cancel takes a waiting reservation out of the queue.
//
// Cancel. The reservations made since the queue last drained are counted
// (algorithm.Deficit). When the last one still live is cancelled, all of
// their work goes: the queue is then exactly as if none of them had asked,
// whatever the order of the cancellations. Until then a cancelled
// reservation leaves the queue at once only if nothing was queued after it
// (its work is the queue's last): work taken out from under a later
// reservation would let a newcomer be scheduled at an instant that
// reservation still holds, two grants closer than the spacing allows.
// Work that cannot leave yet is held, and goes with the rest, or drains
// when the queue's last instant has passed (a permit lost, never one too
// many).
//
// SetRate keeping the state drains the queue at the old rate up to the
// instant the new config took effect (Limit.Since); the work still queued
// then keeps the instant it drains at, so that no newcomer is scheduled
// ahead of a waiter already promised an instant, and it counts, against the
// new capacity, as the permits the new rate lets out in that time. A
// smaller capacity refuses newcomers until the queue is below it.
package leakybucket

import "github.com/redlimit/redlimit/algorithm"

// State is one leaky bucket. The zero value is an empty queue.
type State struct {
	algorithm.Deficit
}

var _ algorithm.State = (*State)(nil)

// Reset implements algorithm.Resetter.
func (s *State) Reset() { *s = State{} }

// ahead is how long the work queued ahead takes to drain, rounded up to
// the clock's unit (a microsecond in the stores): a request is let out at
// the first instant its turn has come, never before, so grants are spaced
// exactly Interval/Rate apart for every spacing of one unit or more.
func ahead(d algorithm.Deficit, lim algorithm.Limit) int64 {
	return algorithm.CeilDiv(d.Owed, lim.Rate)
}

// remaining: what a request could be granted at once: the queue's room, if
// nothing is ahead of it.
func remaining(d algorithm.Deficit, lim algorithm.Limit) int64 {
	if ahead(d, lim) > 0 {
		return 0
	}
	return max(0, (lim.Capacity*lim.Interval-d.Owed)/lim.Interval)
}

// Acquire implements algorithm.State; n <= lim.Capacity.
func (s *State) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

// AcquireAt implements algorithm.State: a grant later than its turn
// joins the queue at its instant (algorithm.Deficit's Defer), the time
// until then counting as work ahead of those who come after it, so that
// they are let out after it, and refused as full while that work is more
// than the queue holds. The room asked of the request itself is that of
// its own turn.
func (s *State) AcquireAt(now int64, lim algorithm.Limit, n, maxWait, notBefore int64) algorithm.Decision {
	d := s.Deficit
	now = d.Advance(now, lim)
	wait := ahead(d, lim) // the work ahead must drain first
	deferred := notBefore-now > wait
	if deferred {
		wait = notBefore - now
	}
	if room := d.WaitFor((lim.Capacity-n)*lim.Interval, lim); room > 0 || (maxWait != algorithm.Unlimited && wait > maxWait) {
		// A full queue refuses whatever the wait. The retry-after, as for
		// every algorithm, is when the request would be granted at once.
		// A refusal changes nothing: it can be answered again without asking.
		return algorithm.Decision{Wait: wait, Remaining: remaining(d, lim), Now: now}
	}
	s.Deficit = d
	s.Owed += n * lim.Interval
	s.Granted(now, now+wait)
	if deferred {
		s.Defer(wait, d.Owed, n, lim)
	}
	s.Settle(lim)
	return algorithm.Decision{Granted: true, At: now + wait, Wait: wait, Remaining: remaining(s.Deficit, lim), Now: now}
}

// Cancel takes a reservation for at that is not yet past out of the queue:
// at once what no later reservation was scheduled after, the rest when the
// last waiter of the queue gives up (algorithm.Deficit's Cancel).
func (s *State) Cancel(now int64, lim algorithm.Limit, at, n int64) int64 {
	now = s.Advance(now, lim)
	defer s.Settle(lim)
	return s.Deficit.Cancel(now, at, n, true, lim)
}

// Release hands back nothing: granted permits have left the queue.
func (s *State) Release(now int64, lim algorithm.Limit, n int64) int64 {
	s.Advance(now, lim)
	s.Settle(lim)
	return 0
}

// Available implements algorithm.State.
func (s *State) Available(now int64, lim algorithm.Limit) int64 {
	d := s.Deficit
	d.Advance(now, lim)
	return remaining(d, lim)
}

// Clone implements algorithm.State.
func (s *State) Clone() algorithm.State { c := *s; return &c }
