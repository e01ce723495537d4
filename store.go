package redlimit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/redlimit/redlimit/algorithm"
)

// Store keeps limiters' configs and state. The memory store
// (github.com/redlimit/redlimit/memstore) and the Redis store
// (github.com/redlimit/redlimit/redisstore) implement it; both run the same
// rules (package algorithm/...) and pass the same conformance suite
// (package storetest). A Store is safe for concurrent use.
//
// Stores validate their arguments too and return the same typed errors as
// Limiter; the Limiter checks first so that bad input never reaches a store.
type Store interface {
	// SetConfig stores cfg (already normalized) under name as how says and
	// returns the config stored afterwards and whether cfg was written.
	SetConfig(ctx context.Context, name string, cfg Config, how SetMode) (stored Config, set bool, err error)
	// Config returns the stored config, or ErrNotInitialized.
	Config(ctx context.Context, name string) (Config, error)
	// Acquire asks for n permits for key, waiting at most maxWait
	// (negative: no bound). known is the config the caller last saw (zero
	// Rate: none); a store that lost its config restores it from known.
	Acquire(ctx context.Context, key Key, known Config, n int64, maxWait time.Duration) (Decision, error)
	// Cancel hands back up to n permits of a reservation made for instant at
	// and returns how many were handed back.
	Cancel(ctx context.Context, key Key, known Config, at time.Time, n int64) (int64, error)
	// Release hands back up to n permits granted to key and returns how many
	// were handed back. upTo is the store time of the oldest grant the
	// caller hands back: a sliding log removes only entries made at or
	// before it (newest first), so that it never erases another client's
	// newer grant in its place; zero: no bound. Other algorithms ignore it.
	Release(ctx context.Context, key Key, known Config, n int64, upTo time.Time) (int64, error)
	// Available returns the permits a request could be granted now, and the
	// stored config.
	Available(ctx context.Context, key Key, known Config) (int64, Config, error)
	// Delete removes the limiter's config and Overall state; it reports
	// whether a config existed.
	Delete(ctx context.Context, name string) (bool, error)
	// Expire makes the config and the Overall state disappear after ttl, as
	// Delete would then; it reports whether a config existed.
	Expire(ctx context.Context, name string, ttl time.Duration) (bool, error)
	// ClearExpire undoes Expire; it reports whether a TTL was removed.
	ClearExpire(ctx context.Context, name string) (bool, error)
}

// SetMode says how Store.SetConfig treats a config that is already stored.
type SetMode int

const (
	// SetIfAbsent writes only where no config is stored (TrySetRate).
	SetIfAbsent SetMode = iota
	// SetKeepState overwrites the config; permits already granted still count.
	SetKeepState
	// SetResetState overwrites the config and starts from an empty state.
	SetResetState
)

var setModeNames = [...]string{SetIfAbsent: "if-absent", SetKeepState: "keep", SetResetState: "reset"}

// String names the mode as the stores' scripts take it: "if-absent",
// "keep" or "reset".
func (m SetMode) String() string {
	if m < 0 || int(m) >= len(setModeNames) {
		return fmt.Sprintf("SetMode(%d)", int(m))
	}
	return setModeNames[m]
}

// Validate checks that m is one of the three modes.
func (m SetMode) Validate() error {
	if m < 0 || int(m) >= len(setModeNames) {
		return &ArgumentError{Arg: "set mode", Value: fmt.Sprint(int(m)), Reason: "unknown", Kind: ErrInvalidArgument}
	}
	return nil
}

// Key names one log of a limiter: the limiter's name and the client asking.
// The client ID selects the log of a PerClient limiter and is ignored by an
// Overall one.
type Key struct {
	Name   string
	Client string
}

// Decision is a store's answer to Acquire.
type Decision struct {
	Granted bool
	// Remaining is what a new request could be granted at Now.
	Remaining int64
	// At is the store time of the grant; a grant after Now is a reservation
	// the caller waits for.
	At time.Time
	// Wait is At-Now when granted; when refused, how long until the request
	// could be granted.
	Wait time.Duration
	// Now is the store time of the decision.
	Now time.Time
	// Config is the stored config the decision was made under.
	Config Config
	// Full, on a refusal, says that a leaky bucket's queue has no room for
	// the request: it would be refused whatever the wait (Acquire's
	// ErrQueueFull). False for every other refusal and every grant; a
	// store may leave it false when maxWait is 0 (no caller of TryAcquire
	// needs it).
	Full bool
	// Cached says that a cache in front of the store answered (a refusal
	// cache, package refusalcache) without asking the store; Observers
	// count it (Event.Cached).
	Cached bool
}

// maxNameLen is the longest limiter name, in bytes.
const maxNameLen = 1024

// maxClientIDLen is the longest client ID, in bytes.
const maxClientIDLen = 256

// Validate checks k as the Store calls that take a Key do: a Name of
// 1..1024 bytes, any bytes at all (stores encode names so that no name can
// reach another limiter's keys), and a Client of 1..256 bytes of printable
// UTF-8. Stores call it before anything else; the Limiter already has.
func (k Key) Validate() error {
	if err := validateName(k.Name); err != nil {
		return err
	}
	return validateClientID(k.Client)
}

// ValidateName checks only k.Name, for the Store calls that take a name
// (SetConfig, Config, Delete, ClearExpire).
func (k Key) ValidateName() error { return validateName(k.Name) }

// ValidateClient checks only k.Client, for a client ID given on its own.
func (k Key) ValidateClient() error { return validateClientID(k.Client) }

// ValidateTTL checks k.Name and a TTL as Store.Expire takes them: the TTL
// at least 1 ms.
func (k Key) ValidateTTL(ttl time.Duration) error {
	if err := validateName(k.Name); err != nil {
		return err
	}
	return validateTTL(ttl)
}

// ValidatePermits checks a permit count against c: at least 1, at most
// c.MaxPermits() (its rate, burst or capacity; ErrPermitsExceedRate beyond).
// A zero Config (a store that has not read the limiter's config yet)
// bounds it by algorithm.MaxRate only: the store checks again against the stored
// config, since a client's copy may be out of date.
func (c Config) ValidatePermits(n int64) error {
	if c.Rate == 0 {
		return validatePermits(n)
	}
	if n > 0 && n <= c.MaxPermits() {
		return nil
	}
	if n <= 0 {
		return permitsError(n)
	}
	return permitsExceedRate(n, c.MaxPermits())
}

// WithNewEpoch returns c with a fresh random epoch, as a store gives a
// limiter it creates or resets: a positive integer below 2^52, exact in
// every store.
func (c Config) WithNewEpoch() Config { c.Epoch = newEpoch(); return c }

// validateName checks a limiter name: 1..maxNameLen bytes, any bytes at all
// (stores encode names so that no name can reach another limiter's keys).
func validateName(name string) error {
	if name != "" && len(name) <= maxNameLen {
		return nil // small enough to inline: the check every call makes
	}
	return nameError(name)
}

func nameError(name string) error {
	if name == "" {
		return &ArgumentError{Arg: "name", Reason: "must not be empty", Kind: ErrInvalidArgument}
	}
	if len(name) > maxNameLen {
		return &ArgumentError{Arg: "name", Reason: fmt.Sprintf("is %d bytes, at most %d allowed", len(name), maxNameLen), Kind: ErrInvalidArgument}
	}
	return nil
}

// validateClientID checks a client ID: 1..maxClientIDLen bytes of printable UTF-8.
func validateClientID(id string) error {
	if printableASCII(id) && id != "" && len(id) <= maxClientIDLen {
		return nil // the common case, checked on every call
	}
	if id == "" || len(id) > maxClientIDLen || !utf8.ValidString(id) {
		return &ArgumentError{Arg: "client ID", Value: id, Reason: fmt.Sprintf("must be 1..%d bytes of UTF-8", maxClientIDLen), Kind: ErrInvalidArgument}
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return &ArgumentError{Arg: "client ID", Value: id, Reason: "must not hold control characters", Kind: ErrInvalidArgument}
		}
	}
	return nil
}

// printableASCII reports whether s holds only printable ASCII.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// validatePermits checks a permit count. Whether it exceeds the rate is
// checked by the store against the stored config (a client's copy may be
// out of date), before any state is touched.
func validatePermits(n int64) error {
	if n > 0 && n <= algorithm.MaxRate {
		return nil // small enough to inline: the check every call makes
	}
	return permitsError(n)
}

func permitsError(n int64) error {
	if n <= 0 {
		return &ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: "must be at least 1", Kind: ErrInvalidArgument}
	}
	if n > algorithm.MaxRate {
		return permitsExceedRate(n, algorithm.MaxRate)
	}
	return nil
}

// validateTTL checks a TTL for Expire: at least 1 ms.
func validateTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return &ArgumentError{Arg: "ttl", Value: ttl.String(), Reason: "must be at least 1ms", Kind: ErrInvalidArgument}
	}
	return nil
}

// permitsExceedRate is the error for asking n permits of a limiter that
// grants at most max at once (its rate, burst or capacity).
func permitsExceedRate(n, max int64) error {
	return &ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: fmt.Sprintf("exceed %d, the most this limiter can grant at once", max), Kind: ErrPermitsExceedRate}
}

// newEpoch returns a fresh random epoch for a created or reset limiter: a
// positive integer below 2^52, exact in every store.
func newEpoch() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:])>>12) | 1
}

// newClientID returns a random client ID.
func newClientID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}
