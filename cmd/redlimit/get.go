package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redlimit/redlimit"
)

// getCmd is "redlimit get".
var getCmd = &command{
	name:     "get",
	summary:  "print the config and the permits available (--key: a key's, --redisson)",
	synopsis: "NAME [--client ID] [--redisson [--layout current|legacy]]\nNAME --key K",
	wantName: true,
	run:      cmdGet,
	help: `
Prints the stored config and the permits a request could be granted now
(for --client ID in per-client mode). With --redisson it reads a limiter of
Redisson's RRateLimiter instead (same Redis, Redisson's own keys): its
config, permits left and grant log decoded; for a PER_CLIENT limiter, the
state of every client found (a SCAN of its keys), or of each --client ID
(repeatable). A limiter that is not there, or has no config, is an error
(exit status 2).

A keyed policy of the name (set-rate NAME --limit ...) is shown too: its
limits, one a line. With --key K, the key's state on every limit instead,
charging nothing: what remains, when the limit is whole again (reset
after) and, if one permit would be refused now, when it would not be
(retry after).`,
}

// cmdGet is "redlimit get".
func cmdGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var rf redissonFlags
	fs.Var(&rf.clients, "client", "client `ID` whose permits to count in per-client mode (default: a new client; with --redisson: repeatable, default every client found)")
	redisson := fs.Bool("redisson", false, "read a Redisson RRateLimiter (its own keys) instead")
	fs.StringVar(&rf.layout, "layout", "current", "with --redisson: the Redisson layout, `current` or legacy")
	key := fs.String("key", "", "the `key` whose state to print on every limit of a keyed policy")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	if set := given(fs); set["key"] {
		if set["client"] || set["redisson"] || set["layout"] {
			return c.usageError(cmd, "--key cannot be combined with --client, --redisson or --layout (a key is a keyed policy's)")
		}
		return getKey(ctx, c, cmd, &sf, name, *key)
	}
	if *redisson {
		ctx, cancel := sf.bound(ctx, 0)
		defer cancel()
		return getRedisson(ctx, c, cmd, &sf, &rf, name)
	}
	if len(rf.clients) > 1 {
		return c.errorf(cmd, "one --client at a time (several only with --redisson)")
	}
	var opts []redlimit.Option
	if len(rf.clients) == 1 {
		opts = append(opts, redlimit.WithClientID(rf.clients[0]))
	}
	ctx, store, done, err := c.openBounded(ctx, &sf, 0)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	l, err := redlimit.New(store, name, append([]redlimit.Option{redlimit.WithClock(c.clock())}, opts...)...)
	if err != nil {
		return c.fail(cmd, err)
	}
	c.noteMemory(cmd)
	// A keyed policy of the name, shown beside or instead of a limiter.
	var policy []redlimit.Config
	if ps, ok := store.(redlimit.PolicyStore); ok && len(rf.clients) == 0 {
		pc, err := ps.Policy(ctx, name)
		if err != nil && !errors.Is(err, redlimit.ErrNotInitialized) {
			return c.fail(cmd, err)
		}
		policy = pc.Limits
	}
	cfg, err := l.Config(ctx)
	if errors.Is(err, redlimit.ErrNotInitialized) {
		if policy != nil {
			return c.printPolicy(cmd, sf.json, name, policy)
		}
		return c.errorf(cmd, "limiter %q not initialized: run set-rate first", name)
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	avail, err := l.AvailablePermits(ctx)
	if err != nil {
		return c.fail(cmd, err)
	}
	if cfg.Mode == redlimit.PerClient && len(rf.clients) == 0 {
		c.noteFreshClient(cmd, name, l.ClientID())
	}
	if sf.json {
		return c.printJSON(cmd, struct {
			Name      string      `json:"name"`
			Config    configJSON  `json:"config"`
			Available int64       `json:"available"`
			Limits    []limitJSON `json:"limits,omitempty"`
		}{name, toJSON(cfg), avail, limitsJSON(policy)})
	}
	fmt.Fprintf(c.stdout, "name:      %q\nconfig:    %s\navailable: %s\n", name, cfg, plural(avail, "permit"))
	c.printLimits("policy:", limitStrings(policy), nil)
	return exitOK
}

// printPolicy prints a keyed policy's limits.
func (c *cli) printPolicy(cmd *command, asJSON bool, name string, limits []redlimit.Config) int {
	if asJSON {
		return c.printJSON(cmd, struct {
			Name   string      `json:"name"`
			Limits []limitJSON `json:"limits"`
		}{name, limitsJSON(limits)})
	}
	fmt.Fprintf(c.stdout, "name:      %q\n", name)
	c.printLimits("policy:", limitStrings(limits), nil)
	return exitOK
}

// getKey is "get NAME --key K": the key's state on every limit of the
// policy, charging nothing.
func getKey(ctx context.Context, c *cli, cmd *command, sf *storeFlags, name, key string) int {
	ctx, p, done, err := c.openPolicy(ctx, cmd, sf, name, 0, nil)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	res, err := p.Key(key).Status(ctx)
	if errors.Is(err, redlimit.ErrNotInitialized) {
		return c.notPolicy(cmd, name, "")
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, struct {
			Name         string            `json:"name"`
			Key          string            `json:"key"`
			Available    int64             `json:"available"`
			RetryAfterMS int64             `json:"retry_after_ms"`
			Limits       []limitStatusJSON `json:"limits"`
		}{name, key, res.Remaining, res.RetryAfter.Milliseconds(), statusJSON(res.Limits)})
	}
	fmt.Fprintf(c.stdout, "name:      %q\nkey:       %q\navailable: %s", name, key, plural(res.Remaining, "permit"))
	if !res.Allowed && res.RetryAfter > 0 {
		fmt.Fprintf(c.stdout, ", retry after %s", shown(res.RetryAfter))
	}
	fmt.Fprintln(c.stdout)
	c.printStatus(res.Limits)
	return exitOK
}
