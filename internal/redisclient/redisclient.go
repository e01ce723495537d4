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
// A ClusterClient also resends a command after a broken connection or a
// network timeout within MaxRedirects, the budget that follows MOVED and
// ASK: a caller's -1 becomes 0 (none), a caller's 0 the default 3. Those
// resends count too. The stores follow MOVED and ASK themselves
// (Redirecting), so a Cluster client for them has MaxRedirects -1.
func Retries(c redis.UniversalClient) (n int, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		return max(c.Options().MaxRetries, 0), true
	case *redis.ClusterClient:
		o := c.Options()
		return max(o.MaxRetries, 0) + max(o.MaxRedirects, 0), true
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
	if cc, ok := c.(*redis.ClusterClient); ok {
		o := cc.Options()
		return &redlimit.ArgumentError{
			Arg:    "redis client",
			Value:  fmt.Sprintf("%T with MaxRetries %d, MaxRedirects %d", c, max(o.MaxRetries, 0), o.MaxRedirects),
			Reason: "resends commands after a lost reply, which can grant the same permits twice; set MaxRetries: -1 and MaxRedirects: -1 in its options (0 means go-redis's default of 3; the store follows MOVED and ASK itself), or pass " + option + " to accept the risk",
			Kind:   ErrUnsafe,
		}
	}
	return &redlimit.ArgumentError{
		Arg:    "redis client",
		Value:  fmt.Sprintf("%T with MaxRetries %d", c, n),
		Reason: "retries commands, which can grant the same permits twice when a reply is lost; set MaxRetries: -1 in its options (0 means go-redis's default of 3 retries), or pass " + option + " to accept the risk",
		Kind:   ErrUnsafe,
	}
}
