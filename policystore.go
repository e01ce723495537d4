package redlimit

import (
	"context"
	"fmt"
	"time"
)

// PolicyStore keeps keyed policies (see Policy): a policy's limits stored
// once under its name, and per key a state that expires on its own once it
// can no longer change an answer. The memory store and the Redis store
// implement it beside Store; package storetest holds both to one contract.
//
// Every call on a key carries the policy the caller knows (known), as
// Store's calls carry their config: a store that keeps a key's state away
// from its policy's (a Redis Cluster spreads keys over slots) decides with
// it, and a store that lost the policy restores it from it. A store that
// finds known older than the policy a key's state was last changed under
// decides under the newer one instead; the PolicyDecision says which.
type PolicyStore interface {
	// SetPolicy stores p's limits (already normalized) under name as how
	// says and returns the policy stored afterwards and whether p was
	// written. A write gives the policy a new Version; SetResetState (and
	// a write where none was stored) a new Epoch too.
	SetPolicy(ctx context.Context, name string, p PolicyConfig, how SetMode) (stored PolicyConfig, set bool, err error)
	// Policy returns the stored policy, or ErrNotInitialized.
	Policy(ctx context.Context, name string) (PolicyConfig, error)
	// DeletePolicy removes the policy; keys' states then expire on their
	// own, and a policy stored again later (a new Epoch) never counts them.
	DeletePolicy(ctx context.Context, name string) (bool, error)
	// AcquireKey asks for n permits for one key, against every limit of
	// the policy (algorithm.AcquireAll), waiting at most maxWait
	// (negative: no bound): a grant after now is a reservation on every
	// limit at the decision's At.
	AcquireKey(ctx context.Context, k PolicyKey, known PolicyConfig, n int64, maxWait time.Duration) (PolicyDecision, error)
	// CancelKey hands back up to n permits of a reservation made for
	// instant at, on every limit, and returns the fewest a limit handed
	// back.
	CancelKey(ctx context.Context, k PolicyKey, known PolicyConfig, at time.Time, n int64) (int64, error)
	// ReleaseKey hands back up to n permits granted to the key on every
	// limit, and returns the fewest handed back by one.
	ReleaseKey(ctx context.Context, k PolicyKey, known PolicyConfig, n int64) (int64, error)
	// StatusKey returns the key's state on every limit without changing it:
	// Granted reports whether a request of one permit would be granted now.
	StatusKey(ctx context.Context, k PolicyKey, known PolicyConfig) (PolicyDecision, error)
}

// PolicyConfig is a policy as stored: its limits, applied together.
type PolicyConfig struct {
	// Limits, at least one and at most MaxLimits, each a normalized
	// Overall Config (the key given per call says whose limit it is).
	// Their Epoch fields are zero: the policy has one.
	Limits []Config
	// Version grows with every change stored; a key's state remembers the
	// version it was last changed under, so that a stale copy of the
	// policy is noticed. Stores set it; callers leave it zero.
	Version int64
	// Epoch changes when the policy is created or reset: keys' states of
	// another epoch count as empty. Stores set it.
	Epoch int64
	// Since is when the current limits took effect keeping the keys'
	// states (SetKeepState), so that the buckets count the time before it
	// at the limits their state was last changed under; zero: unknown, as
	// if always (algorithm.Limit.Since).
	Since time.Time
}

// MaxLimits bounds the limits of one policy.
const MaxLimits = 16

// maxKeyLen is the longest key of a keyed call, in bytes.
const maxKeyLen = 1024

// PolicyKey names one key of a policy.
type PolicyKey struct {
	Policy string
	// Key is any bytes, 1..1024 of them: stores encode keys so that no key
	// can reach another's state.
	Key string
}

// Validate checks k as the PolicyStore calls that take one do.
func (k PolicyKey) Validate() error {
	if uint(len(k.Policy)-1) < maxNameLen && uint(len(k.Key)-1) < maxKeyLen {
		// 1..1024 bytes each (an empty one wraps around), small enough
		// to inline: the check every call makes.
		return nil
	}
	return k.invalid()
}

func (k PolicyKey) invalid() error {
	if err := validateName(k.Policy); err != nil {
		return err
	}
	return validateKey(k.Key)
}

func validateKey(key string) error {
	if key != "" && len(key) <= maxKeyLen {
		return nil // small enough to inline: the check every call makes
	}
	return keyError(key)
}

func keyError(key string) error {
	if key == "" {
		return &ArgumentError{Arg: "key", Reason: "must not be empty", Kind: ErrInvalidArgument}
	}
	return &ArgumentError{Arg: "key", Reason: fmt.Sprintf("is %d bytes, at most %d allowed", len(key), maxKeyLen), Kind: ErrInvalidArgument}
}

// PolicyDecision is a PolicyStore's answer for one key.
type PolicyDecision struct {
	Granted bool
	// Full: refused because a leaky bucket's queue has no room, whatever
	// the wait.
	Full bool
	// Refused is the index in Limits of the limit that refused (the one
	// whose retry-after is latest); -1 when granted.
	Refused int
	// At is the store time of the grant; Wait is At-Now when granted, the
	// retry-after when refused.
	At   time.Time
	Wait time.Duration
	// Now is the store time of the decision.
	Now time.Time
	// Limits is each limit's state after the decision, in the policy's order.
	Limits []LimitState
	// Policy is the stored policy the decision was made under.
	Policy PolicyConfig
	// Cached says that a cache in front of the store answered (a keyed
	// refusal, see package refusalcache) without asking it; observers
	// count it (Event.Cached), as a Limiter's Decision.Cached.
	Cached bool
}

// LimitState is one limit's state for one key after a decision.
type LimitState struct {
	// Remaining is what a new request could be granted at Now.
	Remaining int64
	// ResetAfter is how long until the limit is whole again for the key
	// (for a window algorithm, until its newest window ends), nobody
	// asking meanwhile.
	ResetAfter time.Duration
	// Wait is this limit's own retry-after on a refusal (0 if it would
	// grant), or the wait until the grant.
	Wait time.Duration
}

// NormalizePolicy checks a policy's limits and returns them normalized
// (Config.Normalize), as stores keep them.
func NormalizePolicy(limits []Config) ([]Config, error) {
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, &ArgumentError{Arg: "limits", Value: fmt.Sprint(len(limits)), Reason: fmt.Sprintf("a policy has 1..%d limits", MaxLimits), Kind: ErrInvalidArgument}
	}
	out := make([]Config, len(limits))
	for i, c := range limits {
		if c.Mode != Overall {
			return nil, &ArgumentError{Arg: "mode", Value: c.Mode.String(), Reason: "a policy's limits are per key already: leave Mode Overall", Kind: ErrInvalidArgument}
		}
		n, err := c.Normalize()
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i+1, err)
		}
		n.Epoch = 0
		out[i] = n
	}
	return out, nil
}

// MaxPermits is the most permits one request can be granted: the least of
// the limits' (Config.MaxPermits).
func (p PolicyConfig) MaxPermits() int64 {
	var most int64
	for i, c := range p.Limits {
		if m := c.MaxPermits(); i == 0 || m < most {
			most = m
		}
	}
	return most
}

// SameLimits reports whether p and q hold the same limits, in order.
func (p PolicyConfig) SameLimits(q PolicyConfig) bool {
	if len(p.Limits) != len(q.Limits) {
		return false
	}
	for i := range p.Limits {
		if p.Limits[i] != q.Limits[i] {
			return false
		}
	}
	return true
}
