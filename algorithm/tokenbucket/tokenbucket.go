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
// Cancel. A waiter that gives up hands its reservation back. The
// reservations made since the bucket last had none waiting form a queue
// (algorithm.Deficit counts its live grants and the debt it holds). When
// the last live grant of the queue is cancelled, all of the queue's debt
// goes: the bucket is then exactly as if none of them had asked, whatever
// the order of the cancellations (a grant due at the very instant of its
// cancellation counts as not yet used, as in x/time/rate). Until then a
// cancellation hands back at once only what no later reservation was
// promised, measured from the instants (x/time/rate's rule), and holds the
// rest; a queue whose grants all come due while some were used is closed,
// and what it held stays owed: a permit lost, never one too many.
//
// Why no span goes over its bound (Burst + Rate x span): a reservation
// keeps its instant whatever is handed back under it. Debt handed back
// under a reservation k still waiting lets newcomers have tokens earlier,
// which is only safe while the bucket could have held them at k's instant:
// what was handed back from below k must stay within Burst - n_k. Each
// cancelled r below k hands back at most n_r minus the debt promised after
// it (k's and that of every cancelled reservation between them, as
// instants do not move); summed over the cancelled ones, those terms
// telescope to at most the largest n_r (<= Burst) minus n_k. With no live
// grant left, nothing is promised after anything, and handing back all of
// the queue's debt leaves the debt of the grants made before the queue,
// drained since: the never-asked state. Instants are rounded up to the
// clock's unit (a microsecond in the stores), so the debt promised after
// a reservation is taken as one unit of refill more than its instants
// say; a hand-back is never larger than exact arithmetic would give. A
// change of config closes the queue (algorithm.Deficit).
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

import (
	"math/bits"

	"github.com/redlimit/redlimit/algorithm"
)

// State is one token bucket. The zero value is a full bucket.
type State struct {
	algorithm.Deficit
}

var _ algorithm.State = (*State)(nil)

// Reset implements algorithm.Resetter.
func (s *State) Reset() { *s = State{} }

func remaining(d algorithm.Deficit, lim algorithm.Limit) int64 {
	return max(0, (lim.Burst*lim.Interval-d.Owed)/lim.Interval)
}

// Acquire implements algorithm.State; n <= lim.Burst.
func (s *State) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	if rem, ok := s.Take(now, &lim, n); ok {
		return algorithm.Decision{Granted: true, At: now, Remaining: rem, Now: now}
	}
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

// Take is Acquire's common case, for a store's hot path: n tokens granted
// at once (at now, no wait) from a bucket counted under lim with no
// reservation waiting. It returns the tokens left and true, as Acquire
// would; in any other case it changes nothing and returns false, for
// Acquire to answer. It takes the steps AcquireAt takes then, the refill's
// test made by a multiply where drain divides. lim.Since plays no part:
// it matters only to a bucket counted under another config.
func (s *State) Take(now int64, lim *algorithm.Limit, n int64) (remaining int64, ok bool) {
	if s.Rate != lim.Rate || s.Scale != lim.Interval || s.Burst != lim.Burst || s.Live != 0 || now < s.Last {
		return 0, false
	}
	owed := s.Owed
	if elapsed := now - s.Last; elapsed > 0 && owed > 0 {
		// elapsed >= CeilDiv(owed, Rate), without overflow.
		if hi, lo := bits.Mul64(uint64(elapsed), uint64(s.Rate)); hi != 0 || lo >= uint64(owed) {
			owed = 0
		} else {
			owed -= int64(lo)
		}
	}
	after, size := owed+n*lim.Interval, lim.Burst*lim.Interval
	if after > size {
		return 0, false
	}
	s.Owed, s.Last, s.Expiry = after, now, now+algorithm.CeilDiv(after, s.Rate)
	return (size - after) / lim.Interval, true
}

// AcquireAt implements algorithm.State: a grant later than its own
// instant is charged at its instant (algorithm.Deficit's Defer).
func (s *State) AcquireAt(now int64, lim algorithm.Limit, n, maxWait, notBefore int64) algorithm.Decision {
	d := s.Deficit
	now = d.Advance(now, lim)
	after := d.Owed + n*lim.Interval
	wait := algorithm.Deficit{Owed: after}.WaitFor(lim.Burst*lim.Interval, lim)
	deferred := notBefore-now > wait
	if deferred {
		wait = notBefore - now
	}
	if maxWait != algorithm.Unlimited && wait > maxWait {
		// A refusal changes nothing: it can be answered again without asking.
		return algorithm.Decision{Wait: wait, Remaining: remaining(d, lim), Now: now}
	}
	s.Deficit = d
	s.Owed = after
	s.Granted(now, now+wait)
	if deferred {
		s.Defer(wait, d.Owed, n, lim)
	}
	s.Settle(lim)
	return algorithm.Decision{Granted: true, At: now + wait, Wait: wait, Remaining: remaining(s.Deficit, lim), Now: now}
}

// Cancel puts back the tokens of a reservation for at that is not yet past:
// at once those no later reservation was promised (as x/time/rate does), and
// the rest when the last waiter of the queue gives up (algorithm.Deficit's
// Cancel).
func (s *State) Cancel(now int64, lim algorithm.Limit, at, n int64) int64 {
	now = s.Advance(now, lim)
	defer s.Settle(lim)
	return s.Deficit.Cancel(now, at, n, false, lim)
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

// Clone implements algorithm.State.
func (s *State) Clone() algorithm.State { c := *s; return &c }
