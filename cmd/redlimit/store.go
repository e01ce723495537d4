package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

func (c *cli) getenv(key string) string {
	if c.deps.LookupEnv == nil {
		return ""
	}
	v, _ := c.deps.LookupEnv(key)
	return v
}

func (c *cli) clock() clock.Clock {
	if c.deps.Clock != nil {
		return c.deps.Clock
	}
	return clock.Real
}

// openStore opens the store sf names and returns it with the function that
// closes it.
func (c *cli) openStore(sf *storeFlags) (redlimit.Store, func(), error) {
	if sf.redisURL == "" {
		if c.deps.MemStore != nil {
			return c.deps.MemStore, func() {}, nil
		}
		var opts []memstore.Option
		if c.deps.Clock != nil {
			opts = append(opts, memstore.WithTimeSource(c.deps.Clock))
		}
		c.freshMemory = true
		return memstore.New(opts...), func() {}, nil
	}
	rdb, err := c.newRedisClient(sf)
	if err != nil {
		return nil, nil, err
	}
	opts := []redisstore.Option{redisstore.WithPrefix(sf.prefix)}
	if c.deps.Clock != nil {
		opts = append(opts, redisstore.WithTimeSource(c.deps.Clock))
	}
	s, err := redisstore.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return s, func() {
		_ = s.Close() // its policy subscription, before the client
		_ = rdb.Close()
	}, nil
}

// openLimiter opens, for cmd, the store sf names and the limiter name on
// it, on the command's clock, and bounds ctx by --timeout plus extra (see
// bound), which covers dialing as well as the calls. On a memory store made
// for this run it notes that the limiter lives for this command only. done
// closes the store and ends the bounded context.
func (c *cli) openLimiter(ctx context.Context, cmd *command, sf *storeFlags, name string, extra time.Duration, opts ...redlimit.Option) (bounded context.Context, l *redlimit.Limiter, done func(), err error) {
	bounded, store, done, err := c.openBounded(ctx, sf, extra)
	if err != nil {
		return nil, nil, nil, err
	}
	l, err = redlimit.New(store, name, append([]redlimit.Option{redlimit.WithClock(c.clock())}, opts...)...)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	c.noteMemory(cmd)
	return bounded, l, done, nil
}

// openBounded opens the store sf names and bounds ctx as openLimiter does;
// done closes the store and ends the bounded context.
func (c *cli) openBounded(ctx context.Context, sf *storeFlags, extra time.Duration) (bounded context.Context, store redlimit.Store, done func(), err error) {
	bounded, cancel := sf.bound(ctx, extra)
	store, closeStore, err := c.openStore(sf)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return bounded, store, func() { closeStore(); cancel() }, nil
}

// storeNow reads the time of store's clock, which the Results' At are in:
// Redis keeps its own time (TIME) unless the store was given a clock.
func (c *cli) storeNow(ctx context.Context, store redlimit.Store) (time.Time, error) {
	if rs, ok := store.(*redisstore.Store); ok && c.deps.Clock == nil {
		t, err := rs.Client().Time(ctx).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %w", redlimit.ErrUnavailable, err)
		}
		return t, nil
	}
	return c.clock().Now(), nil
}

// newRedisClient opens the Redis that sf names: one server, a Sentinel set
// (redis+sentinel://) or a Cluster (redis+cluster://), with --timeout as
// the client's dial, read and write timeouts (where the URL does not set
// its own). It notes the URL and the timeout for fail's messages.
func (c *cli) newRedisClient(sf *storeFlags) (redis.UniversalClient, error) {
	if !strings.Contains(sf.redisURL, "://") {
		return nil, noScheme(sf.redisURL)
	}
	c.redis = sf
	return redisstore.OpenURL(withTimeouts(sf.redisURL, sf.timeout))
}

// urlTimeouts are the go-redis URL parameters --timeout sets.
var urlTimeouts = []string{"dial_timeout", "read_timeout", "write_timeout"}

// withTimeouts adds d as each of urlTimeouts to the query of rawURL where
// it does not set them itself. The go-redis parsers read them for one
// server, Sentinel and Cluster alike: a TLS handshake, which no context
// bounds, is bounded by the dial timeout. A query that does not parse is
// left for OpenURL to report.
func withTimeouts(rawURL string, d time.Duration) string {
	_, query, _ := strings.Cut(rawURL, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return rawURL
	}
	var add []string
	for _, p := range urlTimeouts {
		if !q.Has(p) {
			add = append(add, p+"="+d.String())
		}
	}
	if len(add) == 0 {
		return rawURL
	}
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
		if strings.HasSuffix(rawURL, "?") || strings.HasSuffix(rawURL, "&") {
			sep = ""
		}
	}
	return rawURL + sep + strings.Join(add, "&")
}

// noScheme is the error for a --redis without a scheme: "localhost:6379"
// is shown as the URL it likely means (unless it holds an @, a password
// maybe, which is not echoed).
func noScheme(rawURL string) error {
	example := "redis://host:6379"
	if rawURL != "" && !strings.ContainsAny(rawURL, "@/?# ") {
		example = "redis://" + rawURL
	}
	return fmt.Errorf("--redis (or $REDIS_URL) takes a URL: %s (rediss:// for TLS, redis+sentinel://, redis+cluster://)", example)
}

// bound returns ctx bounded by --timeout plus extra for a command that
// talks to Redis, and ctx as it is for the memory store (which cannot hang).
func (sf *storeFlags) bound(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	if sf.redisURL == "" {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, sf.timeout+extra)
}
