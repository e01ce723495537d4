// Package tokenbucket holds the rules of the token bucket: a bucket of Burst
// tokens that refills at Rate per Interval, lazily, from the time elapsed
// (Guava's resync); a request takes n tokens. Bursts up to Burst
// pass at once, the long-run rate is Rate per Interval. O(1) state.
//
// A request may take tokens the bucket does not have yet: it is then a
// reservation, granted when the refill covers it (golang.org/x/time/rate's
// ReserveN; tests hold the two to the same decisions). Waiters are first come,
// first served, as each reservation deepens the debt the next one waits on.
// Release and Cancel put tokens back, up to the bucket's size.
//
// SetRate keeping the state accounts the past at the old config: the bucket
// refills at the old rate up to the instant the new config took effect
// (Limit.Since), and from then on at the new one, as x/time/rate's
// SetLimitAt and SetBurstAt do. Its tokens carry over, capped at the new
// burst (a bigger burst is room that refills, not tokens given at once). A
// bucket in debt keeps the instant its debt is paid, so that no new request
// is granted before a reservation already made: there x/time/rate, which
// recounts the debt at the new rate, can serve a newcomer first. A full
// bucket is forgotten, as a fresh one: a burst raised later finds it full
// at the new size.
package tokenbucket

import "github.com/redlimit/redlimit/algorithm"

// State is one token bucket. The zero value is a full bucket.
type State struct {
	algorithm.Deficit
}

var _ algorithm.State = (*State)(nil)

func remaining(d algorithm.Deficit, lim algorithm.Limit) int64 {
	return max(0, (lim.Burst*lim.Interval-d.Owed)/lim.Interval)
}

// Acquire implements algorithm.State; n <= lim.Burst.
func (s *State) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	d := s.Deficit
	now = d.Advance(now, lim)
	after := d.Owed + n*lim.Interval
	wait := algorithm.Deficit{Owed: after}.WaitFor(lim.Burst*lim.Interval, lim)
	if maxWait != algorithm.Unlimited && wait > maxWait {
		// A refusal changes nothing: it can be answered again without asking.
		return algorithm.Decision{Wait: wait, Remaining: remaining(d, lim), Now: now}
	}
	s.Deficit = d
	s.Owed = after
	s.Settle(lim)
	return algorithm.Decision{Granted: true, At: now + wait, Wait: wait, Remaining: remaining(s.Deficit, lim), Now: now}
}

// Cancel puts back the tokens of a reservation for at that has not come
// yet, less any that later reservations were promised (as x/time/rate does).
func (s *State) Cancel(now int64, lim algorithm.Limit, at, n int64) int64 {
	now = s.Advance(now, lim)
	defer s.Settle(lim)
	if at <= now {
		return 0
	}
	return s.GiveBack(now, at, n, lim.Burst*lim.Interval, lim)
}

// Release puts up to n tokens back, up to the bucket's size, less any that
// reservations still waiting were promised.
func (s *State) Release(now int64, lim algorithm.Limit, n int64) int64 {
	now = s.Advance(now, lim)
	defer s.Settle(lim)
	return s.GiveBack(now, now, n, lim.Burst*lim.Interval, lim)
}

// Available implements algorithm.State.
func (s *State) Available(now int64, lim algorithm.Limit) int64 {
	d := s.Deficit
	d.Advance(now, lim)
	return remaining(d, lim)
}
