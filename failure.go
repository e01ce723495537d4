package redlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlimit/redlimit/internal/direct"
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

type circuitOpen struct{}

func (circuitOpen) Error() string { return "redlimit: store unavailable: circuit breaker open" }

// Is makes ErrCircuitOpen match ErrUnavailable.
func (circuitOpen) Is(target error) bool { return target == ErrUnavailable }

// defaultStoreShare is WithStoreShare's default.
const defaultStoreShare = 0.5

// WithStoreShare sets the part (0 < share <= 1) of the time left before a
// call's deadline that the store may use, when a fallback (WithFallback) or
// FailOpen can answer in its place: a store that does not answer within it
// is given up and the rest of the time goes to the fallback. Without it, a
// stalled store would use the whole deadline and the fallback would always
// come too late. 1 gives the store the whole deadline. Calls without a
// deadline, and limiters with neither a fallback nor FailOpen, are not
// affected. Default: 0.5. A circuit breaker in front of the
// store (package breaker) spares even that share once the store is known
// to be down.
func WithStoreShare(share float64) Option {
	return func(l *Limiter) error {
		if !(share > 0 && share <= 1) {
			return &ArgumentError{Arg: "store share", Value: fmt.Sprint(share), Reason: "must be in (0, 1]", Kind: ErrInvalidArgument}
		}
		l.storeShare = share
		return nil
	}
}

// storeAcquire asks the store for the permits, within the store's share of
// the deadline when something else can answer in its place.
func (l *Limiter) storeAcquire(ctx context.Context, known *Config, n int64, maxWait time.Duration, out *Decision) error {
	share := l.storeShare
	if share == 0 {
		share = defaultStoreShare
	}
	if share >= 1 || l.fallback == nil && l.policy != FailOpen {
		return l.storeCall(ctx, known, n, maxWait, out)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return l.storeCall(ctx, known, n, maxWait, out)
	}
	sctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Duration(float64(time.Until(dl))*share)))
	defer cancel()
	return l.storeCall(sctx, known, n, maxWait, out)
}

// storeCall is the store's Acquire, through its handle when bound, into
// out: a Decision is large enough that returning it through each call
// shows on the hot path.
func (l *Limiter) storeCall(ctx context.Context, known *Config, n int64, maxWait time.Duration, out *Decision) (err error) {
	if l.handle != nil {
		var a direct.Answer[Config]
		if a, err = l.handle.Acquire(ctx, known, n, maxWait); err == nil {
			*out = decisionOf(&a)
		}
	} else {
		*out, err = l.store.Acquire(ctx, l.key(), *known, n, maxWait)
	}
	return err
}

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
// one is known the failure policy applies. The main store gets only part of
// each call's deadline (WithStoreShare), so that the fallback has time left
// to answer; put a circuit breaker in front of it (package breaker) so that
// a store known to be down is not asked at all.
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
		logFailure(ctx, l.logger, l.clock.Now(), "limiter", l.name, err, "")
		return Result{}, err
	}
	if known := l.knownConfig(); l.fallback != nil && known.Rate > 0 {
		local := scaled(known, l.share)
		fb := &Limiter{store: l.fallback, name: l.name, client: l.client, clock: l.clock}
		if n > local.MaxPermits() {
			return Result{Degraded: true}, nil // can never pass the local share: a refusal
		}
		fctx := ctx
		if !errors.Is(ctx.Err(), context.Canceled) {
			// Deciding in the fallback takes no time, and an answer
			// beats a second error: it decides without the deadline,
			// which may have passed while the store was asked, or pass
			// on a loaded machine before the fallback reads it. A caller
			// that cancelled gets its error.
			fctx = context.WithoutCancel(ctx)
		}
		d, ferr := fb.store.Acquire(fctx, fb.key(), local, n, maxWait)
		if ferr == nil {
			logFailure(ctx, l.logger, l.clock.Now(), "limiter", l.name, err, "the fallback store")
			r, werr := fb.wait(ctx, d, n)
			r.Degraded = true
			return r, werr
		}
	}
	if l.policy == FailOpen {
		logFailure(ctx, l.logger, l.clock.Now(), "limiter", l.name, err, "FailOpen")
		return Result{Allowed: true, Degraded: true}, nil
	}
	logFailure(ctx, l.logger, l.clock.Now(), "limiter", l.name, err, "")
	return Result{Degraded: true}, err
}
