// Package redlimit is a rate limiter whose limits can live in Redis, so that
// every instance of a service shares one limit: Redisson's RRateLimiter for
// Go, with its known defects fixed.
//
// Open a Limiter by name on a Store (memstore for one process, redisstore for
// many), set its config once, then ask for permits:
//
//	l, _ := redlimit.New(store, "api", redlimit.WithConfig(redlimit.PerSecond(100)))
//	r, err := l.TryAcquire(ctx, 1) // r.Allowed, r.Remaining, r.RetryAfter
//
// The config is stored with the limiter, so SetRate reaches every client at
// once; WithConfig makes a client restore it if the store lost it.
//
// Every call takes a context. TryAcquire and TryAcquireWait report a refusal
// as a Result, not an error; Acquire returns a nil error if and only if it
// granted (a refusal is a *RefusalError: ErrRefused, with ErrWouldExceedDeadline
// or ErrQueueFull). Errors are typed (ErrInvalidArgument, ErrPermitsExceedRate,
// ErrNotInitialized, ErrConfigMismatch, ErrUnavailable, ErrCorrupt) and wrap
// their cause.
//
// Acquire and TryAcquireWait wait in line on redlimit's own stores
// (memstore, redisstore): one round trip reserves the next free instant
// after everyone already waiting, the call sleeps until then, and a caller
// that gives up hands its reservation back. The store in Redisson's layout
// (redissonstore, to share limits with Java) waits the way Redisson does.
package redlimit
