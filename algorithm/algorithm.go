// Package algorithm holds what every rate-limiting algorithm's rules share.
// Each algorithm lives in a subpackage as plain Go: a State that moves from
// (state, now, request) to (state, decision). The memory store runs that code;
// the Redis store's Lua is held to it, decision for decision, by differential
// tests.
//
// Times are integers of the store's clock, never read here: microseconds
// since the Unix epoch for the fixed window, the sliding counter and the
// buckets, so that they keep to their definitions for every spacing of a
// microsecond or more (rates up to 10^6 per second); milliseconds for the
// sliding log, whose entries group the grants of one millisecond. The rules
// themselves do not depend on the unit: Interval, Since, waits and instants
// are all in the same one.
//
// # The registry
//
// Each algorithm declares once, in its package, a Spec: its names, its
// State, its unit of time, its parameters and their defaults, its bounds
// and what a SetRate keeping the state does. The root package redlimit
// registers the ones built in (Register); Config.Normalize, the stores,
// the command line's help and the fuzz targets read them (Lookup, All, Of).
//
// # Adding an algorithm
//
//  1. A package algorithm/<package> whose State implements State (its zero
//     value a fresh limit), with a doc saying what it promises and what
//     SetRate does to its state, and a spec.go declaring its Name and Spec.
//  2. A Lua file redisstore/scripts/<package>.lua answering as the State
//     does, for the Redis store.
//  3. One line registering its Spec in the root package's algorithms.go
//     (the list's order is redlimit.Algorithms').
//
// Tests: its rules' tests beside it (its promise as properties over
// random traces); its rules-level differential test, the package against
// its Lua file on a real Redis; FuzzRules and the conformance suite
// (storetest) pick it up from the registry.
package algorithm

// Limit is a validated configuration in the units the rules use.
type Limit struct {
	// Rate permits per Interval (in the clock's unit).
	Rate, Interval int64
	// Burst is the token bucket's capacity.
	Burst int64
	// Capacity is the most permits the leaky bucket's queue holds.
	Capacity int64
	// Since is the instant this config took effect (0: unknown, as if
	// always). The buckets account the time before it at the config their
	// state was last changed under; the other algorithms keep counts and
	// need no such instant.
	Since int64
}

// Unlimited as a maximum wait lets a request wait as long as it takes.
const Unlimited int64 = -1

// Decision is the outcome of an acquire.
type Decision struct {
	Granted bool
	// At is when the permits are granted: now, or a later reserved instant
	// the caller waits for. Zero when refused.
	At int64
	// Wait is At-now when granted; when refused, how long until the same
	// request would be granted at once (its retry-after).
	Wait int64
	// Remaining is what a new request could be granted at Now.
	Remaining int64
	// Now is the time of the decision (never before an earlier one).
	Now int64
}

// State is one limit's state under one algorithm: the Overall state of a
// limiter, or one client's PerClient state. The zero value of each
// algorithm's State is a fresh limit.
type State interface {
	// Acquire asks for n permits (1 <= n <= the algorithm's maximum) at now,
	// waiting at most maxWait (Unlimited: no bound). A grant after now is
	// a reservation that counts from then on and can be handed back.
	Acquire(now int64, lim Limit, n, maxWait int64) Decision
	// AcquireAt is Acquire for a request not to be granted before
	// notBefore: it is granted at the later of notBefore and the instant
	// Acquire would give it, and reserved then, so that a request against
	// several limits holds all of them at one instant (AcquireAll).
	// maxWait bounds the wait until that instant. A notBefore at or before
	// now is Acquire.
	AcquireAt(now int64, lim Limit, n, maxWait, notBefore int64) Decision
	// Cancel hands back up to n permits of a reservation for instant at and
	// returns how many it handed back.
	Cancel(now int64, lim Limit, at, n int64) int64
	// Release hands back up to n permits granted at or before now and returns
	// how many it handed back (0 where the algorithm has nothing to return).
	Release(now int64, lim Limit, n int64) int64
	// Available is what a request could be granted at now; it changes nothing.
	Available(now int64, lim Limit) int64
	// Forgotten reports whether the state holds nothing that can change an
	// answer at now under lim, so a store may drop it. A zero lim asks under
	// the config the state was last changed under (a store that lost it).
	Forgotten(now int64, lim Limit) bool
	// ExpiresAt is when the state counts as empty, the limit whole again
	// (for a window algorithm, the end of its newest window); 0 for a
	// fresh state. A result's reset-after is read from it.
	ExpiresAt() int64
	// Clone returns a copy sharing nothing with the state: a request
	// against several limits asks each one on a copy first (AcquireAll).
	Clone() State
}

// Resetter is a State that can be made fresh in place, keeping its
// buffers: a store reuses a forgotten state (Forgotten) for the call at
// hand instead of allocating a new one. Every State built in is one.
type Resetter interface {
	// Reset makes the state equal to its zero value, but for the capacity
	// of its slices.
	Reset()
}

// ByExpiry caps a grant instant at the state's expiry: once forgotten the
// state is empty and any request fits. Without a config change the expiry
// never comes first; after one it can (the state is forgotten as the old
// config said).
func ByExpiry(at, now, expiry int64) int64 {
	if expiry > now && at > expiry {
		return expiry
	}
	return at
}

// Later returns the later of two instants.
func Later(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
