// Package direct lets the root package's Limiter bind itself, once, to its
// limiter in a store of this process (memstore), so that a call does not
// look the name up again (hash, map). The types are generic so that this package
// needs none of the root package's: K, C and D are redlimit.Key,
// redlimit.Config and redlimit.Decision.
package direct

import (
	"context"
	"time"
)

// Token is Bind's first argument: only this module can name it, so no
// caller outside it can bind.
type Token struct{}

// Binder is a store whose limiters a Limiter can bind itself to.
type Binder[K, C, D any] interface {
	// Bind returns the handle of the limiter called name (which need not
	// exist yet). name is valid.
	Bind(tok Token, name string) Handle[K, C, D]
}

// Handle is one name's limiter in a store, bound.
type Handle[K, C, D any] interface {
	// Acquire is Store.Acquire on the bound name (key.Name is it).
	// Arguments go by value: through an interface, pointers to the
	// caller's variables would move them to the heap.
	Acquire(ctx context.Context, key K, known C, n int64, maxWait time.Duration) (D, error)
}
