package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
)

// acquireCmd is "redlimit acquire".
var acquireCmd = &command{
	name:     "acquire",
	summary:  "take permits now, or waiting at most --wait; exit status 0 granted, 1 refused",
	synopsis: "NAME [--permits N] [--wait D] [--client ID]\n[--rate N --interval D [--algorithm A] [--burst N] [--capacity N] [--mode M]]",
	wantName: true,
	run:      cmdAcquire,
	help: `
Asks for permits: at once (TryAcquire) or, with --wait D, waiting at most D
for them (TryAcquireWait). Exit status 0 granted, 1 refused, 2 error.
The config flags (--rate with --interval or --per, and --algorithm, --burst,
--capacity, --mode) pass the config along with the call (WithConfig): if no
config is stored the limiter is created with it on first use (a stored
config wins). The memory store lives only as long as the command, so there
they are needed. --client names this client's own limit in per-client mode
(default: a new client every run).` + algorithmsHelp,
}

// cmdAcquire is "redlimit acquire".
func cmdAcquire(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var cf configFlags
	cf.register(fs, "permits per interval: create the limiter with this config if none is stored (with --interval)")
	permits := fs.Int64("permits", 1, "`number` of permits to acquire")
	wait := fs.Duration("wait", 0, "wait at most this `duration` for the permits (0: refuse at once)")
	client := fs.String("client", "", "client `ID`: selects this client's limit in per-client mode (default: a new client)")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	var (
		opts      []redlimit.Option
		requested *redlimit.Config // the config flags', if given
	)
	set := given(fs)
	withConfig := false
	for _, f := range configFlagNames {
		withConfig = withConfig || set[f]
	}
	if withConfig {
		hasInterval, err := cf.resolveInterval()
		if err != nil {
			return c.usageError(cmd, err.Error())
		}
		if !set["rate"] || !hasInterval {
			return c.usageError(cmd, "--rate and --interval go together (or --rate and --per; the other config flags need them)")
		}
		cfg, err := cf.config()
		if err != nil {
			return c.fail(cmd, err)
		}
		requested = &cfg
		opts = append(opts, redlimit.WithConfig(cfg))
	}
	if set["client"] {
		opts = append(opts, redlimit.WithClientID(*client))
	}
	if *wait < 0 {
		return c.errorf(cmd, "invalid --wait %s: must not be negative", *wait)
	}
	// Waiting for the permits is part of the call.
	ctx, l, done, err := c.openLimiter(ctx, cmd, &sf, name, *wait, opts...)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()

	var res redlimit.Result
	if *wait > 0 {
		res, err = l.TryAcquireWait(ctx, *permits, *wait)
	} else {
		res, err = l.TryAcquire(ctx, *permits)
	}
	if errors.Is(err, redlimit.ErrNotInitialized) {
		return c.errorf(cmd, "limiter %q not initialized: run set-rate first, or pass --rate and --interval", name)
	}
	if err != nil {
		return c.fail(cmd, err)
	}

	code = exitOK
	if !res.Allowed {
		code = exitRefused
	}
	// What the flags do not show: the config in force, when it is not the
	// one asked for, and the client acquired as, when it is a fresh one.
	var freshClient string
	if inForce, err := l.Config(ctx); err == nil {
		if requested != nil && !inForce.SameLimit(*requested) {
			var flags []string
			for _, f := range configFlagNames {
				if set[f] {
					flags = append(flags, "--"+f+" "+fs.Lookup(f).Value.String())
				}
			}
			verb := "was"
			if len(flags) > 1 {
				verb = "were"
			}
			c.note(cmd, "stored config %s is in force; %s %s not applied; use set-rate to change it", inForce, strings.Join(flags, " "), verb)
		}
		if inForce.Mode == redlimit.PerClient && !set["client"] {
			freshClient = l.ClientID()
			c.noteFreshClient(cmd, name, freshClient)
		}
	}
	if sf.json {
		out := struct {
			Name         string `json:"name"`
			Permits      int64  `json:"permits"`
			Allowed      bool   `json:"allowed"`
			Remaining    int64  `json:"remaining"`
			RetryAfterMS int64  `json:"retry_after_ms"`
			WaitedMS     int64  `json:"waited_ms"`
			At           string `json:"at,omitempty"`
			// Client is the fresh client ID a per-client limiter was
			// acquired from without --client.
			Client string `json:"client,omitempty"`
		}{Name: name, Permits: *permits, Allowed: res.Allowed, Remaining: res.Remaining,
			RetryAfterMS: res.RetryAfter.Milliseconds(), WaitedMS: res.Waited.Milliseconds(), Client: freshClient}
		if res.Allowed {
			out.At = res.At.UTC().Format(time.RFC3339Nano)
		}
		if c.printJSON(cmd, out) != exitOK {
			return exitError
		}
		return code
	}
	switch {
	case !res.Allowed:
		fmt.Fprintf(c.stdout, "refused %s of %q: %d remaining, retry after %s\n", plural(*permits, "permit"), name, res.Remaining, res.RetryAfter)
	case res.Waited > 0:
		fmt.Fprintf(c.stdout, "granted %s of %q after waiting %s: %d remaining\n", plural(*permits, "permit"), name, res.Waited, res.Remaining)
	default:
		fmt.Fprintf(c.stdout, "granted %s of %q: %d remaining\n", plural(*permits, "permit"), name, res.Remaining)
	}
	return code
}
