// Package redisclient holds what the Redis stores (redisstore and
// redissonstore) check about the go-redis client they are given.
package redisclient

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// ErrUnsafe: the client resends a command after a network error or a
// timeout. A limiter script whose reply was lost may have run, so a resent
// one can grant the same permits twice. Stores re-export it
// (redisstore.ErrUnsafeClient).
var ErrUnsafe = errors.New("redlimit: the redis client retries commands")

// Retries reports how many times c may resend a command (0: never), for
// the go-redis clients whose options say it: *redis.Client (also what
// NewFailoverClient returns), *redis.ClusterClient and *redis.Ring. Options
// are read after go-redis filled in its defaults, where MaxRetries 0 means
// none (a caller's -1) and a caller's 0 became the default 3 (Client,
// Ring); a ClusterClient's MaxRetries default is none. ok is false for any
// other implementation of redis.UniversalClient, which cannot be inspected.
//
// Not counted: a ClusterClient also resends a command after a broken
// connection or a network timeout within MaxRedirects (default 3), the
// budget that follows MOVED and ASK, which a Cluster cannot do without.
// No option turns the one off and keeps the other, so that gap is
// documented (README, SECURITY.md) rather than refused here.
func Retries(c redis.UniversalClient) (n int, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		return max(c.Options().MaxRetries, 0), true
	case *redis.ClusterClient:
		return max(c.Options().MaxRetries, 0), true
	case *redis.Ring:
		return max(c.Options().MaxRetries, 0), true
	}
	return 0, false
}

// Check returns an error matching ErrUnsafe and redlimit.ErrInvalidArgument
// when c retries commands, saying how to fix it; nil when it does not or
// cannot be inspected. option names the store's opt-out.
func Check(c redis.UniversalClient, option string) error {
	n, ok := Retries(c)
	if !ok || n == 0 {
		return nil
	}
	return &redlimit.ArgumentError{
		Arg:    "redis client",
		Value:  fmt.Sprintf("%T with MaxRetries %d", c, n),
		Reason: "retries commands, which can grant the same permits twice when a reply is lost; set MaxRetries: -1 in its options (0 means go-redis's default of 3 retries), or pass " + option + " to accept the risk",
		Kind:   ErrUnsafe,
	}
}
