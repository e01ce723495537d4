package redlimit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A store that fails, fails for every call: logging each would bury the
// log and slow the service when it can least afford it. So failures are
// logged at most once per failureLogInterval (of the Limiter's or the
// Policy's clock) per logger and kind of line, and the next line of that
// kind says how many were suppressed meanwhile. The kinds are the
// answers given in a store's place (FailOpen, the fallback store), and
// the errors of each ErrorKind a caller is handed.
const failureLogInterval = time.Minute

// maxFailureLogKinds bounds the (logger, kind) pairs remembered; beyond,
// the memory starts afresh (a line or two more, never unbounded memory).
const maxFailureLogKinds = 256

var failureLog = lineBudgets{last: map[lineKind]*lineBudget{}}

type lineBudgets struct {
	mu   sync.Mutex
	last map[lineKind]*lineBudget
}

type lineKind struct {
	lg   *slog.Logger
	kind string
}

type lineBudget struct {
	at         time.Time
	suppressed int64
}

// allow reports whether a line of kind may be written to lg at now, and
// how many such lines were suppressed since the last one written.
func (b *lineBudgets) allow(lg *slog.Logger, kind string, now time.Time) (bool, int64) {
	k := lineKind{lg, kind}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb := b.last[k]
	if lb == nil {
		if len(b.last) >= maxFailureLogKinds {
			clear(b.last)
		}
		b.last[k] = &lineBudget{at: now}
		return true, 0
	}
	if d := now.Sub(lb.at); d >= 0 && d < failureLogInterval {
		lb.suppressed++
		return false, 0
	}
	n := lb.suppressed
	lb.at, lb.suppressed = now, 0
	return true, n
}

// logFailure logs a store failure of the limiter or policy called name
// (what says which): with answer "" the error err handed to the caller,
// at Warn when the store could not be reached and at Error when it
// answered wrongly (ErrCorrupt, ErrDenied, anything unknown); otherwise
// the degraded answer given in the store's place, at Warn. Errors that
// are the caller's (bad arguments, its context, a refusal, a limiter not
// initialized) are not logged: the caller has them. ctx is the call's,
// for handlers that read a trace from it.
func logFailure(ctx context.Context, lg *slog.Logger, now time.Time, what, name string, err error, answer string) {
	kind := ErrorKind(err)
	level := slog.LevelWarn
	switch kind {
	case "unavailable", "circuit_open":
	case "corrupt", "denied", "other":
		level = slog.LevelError
	default:
		return
	}
	if lg == nil {
		lg = slog.Default()
	}
	line := kind
	if answer != "" {
		line, level = "degraded", slog.LevelWarn
	}
	ok, suppressed := failureLog.allow(lg, line, now)
	if !ok {
		return
	}
	args := []any{what, name, "error", err.Error(), "kind", kind}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	msg := "redlimit: store error"
	if answer != "" {
		msg = "redlimit: store unavailable; " + answer + " answered in its place"
	}
	lg.Log(ctx, level, msg, args...)
}
