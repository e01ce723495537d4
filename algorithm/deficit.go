package algorithm

// Deficit is the state both buckets share: how far the bucket is from
// full (token bucket) or how much work is queued (leaky bucket), counted in
// permits x Interval so that refilling Rate per ms stays in integers. It can
// exceed the bucket's size while reservations are queued.
type Deficit struct {
	// Owed is permits x Scale still to drain; 0 is a full token bucket or an
	// empty leaky-bucket queue.
	Owed int64
	// Scale is the Interval (ms) Owed is counted in; a config with another
	// interval rescales it, rounding against the caller.
	Scale int64
	// Last is the latest now seen: time never runs backwards.
	Last int64
	// Expiry is when Owed has drained to 0 at the rate configured when it
	// last changed; the state counts as empty from then on.
	Expiry int64
}

// Advance moves the deficit to now and returns the effective now.
func (d *Deficit) Advance(now int64, lim Limit) int64 {
	now = Later(now, d.Last)
	if d.Expiry != 0 && now >= d.Expiry {
		d.Owed = 0
	}
	if d.Owed > 0 && d.Scale != lim.Interval {
		// owed/old*new, rounded up: q whole permits and a remainder.
		q, r := d.Owed/d.Scale, d.Owed%d.Scale
		d.Owed = q*lim.Interval + CeilDiv(r*lim.Interval, d.Scale)
	}
	d.Scale = lim.Interval
	if elapsed := now - d.Last; elapsed > 0 {
		if elapsed >= CeilDiv(d.Owed, lim.Rate) {
			d.Owed = 0
		} else {
			d.Owed -= elapsed * lim.Rate
		}
	}
	d.Last = now
	return now
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
// later work (a token bucket's Burst x Interval; a leaky bucket's queued
// grant itself, n x Interval). It returns the whole permits handed back.
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
	d.Expiry = d.Last + CeilDiv(d.Owed, lim.Rate)
}

// Forgotten reports whether nothing is owed at now.
func (d *Deficit) Forgotten(now int64) bool {
	return d.Owed == 0 || now >= d.Expiry
}

// CeilDiv is a/b rounded up, for a >= 0 and b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }
