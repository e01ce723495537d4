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
	summary:  "print the config and the permits available (--redisson: a Redisson limiter)",
	synopsis: "NAME [--client ID] [--redisson [--layout current|legacy]]",
	wantName: true,
	run:      cmdGet,
	help: `
Prints the stored config and the permits a request could be granted now
(for --client ID in per-client mode). With --redisson it reads a limiter of
Redisson's RRateLimiter instead (same Redis, Redisson's own keys): its
config, permits left and grant log decoded; for a PER_CLIENT limiter, the
state of every client found (a SCAN of its keys), or of each --client ID
(repeatable). A limiter that is not there, or has no config, is an error
(exit status 2).`,
}

// cmdGet is "redlimit get".
func cmdGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var rf redissonFlags
	fs.Var(&rf.clients, "client", "client `ID` whose permits to count in per-client mode (default: a new client; with --redisson: repeatable, default every client found)")
	redisson := fs.Bool("redisson", false, "read a Redisson RRateLimiter (its own keys) instead")
	fs.StringVar(&rf.layout, "layout", "current", "with --redisson: the Redisson layout, `current` or legacy")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
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
	ctx, l, done, err := c.openLimiter(ctx, cmd, &sf, name, 0, opts...)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	cfg, err := l.Config(ctx)
	if errors.Is(err, redlimit.ErrNotInitialized) {
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
			Name      string     `json:"name"`
			Config    configJSON `json:"config"`
			Available int64      `json:"available"`
		}{name, toJSON(cfg), avail})
	}
	fmt.Fprintf(c.stdout, "name:      %q\nconfig:    %s\navailable: %s\n", name, cfg, plural(avail, "permit"))
	return exitOK
}
