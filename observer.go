package redlimit

import (
	"context"
	"errors"
	"time"
)

// Observer is told about every call of a Limiter or a Policy given it
// with WithObserver: the hook that metrics and tracing adapters implement
// (packages github.com/redlimit/redlimit/prometheus and .../otel), as
// go-redis hooks do for Redis commands. Observe runs on the caller's
// goroutine after the call has its answer, so it must be quick and safe
// for concurrent use; it must not keep e.Limits (the caller's Result owns
// it). Without an Observer the calls pay nothing for the hook.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc lets an ordinary function be an Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Op names the kind of call an Event reports.
type Op uint8

const (
	// OpAcquire: TryAcquire, TryAcquireWait or Acquire.
	OpAcquire Op = iota + 1
	// OpRelease: Release.
	OpRelease
	// OpStatus: AvailablePermits, or a Policy key's Status.
	OpStatus
	// OpSet: SetRate, TrySetRate, SetLimits or TrySetLimits.
	OpSet
)

var opNames = [...]string{OpAcquire: "acquire", OpRelease: "release", OpStatus: "status", OpSet: "set"}

// String names the op as metrics label it: "acquire", "release", "status"
// or "set".
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown"
}

// Outcome is how a call ended.
type Outcome uint8

const (
	// OutcomeGranted: an acquire was granted (or another call succeeded).
	OutcomeGranted Outcome = iota + 1
	// OutcomeRefused: an acquire was refused by the limits (Acquire's
	// *RefusalError counts here, not as an error).
	OutcomeRefused
	// OutcomeError: the call returned an error (Event.Err).
	OutcomeError
)

var outcomeNames = [...]string{OutcomeGranted: "granted", OutcomeRefused: "refused", OutcomeError: "error"}

// String names the outcome as metrics label it: "granted", "refused" or
// "error".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event is one observed call.
type Event struct {
	// Op is the kind of call.
	Op Op
	// Outcome is how it ended.
	Outcome Outcome
	// Degraded: the store could not be reached and the failure policy or
	// the fallback store answered (Result.Degraded).
	Degraded bool
	// Cached: a refusal cache in front of the store answered, without
	// asking the store (Decision.Cached).
	Cached bool
	// Err is the call's error when Outcome is OutcomeError, and ErrKind
	// its kind (ErrorKind).
	Err     error
	ErrKind string
	// Name is the Limiter's or the Policy's name; Policy tells which.
	Name   string
	Policy bool
	// Key is a Policy call's key, or a Limiter's client ID. It is for
	// exemplars and traces: a metric label per key would have no bound.
	Key string
	// Config is a Limiter's config as last known after the call (zero
	// when none is); Limits is a Policy's acquire or status answer, one
	// entry per limit (the Result's own slice: read it, do not keep it).
	Config Config
	Limits []LimitStatus
	// Permits is the permits asked for (acquire) or to hand back (release).
	Permits int64
	// Start is when the call began, by the Limiter's or Policy's clock.
	Start time.Time
	// StoreLatency is the time the call spent asking the store (and the
	// fallback, when one answered): its whole duration less the time it
	// slept for its turn (Waited). A call whose context ended while it
	// slept has no Waited: its StoreLatency is its whole duration.
	StoreLatency time.Duration
	// Waited is how long an acquire slept for its turn.
	Waited time.Duration
}

// Limit returns the name (LimitName) and algorithm of the limit that
// decided: for a refusal the one that refused, for a grant the one with
// the fewest permits left (the first such); a Limiter's only limit. Empty
// when no config is known.
func (e *Event) Limit() (string, Algorithm) {
	if !e.Policy {
		if e.Config.Rate == 0 {
			return "", ""
		}
		return LimitName(e.Config), e.Config.Algorithm
	}
	best := -1
	for i := range e.Limits {
		if e.Limits[i].Refused {
			best = i
			break
		}
		if best < 0 || e.Limits[i].Remaining < e.Limits[best].Remaining {
			best = i
		}
	}
	if best < 0 {
		return "", ""
	}
	return e.Limits[best].Name, e.Limits[best].Config.Algorithm
}

// ErrorKind names err's kind for metrics and logs, from a short fixed
// list: "circuit_open", "unavailable", "corrupt", "denied",
// "not_initialized", "config_mismatch", "invalid_argument", "refused",
// "canceled", "deadline_exceeded", or "other"; "" for nil.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ErrDenied):
		return "denied"
	case errors.Is(err, ErrNotInitialized):
		return "not_initialized"
	case errors.Is(err, ErrConfigMismatch):
		return "config_mismatch"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, ErrRefused):
		return "refused"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return "other"
}

// WithObserver makes the Limiter (or the Policy) tell o about each of its
// calls. Several WithObserver options all observe.
func WithObserver(o Observer) Option {
	return func(l *Limiter) error {
		if o == nil {
			return &ArgumentError{Arg: "observer", Reason: "must not be nil", Kind: ErrInvalidArgument}
		}
		if l.obs == nil {
			l.obs = o
		} else {
			l.obs = observers{l.obs, o}
		}
		return nil
	}
}

// observers tells each of several Observers in turn.
type observers []Observer

func (os observers) Observe(ctx context.Context, e Event) {
	for _, o := range os {
		o.Observe(ctx, e)
	}
}

// event fills the parts of an Event every call has, from its answer.
func event(op Op, start time.Time, now time.Time, n int64, r *Result, err error) Event {
	e := Event{Op: op, Outcome: OutcomeGranted, Permits: n, Start: start, Degraded: r.Degraded, Cached: r.cached, Waited: r.Waited}
	e.StoreLatency = max(0, now.Sub(start)-r.Waited)
	switch {
	case err != nil && errors.Is(err, ErrRefused):
		e.Outcome = OutcomeRefused
	case err != nil:
		e.Outcome, e.Err, e.ErrKind = OutcomeError, err, ErrorKind(err)
	case op == OpAcquire && !r.Allowed:
		e.Outcome = OutcomeRefused
	}
	return e
}

// observe reports a Limiter call that began at start.
func (l *Limiter) observe(ctx context.Context, op Op, start time.Time, n int64, r *Result, err error) {
	e := event(op, start, l.clock.Now(), n, r, err)
	e.Name, e.Key, e.Config = l.name, l.client, l.knownConfig()
	l.obs.Observe(ctx, e)
}

// observedAcquire is acquire (Acquire's, when must) reported to the
// Observer.
func (l *Limiter) observedAcquire(ctx context.Context, n int64, maxWait time.Duration, must bool) (Result, error) {
	start := l.clock.Now()
	var r Result
	var err error
	if must {
		r, err = l.mustAcquire(ctx, n)
	} else {
		r, err = l.acquire(ctx, n, maxWait, false)
	}
	l.observe(ctx, OpAcquire, start, n, &r, err)
	return r, err
}

// observe reports a Policy call that began at start.
func (p *Policy) observe(ctx context.Context, op Op, key string, start time.Time, n int64, r *Result, err error) {
	e := event(op, start, p.clock.Now(), n, r, err)
	e.Name, e.Policy, e.Key, e.Limits = p.name, true, key, r.Limits
	p.obs.Observe(ctx, e)
}

// observeErr reports a Limiter call that answers no Result (deferred).
func (l *Limiter) observeErr(ctx context.Context, op Op, start time.Time, n int64, err *error) {
	l.observe(ctx, op, start, n, &Result{}, *err)
}

// observedAcquire is acquire reported to the Observer.
func (k Keyed) observedAcquire(ctx context.Context, n int64, maxWait time.Duration) (Result, error) {
	start := k.p.clock.Now()
	r, err := k.acquire(ctx, n, maxWait)
	k.p.observe(ctx, OpAcquire, k.key, start, n, &r, err)
	return r, err
}

// observeResult reports a Policy call that began at start (deferred).
func (p *Policy) observeResult(ctx context.Context, op Op, key string, start time.Time, n int64, r *Result, err *error) {
	p.observe(ctx, op, key, start, n, r, *err)
}
