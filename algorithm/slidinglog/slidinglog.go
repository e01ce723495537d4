// Package slidinglog holds the rules of the sliding-window log, written once as
// plain Go: the memory store runs this code and the Redis store's Lua script is
// proven, by differential tests, to make the same decisions.
//
// At most Rate permits are granted in any window of Interval milliseconds; a
// grant returns to the pool Interval after it was made. Grants made in the same
// millisecond share one Entry, so a log never holds more entries than there are
// milliseconds in its window (plus one per queued reservation), whatever the rate.
//
// Every grant is appended at or after the newest entry: a request that cannot be
// served now is given the earliest instant at or after the queue's tail where it
// fits. That keeps the log sorted, makes waiters first-come first-served, and
// lets a refusal say exactly when the request could be granted.
//
// SetRate keeps the log: the grants made still count, judged by the new rate
// and interval (a longer interval keeps them longer, a lower rate refuses
// until enough have aged out).
//
// Times are integer milliseconds of the store's clock, where the other
// algorithms count microseconds: a log's entries are per millisecond, so its
// grants, waits and retry-afters are whole milliseconds (a request within a
// millisecond counts at its start). The functions here never read a clock:
// "now" is an argument.
package slidinglog

import "github.com/redlimit/redlimit/algorithm"

// Limit and Decision are the shared types of package algorithm.
type (
	Limit    = algorithm.Limit
	Decision = algorithm.Decision
)

var _ algorithm.State = (*State)(nil)

// Reset implements algorithm.Resetter.
func (s *State) Reset() { *s = State{Entries: s.Entries[:0]} }

// Entry is the number of permits granted (or reserved) at one millisecond.
type Entry struct {
	At      int64
	Permits int64
}

// State is one log: the OVERALL log of a limiter or one client's PER_CLIENT log.
// The zero value is an empty log.
type State struct {
	// Entries is sorted by At, strictly increasing, every Permits > 0.
	Entries []Entry
	// Total is the sum of Permits over Entries.
	Total int64
	// Last is the latest "now" this log has seen; time never runs backwards
	// for a log, whatever clock the caller brings.
	Last int64
	// Expiry is when the log is forgotten: one interval (as configured at
	// its last change) after its newest entry. Stores drop the log then
	// (Redis by key TTL); the rules treat it as empty from then on, so
	// when a store gets round to dropping it changes no answer.
	Expiry int64
}

// Unlimited as a maxWait lets a request wait as long as it takes.
const Unlimited = algorithm.Unlimited

// advance moves the log to now (never backwards) and drops the entries that
// have left every window that can still be asked about. It returns the
// effective now.
func (s *State) advance(now int64, lim Limit) int64 {
	if now < s.Last {
		now = s.Last
	}
	s.Last = now
	if s.Expiry != 0 && now >= s.Expiry {
		s.Entries, s.Total = nil, 0
	}
	cut := now - lim.Interval
	i := 0
	for i < len(s.Entries) && s.Entries[i].At <= cut {
		s.Total -= s.Entries[i].Permits
		i++
	}
	if i > 0 {
		s.Entries = s.Entries[i:]
		if len(s.Entries) == 0 {
			s.Entries = nil
		}
	}
	return now
}

// tail is the time of the newest entry, or the smallest time if there is none.
func (s *State) tail() (int64, bool) {
	if len(s.Entries) == 0 {
		return 0, false
	}
	return s.Entries[len(s.Entries)-1].At, true
}

// remaining is what a new request could be granted at now: nothing while a
// reservation is queued (first come, first served), else what the window has
// left.
func (s *State) remaining(now int64, lim Limit) int64 {
	if t, ok := s.tail(); ok && t > now {
		return 0
	}
	if r := lim.Rate - s.Total; r > 0 {
		return r
	}
	return 0
}

// earliest is the first instant, at or after now and the queue's tail, at
// which n more permits fit in every window. n must not exceed lim.Rate.
func (s *State) earliest(now, n int64, lim Limit) int64 {
	t := now
	if tail, ok := s.tail(); ok && tail > t {
		t = tail
	}
	need := s.Total + n - lim.Rate
	if need <= 0 {
		return t
	}
	var dropped int64
	for _, e := range s.Entries {
		dropped += e.Permits
		if dropped >= need {
			if free := e.At + lim.Interval; free > t {
				t = free
			}
			return t
		}
	}
	return t // unreachable while n <= Rate
}

// compactEntries is the longest log AcquireAt moves to the front of its
// slice (a copy of at most 512 bytes).
const compactEntries = 32

// Acquire asks for n permits (1 <= n <= lim.Rate) at now, waiting at most
// maxWait milliseconds (Unlimited: no bound). A grant in the future is a
// reservation: it counts from its instant on and can be handed back with
// Cancel. A refusal leaves the state as it was.
func (s *State) Acquire(now int64, lim Limit, n, maxWait int64) Decision {
	if rem, ok := s.Take(now, &lim, n); ok {
		return Decision{Granted: true, At: now, Remaining: rem, Now: now}
	}
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

// Take is Acquire's common case, for a store's hot path: n permits granted
// at now (no wait) where the window has room, no entry has left it and no
// reservation is queued. It returns the permits left and true, as Acquire
// would, leaving the state as Acquire would; in any other case it changes
// nothing and returns false, for Acquire to answer.
func (s *State) Take(now int64, lim *Limit, n int64) (remaining int64, ok bool) {
	k := len(s.Entries)
	if now < s.Last || s.Expiry != 0 && now >= s.Expiry || s.Total+n > lim.Rate ||
		k > 0 && (s.Entries[0].At <= now-lim.Interval || s.Entries[k-1].At > now) {
		return 0, false
	}
	s.Last = now
	if k > 0 && s.Entries[k-1].At == now {
		s.Entries[k-1].Permits += n
	} else {
		s.Entries = append(s.Entries, Entry{At: now, Permits: n})
	}
	s.Total += n
	s.Expiry = s.Entries[len(s.Entries)-1].At + lim.Interval
	return max(0, lim.Rate-s.Total), true
}

// AcquireAt is Acquire granting no earlier than notBefore: at the first
// instant at or after it (and the queue's tail) where n permits fit.
func (s *State) AcquireAt(now int64, lim Limit, n, maxWait, notBefore int64) Decision {
	v := *s // a view: advancing it re-slices, it never writes s's entries
	now = v.advance(now, lim)
	at := algorithm.Later(algorithm.ByExpiry(v.earliest(algorithm.Later(now, notBefore), n, lim), now, v.Expiry), notBefore)
	wait := at - now
	if maxWait != Unlimited && wait > maxWait {
		// A refusal changes nothing, so that it can be answered again
		// without asking (the Redis store's refusal cache).
		return Decision{Wait: wait, Remaining: v.remaining(now, lim), Now: now}
	}
	old := s.Entries
	*s = v
	if len(s.Entries) < len(old) && len(s.Entries) <= compactEntries {
		// The entries that went left room at the front of s's own
		// slice (v re-sliced it): a short log moves there, so that it
		// appends into the room it has instead of reallocating every
		// few grants.
		s.Entries = old[:copy(old, s.Entries)]
	}
	if t, ok := s.tail(); ok && t == at {
		s.Entries[len(s.Entries)-1].Permits += n
	} else {
		s.Entries = append(s.Entries, Entry{At: at, Permits: n})
	}
	s.Total += n
	s.settle(lim)
	return Decision{Granted: true, At: at, Wait: wait, Remaining: s.remaining(now, lim), Now: now}
}

// settle ends every change: it sets the log's expiry, or empties the log
// entirely (its clock too) when no entry is left.
func (s *State) settle(lim Limit) {
	if t, ok := s.tail(); ok {
		s.Expiry = t + lim.Interval
		return
	}
	*s = State{}
}

// Available reports the permits a request could be granted at now, without
// changing the log.
func (s *State) Available(now int64, lim Limit) int64 {
	v := *s // a view, as in Acquire
	now = v.advance(now, lim)
	return v.remaining(now, lim)
}

// Cancel hands back up to n permits of the reservation made for instant at,
// and returns how many were handed back (0 if that instant has already left
// the window).
func (s *State) Cancel(now int64, lim Limit, at, n int64) int64 {
	s.advance(now, lim)
	defer s.settle(lim)
	for i := len(s.Entries) - 1; i >= 0 && s.Entries[i].At >= at; i-- {
		if s.Entries[i].At == at {
			return s.take(i, n)
		}
	}
	return 0
}

// Release hands back up to n permits granted at or before now, newest first
// (they would hold the window longest), and returns how many were handed
// back. Reservations still in the future are left alone: their waiters will
// use them.
func (s *State) Release(now int64, lim Limit, n int64) int64 {
	return s.ReleaseUpTo(now, lim, n, now)
}

// ReleaseUpTo is Release taking only permits granted at or before upTo too:
// the instant of the oldest grant the caller hands back. On a log shared by
// several clients, removing an entry no newer than one of the caller's own
// frees a permit that returns no later than the caller's would have, so no
// window of the log ends up counting fewer grants than were used; a newer
// entry may be another client's grant, used, whose window would then admit
// more than Rate.
func (s *State) ReleaseUpTo(now int64, lim Limit, n, upTo int64) int64 {
	now = s.advance(now, lim)
	defer s.settle(lim)
	upTo = min(upTo, now)
	var released int64
	for i := len(s.Entries) - 1; i >= 0 && released < n; i-- {
		if s.Entries[i].At > upTo {
			continue
		}
		released += s.take(i, n-released)
	}
	return released
}

// take removes up to n permits from entry i, dropping it when emptied.
func (s *State) take(i int, n int64) int64 {
	e := &s.Entries[i]
	if n > e.Permits {
		n = e.Permits
	}
	e.Permits -= n
	s.Total -= n
	if e.Permits == 0 {
		s.Entries = append(s.Entries[:i], s.Entries[i+1:]...)
		if len(s.Entries) == 0 {
			s.Entries = nil
		}
	}
	return n
}

// Forgotten reports whether a store may drop the log at now: it is empty,
// or its expiry has come.
func (s *State) Forgotten(now int64, _ Limit) bool {
	return len(s.Entries) == 0 || now >= s.Expiry
}

// ExpiresAt implements algorithm.State.
func (s *State) ExpiresAt() int64 { return s.Expiry }

// Clone implements algorithm.State.
func (s *State) Clone() algorithm.State {
	c := *s
	c.Entries = append([]Entry(nil), s.Entries...)
	return &c
}
