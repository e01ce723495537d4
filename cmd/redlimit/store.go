package main

import (
	"context"
	"fmt"
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
			opts = append(opts, memstore.WithClock(c.deps.Clock))
		}
		return memstore.New(opts...), func() {}, nil
	}
	rdb, err := newRedisClient(sf.redisURL)
	if err != nil {
		return nil, nil, err
	}
	opts := []redisstore.Option{redisstore.WithPrefix(sf.prefix)}
	if c.deps.Clock != nil {
		opts = append(opts, redisstore.WithClock(c.deps.Clock))
	}
	s, err := redisstore.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return s, func() { _ = rdb.Close() }, nil
}

// openLimiter opens the store sf names and the limiter name on it, on the
// command's clock; the returned function closes the store.
func (c *cli) openLimiter(sf *storeFlags, name string, opts ...redlimit.Option) (*redlimit.Limiter, func(), error) {
	store, closeStore, err := c.openStore(sf)
	if err != nil {
		return nil, nil, err
	}
	l, err := redlimit.New(store, name, append([]redlimit.Option{redlimit.WithClock(c.clock())}, opts...)...)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return l, closeStore, nil
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

// newRedisClient opens the Redis that url names: one server, a Sentinel set
// (redis+sentinel://) or a Cluster (redis+cluster://).
func newRedisClient(url string) (redis.UniversalClient, error) {
	return redisstore.OpenURL(url)
}
