package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redlimit/redlimit/redissonstore"
	"github.com/redlimit/redlimit/redisstore"
)

// redissonFlags select a Redisson limiter: the layout of the Redisson the
// Java side runs, and its PER_CLIENT clients to show or carry.
type redissonFlags struct {
	layout  string
	clients clientList
}

type clientList []string

func (l *clientList) String() string     { return fmt.Sprint(*l) }
func (l *clientList) Set(v string) error { *l = append(*l, v); return nil }

// openRedisson opens the Redis of sf as Redisson sees it, with no key prefix
// (Redisson uses none), and the native store on the same client.
func (c *cli) openRedisson(sf *storeFlags, rf *redissonFlags) (*redissonstore.Store, *redisstore.Store, func(), error) {
	if sf.redisURL == "" {
		return nil, nil, nil, errors.New("Redisson limiters live in Redis: give --redis URL (or $REDIS_URL)")
	}
	layout, err := redissonstore.ParseLayout(rf.layout)
	if err != nil {
		return nil, nil, nil, err
	}
	rdb, err := newRedisClient(sf.redisURL)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := []redissonstore.Option{redissonstore.WithLayout(layout)}
	if c.deps.Clock != nil {
		opts = append(opts, redissonstore.WithClock(c.deps.Clock))
	}
	rs, err := redissonstore.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	nopts := []redisstore.Option{redisstore.WithPrefix(sf.prefix)}
	if c.deps.Clock != nil {
		nopts = append(nopts, redisstore.WithClock(c.deps.Clock))
	}
	native, err := redisstore.New(rdb, nopts...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	return rs, native, func() { _ = rdb.Close() }, nil
}

// getRedisson is "redlimit get NAME --redisson": a Redisson limiter's
// config, permits left and grant log, decoded.
func getRedisson(ctx context.Context, c *cli, cmd *command, sf *storeFlags, rf *redissonFlags, name string) int {
	rs, _, closeStore, err := c.openRedisson(sf, rf)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	in, err := rs.Inspect(ctx, name, rf.clients...)
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, in)
	}
	fmt.Fprint(c.stdout, in.String())
	return exitOK
}

// cmdMigrate is "redlimit migrate": a Redisson limiter becomes a native one
// with the same config and the permits still in use.
func cmdMigrate(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	var rf redissonFlags
	fs := c.flagSet(cmd, &sf)
	fs.StringVar(&rf.layout, "layout", "current", "the Redisson layout: `current` (Bc0I members) or legacy (fI)")
	fs.Var(&rf.clients, "client", "a PER_CLIENT client `ID` to carry over (repeatable; default: every client found)")
	name, ok := c.parse(fs, cmd, args)
	if !ok {
		return exitError
	}
	rs, native, closeStore, err := c.openRedisson(&sf, &rf)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	m, err := rs.Migrate(ctx, name, native, rf.clients...)
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, m)
	}
	fmt.Fprintf(c.stdout, "migrated %q: %+v\n", name, m)
	return exitOK
}
