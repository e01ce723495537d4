// Package direct lets the root package's Limiter and Policy bind
// themselves, once, to their limiter or policy in a store of this process
// (memstore): a call then does not look the name up again (hash, map), and
// its answer comes back small, with the stored config by pointer. The types are generic so that this package
// needs none of the root package's: K and C are redlimit.Key and
// redlimit.Config.
package direct

import (
	"context"
	"time"
)

// Token is Bind's first argument: only this module can name it, so no
// caller outside it can bind.
type Token struct{}

// Binder is a store whose limiters a Limiter can bind itself to.
type Binder[K, C any] interface {
	// Bind returns the handle of key's limiter (which need not exist
	// yet), for the calls of key's client. key's name is valid.
	Bind(tok Token, key K) Handle[K, C]
}

// Handle is one name's limiter in a store, bound.
type Handle[K, C any] interface {
	// Owner is the store the handle belongs to. A type that embeds that
	// store (and may override its Acquire) has its Bind method too: the
	// caller binds only when Owner is the very store it was given.
	Owner() any
	// Acquire is Store.Acquire for the bound key. known is not written.
	Acquire(ctx context.Context, known *C, n int64, maxWait time.Duration) (Answer[C], error)
}

// Answer is Store.Acquire's Decision in short: instants and durations in
// µs (since the Unix epoch), the stored config by pointer (the store's
// own copy, never written), no Cached (a bound store has no cache).
type Answer[C any] struct {
	Granted, Full bool
	Remaining     int64
	// Wait, At and Now are µs; At is zero when refused.
	Wait, At, Now int64
	Config        *C
}

// KeyBinder is a store whose keyed policies a Policy can bind itself to:
// P and S are redlimit.PolicyConfig and redlimit.LimitStatus.
type KeyBinder[P, S any] interface {
	// BindPolicy returns the handle of the policy called name (which need
	// not exist yet); name is valid.
	BindPolicy(tok Token, name string) KeyHandle[P, S]
}

// KeyHandle is one policy of a store, bound.
type KeyHandle[P, S any] interface {
	// Owner is the store the handle belongs to (Handle.Owner).
	Owner() any
	// Take grants n permits (1..algorithm.MaxRate) to key (valid) now, in
	// the case the store answers without its whole path: a grant at once,
	// of a policy of one limit. It returns the Result's Limits (one,
	// never written once handed out), what they show (what is left, and
	// how long until the limit is whole again, in µs) so that the caller
	// need not read them, the store time of the grant in µs since the
	// Unix epoch, the stored policy (the store's own copy, never written)
	// and true; or it changes nothing and returns false, for
	// PolicyStore.AcquireKey to answer.
	Take(key string, n int64) (limits []S, remaining, resetAfter, now int64, policy *P, ok bool)
}
