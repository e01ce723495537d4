package algorithm

// Deficit is the state both buckets share: how far the bucket is from
// full (token bucket) or how much work is queued (leaky bucket), counted in
// permits x Interval so that refilling Rate per time unit (a microsecond)
// stays in integers. It can exceed the bucket's size while reservations are queued.
//
// The deficit remembers the config it was last changed under (Rate, Scale,
// Burst). A config that took effect later (Limit.Since) applies from that
// instant on only: up to it the deficit drains as its own config said, as
// golang.org/x/time/rate's SetLimitAt and SetBurstAt account the past. At
// the change, tokens carry over (capped at the new burst), while work
// promised beyond the bucket (reservations still waiting, a leaky bucket's
// queue) keeps the instant it drains at: no new request is granted before
// a waiter already promised an instant.
//
// A state knows only its own config and the latest change: after several
// changes with no call on it in between, it drains at its own config up to
// the latest one. The stores bring a limiter's Overall state to each change
// as it is made; a PerClient state (one per client, not all within reach)
// is brought there by its client's next call.
type Deficit struct {
	// Owed is permits x Scale still to drain; 0 is a full token bucket or an
	// empty leaky-bucket queue.
	Owed int64
	// Rate, Scale and Burst are the config Owed is counted in and drains
	// at: Rate permits per Scale, Burst the token bucket's size (0 for the
	// leaky bucket). All zero in a fresh state.
	Rate, Scale, Burst int64
	// Last is the latest now seen: time never runs backwards.
	Last int64
	// Expiry is when Owed has drained to 0 at the state's own config; the
	// state counts as empty from then on unless a config change slowed it.
	Expiry int64
	// Live is the grants made while the queue is open that were not
	// cancelled: waiting, due, or used. It comes before the queue's bounds
	// so that a grant from a bucket with no queue (tokenbucket's Take)
	// reads one run of fields, the fewest cache lines.
	Live int64
	// The queue of reservations, kept so that cancellations in any order
	// hand back everything once every waiter has gone (see Cancel). It is
	// open from Head (the now of its first reservation, which is after
	// Head) until Tail, the latest instant granted in it; past Tail it is
	// closed and these are zero. A change of config closes it too.
	Head, Tail int64
	// Held is the debt (permits x Scale) of cancelled reservations that
	// later grants built on, so that it could not be handed back then.
	Held int64
}

// sameConfig reports whether the deficit is counted under lim.
func (d *Deficit) sameConfig(lim Limit) bool {
	return d.Rate == lim.Rate && d.Scale == lim.Interval && d.Burst == lim.Burst
}

// drain moves the deficit to t at its own rate.
func (d *Deficit) drain(t int64) {
	if elapsed := t - d.Last; elapsed > 0 {
		if d.Owed > 0 {
			if elapsed >= CeilDiv(d.Owed, d.Rate) {
				d.Owed = 0
			} else {
				d.Owed -= elapsed * d.Rate
			}
		}
		d.Last = t
	}
}

// maxOwed bounds a deficit re-expressed under a faster config: beyond it
// (2^53, what Lua numbers hold exactly) the work is counted as maxOwed.
const maxOwed int64 = 1 << 53

// rebase re-expresses the deficit under lim. Tokens the bucket holds carry
// over, capped at the new burst (rescaled, rounded down);
// work beyond the bucket keeps its drain time, rounded up to the clock's
// unit, so that it still drains when its waiters were promised.
func (d *Deficit) rebase(lim Limit) {
	full := d.Burst * d.Scale
	if d.Owed > full {
		t := CeilDiv(d.Owed-full, d.Rate)
		base := lim.Burst * lim.Interval
		if t > (maxOwed-base)/lim.Rate {
			d.Owed = maxOwed
		} else {
			d.Owed = base + t*lim.Rate
		}
	} else {
		// The tokens left, in the new scale (rounded down), at most the
		// new burst.
		d.Owed = max(0, lim.Burst*lim.Interval-rescale(full-d.Owed, d.Scale, lim.Interval, lim.Burst))
	}
	d.Rate, d.Scale, d.Burst = lim.Rate, lim.Interval, lim.Burst
}

// rescaleFraction is the resolution, in parts of a permit, of rescale's
// fraction: small enough that a remainder (below MaxBucketInterval in µs)
// times it, and it times an interval, stay below 2^53 (exact in Lua).
const rescaleFraction = 1 << 16

// rescale re-expresses v permits x from as permits x to, rounded down, and
// capped at most x to when it would be more: whole permits exactly, the
// fraction of one to 1/65536 of a permit, so that no product leaves 2^53.
func rescale(v, from, to, most int64) int64 {
	if from == to {
		return min(v, most*to)
	}
	q, r := v/from, v%from
	if q >= most {
		return most * to
	}
	return q*to + r*rescaleFraction/from*to/rescaleFraction
}

// Advance moves the deficit to now under lim and returns the effective now.
func (d *Deficit) Advance(now int64, lim Limit) int64 {
	now = Later(now, d.Last)
	if d.Scale != 0 && !d.sameConfig(lim) {
		// Another config: it applies from the instant it took effect.
		if lim.Since > d.Last {
			d.drain(min(lim.Since, now))
		}
		if d.Owed == 0 {
			*d = Deficit{Last: d.Last} // full before the change: fresh
		} else {
			d.rebase(lim)
			// The queue closes: its grants were counted under the old
			// config, which the rebase re-expressed, so what it held
			// stays owed (a permit lost, never one too many).
			d.closeQueue()
		}
	}
	if d.Scale == 0 {
		d.Rate, d.Scale, d.Burst = lim.Rate, lim.Interval, lim.Burst
	}
	d.drain(now)
	d.Last = now
	if d.Live > 0 && (now > d.Tail || d.Owed == 0) {
		// Every grant of the queue is due (or all its debt drained, as
		// after a change of rate): it is closed, and what it held stays
		// owed (a waiter used what it built on).
		d.closeQueue()
	}
	return now
}

// closeQueue forgets the queue of reservations; what it held stays owed.
func (d *Deficit) closeQueue() { d.Head, d.Tail, d.Live, d.Held = 0, 0, 0, 0 }

// Granted books a grant of n permits for instant at, made at now, in the
// queue: a reservation (at > now) opens it when it is closed; while it is
// open every grant counts in it.
func (d *Deficit) Granted(now, at int64) {
	switch {
	case d.Live > 0:
		d.Live++
		d.Tail = Later(d.Tail, at)
	case at > now:
		d.Head, d.Tail, d.Live = now, at, 1
	}
}

// Cancel hands back a reservation of n permits for instant at and returns
// the whole permits handed back. A reservation already due before now hands
// back nothing (its waiter had it); one due at now is handed back, as
// golang.org/x/time/rate does. Each reservation must be cancelled at most
// once.
//
// In the open queue, the last live grant to go hands back, with its own
// debt, everything the queue held: the state is then exactly what it would
// be had none of the queue's grants been asked for, whatever the order in
// which they were cancelled. Before that, a token bucket hands back at once
// what no later grant was promised, as x/time/rate does (counted from the
// instants, so that hand-backs do not add up to more than the bucket holds);
// a leaky bucket hands back a reservation only when nothing is queued after
// it (work given back under a later reservation would let a newcomer be
// scheduled over it). What is not handed back is held until the queue is
// empty or closed. The bucket packages' docs say why no window goes over
// its limit.
func (d *Deficit) Cancel(now, at, n int64, leaky bool, lim Limit) int64 {
	if at < now {
		return 0
	}
	debt := n * lim.Interval
	if d.Live == 0 || at <= d.Head || at > d.Tail {
		// Not a grant of the open queue. With no queue open it is a grant
		// made at now, with nothing after it but other grants of now: it
		// is handed back whole. Under an open queue (and for an instant
		// to come that no queue holds: the state was reset or its config
		// changed since) it is not, lest newcomers be scheduled over the
		// queue's waiters.
		if d.Live > 0 || at > now {
			return 0
		}
		give := min(debt, d.Owed)
		d.Owed -= give
		return give / lim.Interval
	}
	if d.Live == 1 {
		d.Owed = max(0, d.Owed-debt-d.Held)
		d.closeQueue()
		return n
	}
	d.Live--
	// An upper bound of the debt granted after the reservation: its
	// instant and the queue's tail are both rounded up to the clock's unit
	// (a microsecond in the stores), so one unit of refill more.
	later := (d.Tail-at)*lim.Rate + lim.Rate - 1
	var give int64
	if leaky {
		// Also bounded by the work queued above the reservation's own: at
		// its instant the work ahead of it has drained, with up to one
		// unit's worth (Rate - 1) drained past it, as instants round up.
		later = min(later, d.Owed-(at-now)*lim.Rate-debt+lim.Rate-1)
		if later < lim.Interval { // less than one permit: none
			give = debt
		}
	} else {
		give = max(0, debt-later)
	}
	give = min(give, d.Owed)
	d.Owed -= give
	d.Held += debt - give
	return give / lim.Interval
}

// Defer books a grant of n permits made at now for instant now+wait, the
// later of its own instant and one asked for (State.AcquireAt), after
// Granted booked it: the bucket is charged as if at that instant. The time
// until then counts as work owed, so that the deficit drains to exactly
// what the grant leaves at its instant (before it, tokens the bucket would
// have regained stay unused); the deficit holds no more than maxOwed, the
// grant's own debt still counted. That work is held (Held), so that once
// every waiter of the queue has gone the bucket is as if none had asked.
// before is Owed before the grant's debt was added.
func (d *Deficit) Defer(wait, before, n int64, lim Limit) {
	debt := n * lim.Interval
	target := maxOwed
	if wait <= (maxOwed-debt)/lim.Rate {
		target = wait*lim.Rate + debt
	}
	if extra := target - (before + debt); extra > 0 {
		d.Owed += extra
		d.Held += extra
	}
}

// WaitFor is how long until the deficit drains to at most limit.
func (d Deficit) WaitFor(limit int64, lim Limit) int64 {
	if d.Owed <= limit {
		return 0
	}
	return CeilDiv(d.Owed-limit, lim.Rate)
}

// GiveBack hands back a grant of n permits for instant at, as
// golang.org/x/time/rate's Reservation.Cancel does: only what no later
// reservation has built on, so the instants already promised to later waiters
// stay valid. hold is what the deficit holds at the grant's instant besides
// later work (a token bucket's Burst x Interval: its Release hands back
// this way; reservations are handed back by Cancel). It returns the whole
// permits handed back.
func (d *Deficit) GiveBack(now, at, n, hold int64, lim Limit) int64 {
	later := max(0, d.Owed-(at-now)*lim.Rate-hold)
	give := min(max(0, n*lim.Interval-later), d.Owed)
	d.Owed -= give
	return give / lim.Interval
}

// Settle ends every change: it sets the expiry, or clears the state when
// nothing is owed.
func (d *Deficit) Settle(lim Limit) {
	if d.Owed == 0 {
		*d = Deficit{}
		return
	}
	d.Expiry = d.Last + CeilDiv(d.Owed, d.Rate)
}

// Forgotten reports whether nothing is owed at now, whatever config a
// later call brings: under the deficit's own config (which drains it up to
// any change made after now) and under lim (a zero lim: its own only).
func (d *Deficit) Forgotten(now int64, lim Limit) bool {
	if d.Owed == 0 {
		return true
	}
	if now < d.Expiry {
		return false
	}
	if lim.Rate == 0 || d.sameConfig(lim) {
		return true
	}
	c := *d
	c.Advance(now, lim)
	return c.Owed == 0
}

// CeilDiv is a/b rounded up, for a >= 0 and b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ExpiresAt is when nothing is owed any more (0: nothing is now).
func (d *Deficit) ExpiresAt() int64 { return d.Expiry }
