package redlimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FailurePolicy says what a Limiter answers when its store cannot be reached
// (errors.Is(err, ErrUnavailable)).
type FailurePolicy int

const (
	// FailClosed, the default, returns the error with a refusal: a limiter
	// that guards something must not stop limiting without the caller knowing.
	FailClosed FailurePolicy = iota
	// FailOpen grants, with Result.Degraded set and no error: for limits that
	// are a courtesy, where an outage of the limiter must not become one of
	// the service.
	FailOpen
)

// WithFailurePolicy sets what acquire calls answer while the store is
// unavailable. WithFallback takes precedence while it knows the config.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(l *Limiter) error {
		if p != FailClosed && p != FailOpen {
			return &ArgumentError{Arg: "failure policy", Value: fmt.Sprint(int(p)), Reason: "unknown", Kind: ErrInvalidArgument}
		}
		l.policy = p
		return nil
	}
}

// WithFallback makes acquire calls decide in store (typically a
// memstore.Store of this process) while the main store is unavailable, with
// share (0 < share <= 1) of the limit: with N instances of a service, 1/N
// keeps the whole near the shared limit. Results are marked Degraded. It
// needs the config (WithConfig, or any earlier answer from the store); until
// one is known the failure policy applies.
func WithFallback(store Store, share float64) Option {
	return func(l *Limiter) error {
		if store == nil || !(share > 0 && share <= 1) {
			return &ArgumentError{Arg: "fallback", Value: fmt.Sprint(share), Reason: "needs a store and a share in (0, 1]", Kind: ErrInvalidArgument}
		}
		l.fallback, l.share = store, share
		return nil
	}
}

// scaled returns cfg with its counts scaled by share (at least 1 each).
func scaled(cfg Config, share float64) Config {
	part := func(n int64) int64 {
		if n == 0 {
			return 0
		}
		return max(1, int64(float64(n)*share))
	}
	cfg.Rate, cfg.Burst, cfg.Capacity = part(cfg.Rate), part(cfg.Burst), part(cfg.Capacity)
	cfg.Epoch = 0
	return cfg
}

// degraded answers an acquire whose store failed with err, per the policy.
func (l *Limiter) degraded(ctx context.Context, n int64, maxWait time.Duration, err error) (Result, error) {
	if !errors.Is(err, ErrUnavailable) {
		return Result{}, err
	}
	if known := l.knownConfig(); l.fallback != nil && known.Rate > 0 {
		local := scaled(known, l.share)
		fb := &Limiter{store: l.fallback, name: l.name, client: l.client, clock: l.clock}
		if n > local.MaxPermits() {
			return Result{Degraded: true}, nil // can never pass the local share: a refusal
		}
		d, ferr := fb.store.Acquire(ctx, fb.key(), local, n, maxWait)
		if ferr == nil {
			r, werr := fb.wait(ctx, d, n)
			r.Degraded = true
			return r, werr
		}
	}
	if l.policy == FailOpen {
		return Result{Allowed: true, Degraded: true}, nil
	}
	return Result{Degraded: true}, err
}
