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
	synopsis: "NAME [--permits N] [--wait D] [--client ID]\n[--rate N --interval D [--algorithm A] [--burst N] [--capacity N] [--mode M]]\nNAME --key K [--permits N] [--wait D] [--limit SPEC]... [--algorithm A]",
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
(default: a new client every run).

With --key K it asks a keyed policy (set-rate NAME --limit ...) for permits
for key K, on every limit: granted only if each grants them, and then
charged to all; a refusal names the limit that refused. --limit SPEC, as
set-rate takes it, passes the policy along with the call: stored if none
is (a stored policy wins).` + algorithmsHelp,
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
	key := fs.String("key", "", "the `key` (a user, an API key, a client IP) to acquire for under a keyed policy")
	var limits limitList
	fs.Var(&limits, "limit", limitFlagHelp+"; with --key, the policy to store if none is")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	if set := given(fs); set["key"] || set["limit"] {
		return acquireKey(ctx, c, cmd, &sf, &cf, name, *key, limits, *permits, *wait)
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
		fmt.Fprintf(c.stdout, "refused %s of %q: %d remaining, retry after %s\n", plural(*permits, "permit"), name, res.Remaining, shown(res.RetryAfter))
	case res.Waited > 0:
		fmt.Fprintf(c.stdout, "granted %s of %q after waiting %s: %d remaining\n", plural(*permits, "permit"), name, shown(res.Waited), res.Remaining)
	default:
		fmt.Fprintf(c.stdout, "granted %s of %q: %d remaining\n", plural(*permits, "permit"), name, res.Remaining)
	}
	return code
}

// acquireKey is "acquire NAME --key K": permits for one key of a keyed
// policy, on every limit.
func acquireKey(ctx context.Context, c *cli, cmd *command, sf *storeFlags, cf *configFlags, name, key string, specs []string, permits int64, wait time.Duration) int {
	set := given(cf.fs)
	switch {
	case !set["key"]:
		return c.usageError(cmd, "--limit needs --key: a policy's limits apply per key (or use --rate for a plain limiter)")
	case set["client"]:
		return c.usageError(cmd, "--key and --client cannot be combined (a key is a policy's, a client a per-client limiter's)")
	case otherConfigFlag(set) != "":
		return c.usageError(cmd, fmt.Sprintf("--key and --%s cannot be combined: a policy's limits are given with --limit %s", otherConfigFlag(set), limitSyntax))
	case set["algorithm"] && !set["limit"]:
		return c.usageError(cmd, "--algorithm with --key is the default algorithm of --limit: give --limit too")
	case wait < 0:
		return c.errorf(cmd, "invalid --wait %s: must not be negative", wait)
	}
	var requested []redlimit.Config
	if len(specs) > 0 {
		var err error
		if requested, err = parseLimits(specs, cf.algorithm, set["algorithm"]); err != nil {
			return c.fail(cmd, err)
		}
	}
	ctx, p, done, err := c.openPolicy(ctx, cmd, sf, name, wait, requested)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	k := p.Key(key)
	var res redlimit.Result
	if wait > 0 {
		res, err = k.TryAcquireWait(ctx, permits, wait)
	} else {
		res, err = k.TryAcquire(ctx, permits)
	}
	if errors.Is(err, redlimit.ErrNotInitialized) {
		return c.notPolicy(cmd, name, ", or pass --limit")
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	// The limits in force, when they are not those asked for.
	if requested != nil && len(res.Limits) > 0 {
		inForce := make([]redlimit.Config, len(res.Limits))
		for i, l := range res.Limits {
			inForce[i] = l.Config
		}
		if limitNames(inForce) != limitNames(requested) {
			c.note(cmd, "stored policy %s is in force; --limit %s not applied; use set-rate to change it", limitNames(inForce), limitNames(requested))
		}
	}
	code := exitOK
	if !res.Allowed {
		code = exitRefused
	}
	if sf.json {
		out := struct {
			Name         string            `json:"name"`
			Key          string            `json:"key"`
			Permits      int64             `json:"permits"`
			Allowed      bool              `json:"allowed"`
			Remaining    int64             `json:"remaining"`
			RetryAfterMS int64             `json:"retry_after_ms"`
			WaitedMS     int64             `json:"waited_ms"`
			At           string            `json:"at,omitempty"`
			RefusedBy    string            `json:"refused_by,omitempty"`
			Limits       []limitStatusJSON `json:"limits"`
		}{Name: name, Key: key, Permits: permits, Allowed: res.Allowed, Remaining: res.Remaining,
			RetryAfterMS: res.RetryAfter.Milliseconds(), WaitedMS: res.Waited.Milliseconds(), Limits: statusJSON(res.Limits)}
		if res.Allowed {
			out.At = res.At.UTC().Format(time.RFC3339Nano)
		}
		if l, ok := res.RefusedBy(); ok {
			out.RefusedBy = l.Name
		}
		if c.printJSON(cmd, out) != exitOK {
			return exitError
		}
		return code
	}
	what := fmt.Sprintf("%s of %q for key %q", plural(permits, "permit"), name, key)
	switch {
	case !res.Allowed:
		by := ""
		if l, ok := res.RefusedBy(); ok && len(res.Limits) > 1 {
			by = " (limit " + l.Name + ")"
		}
		fmt.Fprintf(c.stdout, "refused %s: %d remaining, retry after %s%s\n", what, res.Remaining, shown(res.RetryAfter), by)
	case res.Waited > 0:
		fmt.Fprintf(c.stdout, "granted %s after waiting %s: %d remaining\n", what, shown(res.Waited), res.Remaining)
	default:
		fmt.Fprintf(c.stdout, "granted %s: %d remaining\n", what, res.Remaining)
	}
	return code
}
