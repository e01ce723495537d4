package redlimit

import (
	"errors"
	"fmt"
	"time"
)

// Errors a caller can test for with errors.Is. Every error redlimit returns
// wraps one of these (or a context error) and, where there is one, its cause.
var (
	// ErrInvalidArgument: a name, config, permit count or duration is out of
	// range. Nothing was sent to the store.
	ErrInvalidArgument = errors.New("redlimit: invalid argument")
	// ErrPermitsExceedRate: more permits were asked for than the rate allows in
	// one interval, so they could never be granted. It is also an
	// ErrInvalidArgument.
	ErrPermitsExceedRate = errors.New("redlimit: permits exceed the rate")
	// ErrNotInitialized: the limiter has no config in the store and this client
	// knows none to restore (call TrySetRate or SetRate first).
	ErrNotInitialized = errors.New("redlimit: limiter not initialized")
	// ErrConfigMismatch: TrySetRate found a different config already stored.
	// The error is a *MismatchError naming both.
	ErrConfigMismatch = errors.New("redlimit: a different config is stored")
	// ErrUnavailable: the store could not be reached or did not answer in time.
	ErrUnavailable = errors.New("redlimit: store unavailable")
	// ErrCorrupt: the store holds data under the limiter's keys that redlimit
	// cannot read (written by something else, or of the wrong type).
	ErrCorrupt = errors.New("redlimit: stored data unreadable")
	// ErrDenied: the store refused the credentials or the permission (a wrong
	// password, an ACL without a command or key redlimit needs).
	ErrDenied = errors.New("redlimit: store denied access")

	// ErrRefused: the permits were not granted, by the rules of the limit
	// (a refusal, not a failure: the store answered). TryAcquire and
	// TryAcquireWait report refusals as a Result with Allowed false and a
	// nil error; Acquire, which returns a nil error only with a grant,
	// returns a *RefusalError that matches ErrRefused and one of the two
	// reasons below. An HTTP middleware answers it with 429 Too Many
	// Requests, where ErrUnavailable is a 5xx.
	ErrRefused = errors.New("redlimit: refused")
	// ErrWouldExceedDeadline: Acquire was refused because the store could
	// grant the permits only after the context's deadline (the Result's
	// RetryAfter says when); it returns as soon as that is known instead of
	// sleeping in vain. It matches ErrRefused. It does not
	// match context.DeadlineExceeded: the deadline has not passed and the
	// call did not wait for it; the limit refused, which a caller must be
	// able to tell from a timeout of the store or of its own work.
	ErrWouldExceedDeadline = fmt.Errorf("%w: the permits could be granted only after the context's deadline", ErrRefused)
	// ErrQueueFull: Acquire was refused because a leaky bucket's queue has
	// no room for the permits, however long the caller would wait. It
	// matches ErrRefused.
	ErrQueueFull = fmt.Errorf("%w: the leaky bucket's queue is full", ErrRefused)
	// ErrCircuitOpen: a circuit breaker in front of the store (package breaker)
	// has seen the store fail and answers at once, without calling it, until a
	// probe finds it back. It is also an ErrUnavailable, so the failure policy
	// and the fallback answer it as they answer any outage.
	ErrCircuitOpen error = circuitOpen{}
)

// RefusalError is Acquire's error when the permits were not granted:
// errors.Is matches ErrRefused and its Reason. The Result returned with it
// carries the same RetryAfter.
type RefusalError struct {
	// Reason is ErrWouldExceedDeadline or ErrQueueFull, as the store (or
	// the fallback store, see WithFallback) refused; ErrRefused itself for
	// a fallback refusal of a request larger than its share, and for a
	// refusal by WithMaxWait's bound.
	Reason error
	// RetryAfter is how long until the permits could be granted at once
	// (assuming nobody else takes them first); 0 when unknown.
	RetryAfter time.Duration
}

func (e *RefusalError) Error() string {
	if e.RetryAfter <= 0 {
		return e.Reason.Error()
	}
	return fmt.Sprintf("%v (retry after %v)", e.Reason, e.RetryAfter)
}

// Unwrap returns the Reason, which wraps ErrRefused.
func (e *RefusalError) Unwrap() error { return e.Reason }

// ArgumentError describes a bad argument. errors.Is(err, ErrInvalidArgument)
// holds for every ArgumentError, and errors.Is(err, Kind) for its kind.
type ArgumentError struct {
	Arg    string
	Value  string
	Reason string
	Kind   error // ErrInvalidArgument or a more specific sentinel
}

func (e *ArgumentError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("redlimit: invalid %s: %s", e.Arg, e.Reason)
	}
	return fmt.Sprintf("redlimit: invalid %s %q: %s", e.Arg, e.Value, e.Reason)
}

// Is makes every ArgumentError match ErrInvalidArgument and its Kind.
func (e *ArgumentError) Is(target error) bool {
	return target == ErrInvalidArgument || (e.Kind != nil && target == e.Kind)
}

// MismatchError is returned by TrySetRate when a different config is stored.
type MismatchError struct {
	Stored, Requested Config
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("redlimit: a different config is stored: %s (requested %s)", e.Stored, e.Requested)
}

// Is makes a MismatchError match ErrConfigMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrConfigMismatch }
