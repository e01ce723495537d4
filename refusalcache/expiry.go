package refusalcache

import "time"

// A limiter given a TTL through Expire loses its config and Overall state
// when the TTL runs out, with no call made: from then on the store answers
// its calls afresh (not initialized, or a fresh state restored from the
// caller's config). A refusal made before that instant must not be answered
// after it. The cache cannot know the store's instant, only its own around
// the Expire call, sent..replied: the store set the TTL in between, so the
// state goes at the earliest at sent + ttl and at the latest at replied +
// ttl (ttl counted in whole ms by a Redis, and its instant in whole ms too:
// the earliest is taken one ms sooner). So an entry of a call sent before
// replied + ttl ends at sent + ttl at the latest; calls sent after it met
// the state as it is after the expiry, and are cached as any other.
//
// Refusals sent before the Expire's reply are not cached at all (the
// generation check). A later Expire that was sent after the previous one's
// reply replaced its TTL, or found the state gone: its bounds replace the
// previous ones; Expires in flight together are bounded by the earliest
// start and the latest end. A ClearExpire sent after the Expire's reply that
// removed the TTL ends the bound, and so does the first refusal of a call
// sent after the latest instant (moving to a new generation, as the calls
// still in flight may have been sent before it).

// expiry is what the cache knows of a TTL set on a limiter.
type expiry struct {
	earliest time.Time // the state may be gone from then on
	latest   time.Time // the state is gone by then
	replied  time.Time // the Expire's reply
}

// noteExpire records an Expire of name by ttl, sent and answered at those
// instants of the cache's clock.
func (s *Store) noteExpire(name string, ttl time.Duration, sent, replied time.Time) {
	x := expiry{earliest: sent.Add(ttl.Truncate(time.Millisecond) - time.Millisecond), latest: replied.Add(ttl), replied: replied}
	s.expiryMu.Lock()
	defer s.expiryMu.Unlock()
	if s.expiries == nil {
		s.expiries = make(map[string]expiry)
	}
	if old, ok := s.expiries[name]; ok {
		if sent.Before(old.replied) { // in flight together
			x.earliest = minTime(x.earliest, old.earliest)
			x.latest = maxTime(x.latest, old.latest)
			x.replied = maxTime(x.replied, old.replied)
		}
	} else {
		s.expiring.Add(1)
	}
	s.expiries[name] = x
}

// clearExpire ends the bound of name when a ClearExpire sent at sent
// removed its TTL.
func (s *Store) clearExpire(name string, sent time.Time) {
	s.expiryMu.Lock()
	defer s.expiryMu.Unlock()
	if x, ok := s.expiries[name]; ok && !sent.Before(x.replied) {
		delete(s.expiries, name)
		s.expiring.Add(-1)
	}
}

// capExpiring returns valid, the end of an entry of name whose call was
// sent at sent in generation gen, bounded by name's TTL, and the call's
// generation from now on.
func (s *Store) capExpiring(name string, sent, valid time.Time, gen uint64) (time.Time, uint64) {
	s.expiryMu.Lock()
	defer s.expiryMu.Unlock()
	x, ok := s.expiries[name]
	switch {
	case !ok:
	case sent.After(x.latest):
		// The state expired before the call. Calls sent before the
		// expiry may still be in flight: a new generation keeps them
		// out of the cache, now that the bound is gone. This call is
		// in it, unless another change came in between.
		delete(s.expiries, name)
		s.expiring.Add(-1)
		if s.gen.Add(1) == gen+1 {
			gen++
		}
	default:
		valid = minTime(valid, x.earliest)
	}
	return valid, gen
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
