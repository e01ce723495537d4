// Package slidingcounter holds the rules of the sliding-window counter: two
// adjacent fixed windows, the previous one weighted by how much of it the
// sliding window still overlaps. O(1) memory and work per call; approximate:
// it assumes the previous window's grants were spread evenly, so a window of
// Interval can hold more than Rate when they were not (the README shows the
// error measured; at worst about 2 x Rate when the previous window's grants
// all came at its very end).
//
// At instant t in the window starting at W (elapsed e = t - W), with prev and
// cur the permits of the previous and current windows, n permits are granted
// when  prev*(Interval-e)/Interval + cur + n <= Rate, in exact integer
// arithmetic. A request that does not fit waits for the first instant it
// does; waiters are first come, first served.
//
// Cancel takes a reservation's permits out of its window, and brings the
// tail back to the first instant at which the newest window's permits all
// fit, if that is earlier. So once every waiter has gone the limit is as
// if they had never asked. With some waiters left, a newcomer may then be
// granted permits that were freed ahead of a waiter in the same window,
// never in an earlier window than the newest one holding permits: the
// waiter's own instant still fits (the window's count already held the
// newcomer's permits when it was checked, and the previous window weighs
// less later on), and no reservation of a later window counted on a
// smaller count in this one.
//
// SetRate keeps the window counts, as the fixed window does: a new rate
// applies at once, a new interval re-lays the grid under them.
package slidingcounter

import "github.com/redlimit/redlimit/algorithm"

// State is one sliding-counter limit. The zero value is fresh.
type State struct {
	// Windows holds the previous, current and reserved future windows.
	Windows algorithm.Windows
	// Tail is the instant of the latest grant: no one is granted before it.
	Tail int64
	// Last is the latest now seen: time never runs backwards.
	Last int64
	// Expiry: the state counts as empty from then on (when its newest
	// window stops weighing, as configured when it last changed).
	Expiry int64
}

var _ algorithm.State = (*State)(nil)

// Reset implements algorithm.Resetter.
func (s *State) Reset() { *s = State{Windows: s.Windows[:0]} }

func (s *State) advance(now int64, lim algorithm.Limit) int64 {
	now = algorithm.Later(now, s.Last)
	s.Last = now
	if s.Expiry != 0 && now >= s.Expiry {
		s.Windows, s.Tail = nil, 0
	}
	s.Windows = s.Windows.DropBefore(algorithm.WindowStart(now, lim.Interval) - lim.Interval)
	return now
}

func (s *State) settle(lim algorithm.Limit) {
	if k := len(s.Windows); k > 0 {
		s.Expiry = algorithm.WindowStart(s.Windows[k-1].Start, lim.Interval) + 2*lim.Interval
		return
	}
	*s = State{}
}

// counts returns the previous and current windows' permits at t.
func (s *State) counts(t int64, lim algorithm.Limit) (w, prev, cur int64) {
	w = algorithm.WindowStart(t, lim.Interval)
	return w, s.Windows.Sum(w-lim.Interval, w), s.Windows.Sum(w, w+lim.Interval)
}

// weighed is ceil(prev * (Interval-e) / Interval): the previous window's
// share at elapsed e, rounded against the caller.
func weighed(prev, e, interval int64) int64 {
	return algorithm.CeilDiv(prev*(interval-e), interval)
}

func (s *State) remaining(now int64, lim algorithm.Limit) int64 {
	if s.Tail > now {
		return 0
	}
	w, prev, cur := s.counts(now, lim)
	return max(0, lim.Rate-cur-weighed(prev, now-w, lim.Interval))
}

// earliest is the first instant at or after t where n more permits fit.
func (s *State) earliest(t, n int64, lim algorithm.Limit) int64 {
	for {
		w, prev, cur := s.counts(t, lim)
		if room := lim.Rate - cur - n; room >= 0 {
			// prev*(I-e) <= room*I  <=>  e >= I - floor(room*I/prev)
			e := t - w
			if prev > 0 {
				e = max(e, lim.Interval-room*lim.Interval/prev)
			}
			if e < lim.Interval {
				return w + e
			}
		}
		t = w + lim.Interval // at most twice: two windows on, nothing weighs
	}
}

// Acquire implements algorithm.State; n <= lim.Rate.
func (s *State) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

// AcquireAt implements algorithm.State: the first instant at or after
// notBefore where the request fits.
func (s *State) AcquireAt(now int64, lim algorithm.Limit, n, maxWait, notBefore int64) algorithm.Decision {
	v := *s // a view: advancing it re-slices, it never writes s's windows
	now = v.advance(now, lim)
	start := algorithm.Later(algorithm.Later(now, v.Tail), notBefore)
	at := algorithm.Later(algorithm.ByExpiry(v.earliest(start, n, lim), now, v.Expiry), notBefore)
	wait := at - now
	if maxWait != algorithm.Unlimited && wait > maxWait {
		// A refusal changes nothing: it can be answered again without asking.
		return algorithm.Decision{Wait: wait, Remaining: v.remaining(now, lim), Now: now}
	}
	*s = v
	s.Windows = s.Windows.Add(algorithm.WindowStart(at, lim.Interval), n)
	s.Tail = at
	s.settle(lim)
	return algorithm.Decision{Granted: true, At: at, Wait: wait, Remaining: s.remaining(now, lim), Now: now}
}

// Cancel hands back up to n permits of the reservation for at. The tail
// then comes back to the first instant at which the newest window's
// permits all fit, if that is earlier: once every waiter has gone the
// windows and the tail are as if they had never asked.
func (s *State) Cancel(now int64, lim algorithm.Limit, at, n int64) int64 {
	s.advance(now, lim)
	defer s.settle(lim)
	got := s.Windows.Take(at, n, lim.Interval)
	if k := len(s.Windows); got > 0 && k > 0 {
		s.Tail = min(s.Tail, s.earliest(s.Windows[k-1].Start, 0, lim))
	}
	return got
}

// Release hands back permits of the current window, or only of the
// previous one while reservations are still to come (the current window's
// count cannot tell them from grants already made).
func (s *State) Release(now int64, lim algorithm.Limit, n int64) int64 {
	now = s.advance(now, lim)
	defer s.settle(lim)
	t := now
	if s.Tail > now {
		t = algorithm.WindowStart(now, lim.Interval) - 1
	}
	return s.Windows.Take(t, n, 2*lim.Interval)
}

// Available implements algorithm.State.
func (s *State) Available(now int64, lim algorithm.Limit) int64 {
	c := *s // a view: advancing it re-slices, it never writes s's windows
	now = c.advance(now, lim)
	return c.remaining(now, lim)
}

// Forgotten implements algorithm.State.
func (s *State) Forgotten(now int64, _ algorithm.Limit) bool {
	return len(s.Windows) == 0 || now >= s.Expiry
}

// ExpiresAt implements algorithm.State.
func (s *State) ExpiresAt() int64 { return s.Expiry }

// Clone implements algorithm.State.
func (s *State) Clone() algorithm.State {
	c := *s
	c.Windows = append(algorithm.Windows(nil), s.Windows...)
	return &c
}
