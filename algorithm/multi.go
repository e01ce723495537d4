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
	// Wait, in µs: when granted, until the grant (only a single limit
	// reserves); when refused, the request's retry-after, the latest of
	// the limits'.
	Wait int64
}

// AcquireAll asks every part for n permits at now (µs), as one request:
// granted only if every limit grants it, and then charged to all of them;
// a refusal charges none. out[i] receives each limit's decision, in its
// own unit (on a refusal Remaining is what the limit has left and Wait
// its own retry-after). Every part must allow n (Spec.MaxPermits).
//
// A single part is its algorithm's Acquire, reservations and all. With
// several, a request is granted only at once: reserving on every limit at
// one instant would take each algorithm's rules for a grant at a chosen
// later instant, which they do not have, and a reservation made at each
// limit's own earliest instant would let the limits that granted sooner
// count the permits before they are used. So a request that must wait on
// any limit is refused with the latest of the limits' waits as its
// retry-after, charging none, and the caller asks again then (maxWait
// bounds only a single part's reservation).
//
// The limits are asked first on copies (State.Clone), in order; the
// states change only when every copy granted at once.
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
	for i := range parts {
		p := &parts[i]
		u := p.unit()
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
			res.Granted, res.Refused = false, i
		}
		res.Wait = max(res.Wait, wait)
		out[i] = Decision{Wait: d.Wait, Remaining: p.State.Available(t, p.Limit), Now: Later(t, d.Now)}
	}
	if !res.Granted {
		return res
	}
	res.Wait = 0
	for i := range parts {
		p := &parts[i]
		// Granted at once, as its copy was: the same state, instant and request.
		out[i] = p.State.Acquire(now/p.unit(), p.Limit, n, 0)
	}
	return res
}
