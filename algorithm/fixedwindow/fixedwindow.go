// Package fixedwindow holds the rules of the fixed-window counter: at most
// Rate permits in each window of Interval on a grid aligned to the clock
// (whole seconds, minutes, hours, UTC days). One counter per window, so it is
// cheap; but up to 2 x Rate can pass in one Interval that straddles a
// boundary (a known weakness; the tests show it).
//
// A request that does not fit its window waits for the next window's start.
// Waiters are served first come, first served: no one is granted before a
// reservation already made.
//
// SetRate keeps the current window's count: a new rate applies to it at once;
// a new interval lays a new grid, and the permits counted so far count in the
// new window that holds their old window's start.
package fixedwindow

import "github.com/redlimit/redlimit/algorithm"

// State is one fixed-window limit. The zero value is fresh.
type State struct {
	// Windows holds the current window and any future window holding
	// reservations; older ones are dropped.
	Windows algorithm.Windows
	// Last is the latest now seen: time never runs backwards.
	Last int64
	// Expiry: the state counts as empty from then on (the end of its newest
	// window, as configured when it last changed).
	Expiry int64
}

var _ algorithm.State = (*State)(nil)

// Reset implements algorithm.Resetter.
func (s *State) Reset() { *s = State{Windows: s.Windows[:0]} }

func (s *State) advance(now int64, lim algorithm.Limit) int64 {
	now = algorithm.Later(now, s.Last)
	s.Last = now
	if s.Expiry != 0 && now >= s.Expiry {
		s.Windows = nil
	}
	s.Windows = s.Windows.DropBefore(algorithm.WindowStart(now, lim.Interval))
	return now
}

func (s *State) settle(lim algorithm.Limit) {
	if k := len(s.Windows); k > 0 {
		s.Expiry = algorithm.WindowStart(s.Windows[k-1].Start, lim.Interval) + lim.Interval
		return
	}
	*s = State{}
}

// tail is the earliest instant a new request may be granted: now, or the
// start of the newest reserved window.
func (s *State) tail(now int64) int64 {
	if k := len(s.Windows); k > 0 {
		return algorithm.Later(now, s.Windows[k-1].Start)
	}
	return now
}

func (s *State) remaining(now int64, lim algorithm.Limit) int64 {
	if s.tail(now) > now {
		return 0
	}
	w := algorithm.WindowStart(now, lim.Interval)
	return max(0, lim.Rate-s.Windows.Sum(w, w+lim.Interval))
}

// Acquire implements algorithm.State; n <= lim.Rate.
func (s *State) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

// AcquireAt implements algorithm.State: the request is counted in the
// window of its instant.
func (s *State) AcquireAt(now int64, lim algorithm.Limit, n, maxWait, notBefore int64) algorithm.Decision {
	v := *s // a view: advancing it re-slices, it never writes s's windows
	now = v.advance(now, lim)
	at := algorithm.Later(v.tail(now), notBefore)
	w := algorithm.WindowStart(at, lim.Interval)
	if v.Windows.Sum(w, w+lim.Interval)+n > lim.Rate {
		at = algorithm.Later(algorithm.ByExpiry(w+lim.Interval, now, v.Expiry), notBefore)
	}
	wait := at - now
	if maxWait != algorithm.Unlimited && wait > maxWait {
		// A refusal changes nothing: it can be answered again without asking.
		return algorithm.Decision{Wait: wait, Remaining: v.remaining(now, lim), Now: now}
	}
	*s = v
	s.Windows = s.Windows.Add(algorithm.WindowStart(at, lim.Interval), n)
	s.settle(lim)
	return algorithm.Decision{Granted: true, At: at, Wait: wait, Remaining: s.remaining(now, lim), Now: now}
}

// Cancel implements algorithm.State.
func (s *State) Cancel(now int64, lim algorithm.Limit, at, n int64) int64 {
	s.advance(now, lim)
	defer s.settle(lim)
	return s.Windows.Take(at, n, lim.Interval)
}

// Release hands back permits of the current window.
func (s *State) Release(now int64, lim algorithm.Limit, n int64) int64 {
	now = s.advance(now, lim)
	defer s.settle(lim)
	return s.Windows.Take(now, n, lim.Interval)
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
