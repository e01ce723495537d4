package algorithm

// Part is one limit of a request made against several limits at once (a
// multi-limit policy): its algorithm, state and config.
type Part struct {
	Spec  *Spec
	State State
	Limit Limit
}

// unit is the part's unit of time in µs.
func (p *Part) unit() int64 { return int64(p.Spec.Unit / 1000) }

// AllDecision is the answer to a request made against several limits.
type AllDecision struct {
	Granted bool
	// Full: refused because a leaky bucket's queue has no room for the
	// request, so no wait would get it.
	Full bool
	// Refused is the index of the limit that refused: the one that
	// would make the request wait longest (the first of equals, a full
	// queue before any wait); -1 when granted.
	Refused int
	// Wait, in µs: when granted, until the grant (0: at once; else every
	// limit holds a reservation for now+Wait); when refused, the request's
	// retry-after, the latest of the limits'.
	Wait int64
}

// AcquireAll asks every part for n permits at now (µs), as one request:
// granted only if every limit grants it, and then charged to all of them;
// a refusal charges none. out[i] receives each limit's decision, in its
// own unit (on a refusal Remaining is what the limit has left and Wait
// its own retry-after). Every part must allow n (Spec.MaxPermits).
//
// A single part is its algorithm's Acquire, reservations and all. With
// several, each limit is asked first on a copy (State.Clone), in order,
// for its earliest instant; the request's instant is the latest of them
// (rounded up to a whole millisecond when a limit counts in them, so that
// every limit can hold it), and each limit then reserves it there
// (State.AcquireAt), on its own state as asked, so that it grants there:
// all of the request is held at one instant, or none of it. A request
// that would wait longer than maxWait is refused with the latest of the
// limits' waits as its retry-after; so is one a full leaky-bucket queue
// refuses, whatever its wait. Cancelling the reservation on every limit
// at its instant (State.Cancel) hands it back.
//
// The instants a key's requests are granted at never go backwards while
// no reservation is handed back: the limit that set the latest instant
// counts the grant at its own earliest, after which none of its own
// instants is earlier (each algorithm queues first come, first served).
func AcquireAll(parts []Part, now, n, maxWait int64, out []Decision) AllDecision {
	if len(parts) == 1 {
		p := &parts[0]
		u, w := p.unit(), maxWait
		if w > 0 {
			w /= u // rounded down: never longer than allowed
		}
		t := now / u
		d := p.State.Acquire(t, p.Limit, n, w)
		out[0] = d
		if d.Granted {
			return AllDecision{Granted: true, Refused: -1, Wait: d.Wait * u}
		}
		// A refusal changed nothing: Full reads the state as it was.
		full := p.Spec.Full != nil && w != 0 && p.Spec.Full(p.State, t, p.Limit, n)
		return AllDecision{Full: full, Refused: 0, Wait: d.Wait * u}
	}
	res := AllDecision{Granted: true, Refused: -1}
	// at is the request's instant: the latest of the limits' earliest
	// (a limit in milliseconds grants from the start of one).
	at, ms := now, false
	for i := range parts {
		p := &parts[i]
		u := p.unit()
		ms = ms || u > 1
		t := now / u
		d := p.State.Clone().Acquire(t, p.Limit, n, Unlimited)
		wait := d.Wait * u
		switch {
		case !d.Granted: // a full queue: no wait gets it
			if !res.Full || wait > res.Wait {
				res.Refused = i
			}
			res.Granted, res.Full = false, true
		case wait > 0 && !res.Full && (res.Refused < 0 || wait > res.Wait):
			res.Refused = i
		}
		res.Wait = max(res.Wait, wait)
		at = max(at, d.At*u)
		out[i] = Decision{Wait: d.Wait, Remaining: p.State.Available(t, p.Limit), Now: Later(t, d.Now)}
	}
	if at > now && ms {
		at = CeilDiv(at, 1000) * 1000 // an instant of every limit
	}
	if res.Full || maxWait != Unlimited && at-now > maxWait {
		res.Granted = false
		return res
	}
	res.Granted, res.Refused, res.Wait = true, -1, at-now
	for i := range parts {
		p := &parts[i]
		u := p.unit()
		// Granted at at, as it fits there on the state its copy was
		// asked on: at its own earliest instant or later.
		out[i] = p.State.AcquireAt(now/u, p.Limit, n, Unlimited, at/u)
	}
	return res
}
