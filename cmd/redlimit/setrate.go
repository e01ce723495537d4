package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redlimit/redlimit"
)

// setRateCmd is "redlimit set-rate".
var setRateCmd = &command{
	name:     "set-rate",
	summary:  "store a limiter's config, or a keyed policy's limits (--limit)",
	synopsis: "NAME --rate N (--interval D | --per UNIT) [--algorithm A] [--burst N] [--capacity N]\n[--mode overall|per-client] [--reset] [--try]\nNAME --limit SPEC... [--algorithm A] [--reset] [--try]",
	wantName: true,
	run:      cmdSetRate,
	help: `
Stores the limiter's config for every client and prints it. By default
(SetRate) the permits already granted still count under the new config
(unless the algorithm changes: another algorithm's state means nothing, so
it starts afresh); --reset starts from nothing. --try (TrySetRate) writes
only where no config is stored: it reports whether it did, and a different
stored config is an error.

With --limit it stores a keyed policy instead (NewPolicy, SetLimits): one
rule applied per key (acquire --key K), one --limit per limit, each
RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N] ("10/1s", "1000/1h",
"10/1s,algorithm=token-bucket,burst=20"); the algorithm defaults to
--algorithm. A request is granted only if every limit grants it.
--limit replaces --rate, --interval, --per, --burst, --capacity and --mode.` + algorithmsHelp,
}

// cmdSetRate is "redlimit set-rate".
func cmdSetRate(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var cf configFlags
	cf.register(fs, "permits per interval (required)")
	var limits limitList
	fs.Var(&limits, "limit", limitFlagHelp)
	reset := fs.Bool("reset", false, "start afresh: the permits already granted no longer count")
	try := fs.Bool("try", false, "TrySetRate: store the config only if none is stored")
	name, code, ok := c.parse(fs, cmd, args)
	if !ok {
		return code
	}
	set := given(fs)
	if *reset && *try {
		return c.usageError(cmd, "--reset and --try cannot be combined (--try never changes a stored config)")
	}
	if set["limit"] {
		if f := otherConfigFlag(set); f != "" {
			return c.usageError(cmd, fmt.Sprintf("--limit and --%s cannot be combined: each --limit is one whole limit, %s", f, limitSyntax))
		}
		return setPolicy(ctx, c, cmd, &sf, &cf, name, limits, *reset, *try)
	}
	hasInterval, err := cf.resolveInterval()
	if err != nil {
		return c.usageError(cmd, err.Error())
	}
	if !set["rate"] || !hasInterval {
		return c.usageError(cmd, "--rate and --interval are required (or --per instead of --interval), or --limit for a keyed policy")
	}
	cfg, err := cf.config()
	if err != nil {
		return c.fail(cmd, err)
	}
	ctx, l, done, err := c.openLimiter(ctx, cmd, &sf, name, 0)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()

	// The config before, to tell a reset apart: a new algorithm starts
	// afresh even without --reset.
	before, err := l.Config(ctx)
	existed := err == nil
	if err != nil && !errors.Is(err, redlimit.ErrNotInitialized) {
		return c.fail(cmd, err)
	}

	written := true
	if *try {
		written, err = l.TrySetRate(ctx, cfg)
	} else {
		var opts []redlimit.SetOption
		if *reset {
			opts = append(opts, redlimit.ResetState())
		}
		err = l.SetRate(ctx, cfg, opts...)
	}
	var mismatch *redlimit.MismatchError
	if errors.As(err, &mismatch) && sf.json {
		// Still one JSON object, saying what is stored and what was asked
		// for; the error is on stderr and the exit status 2 as ever.
		out := setRateJSON{Name: name, Config: toJSON(mismatch.Stored), Mismatch: true, Error: strings.TrimPrefix(err.Error(), "redlimit: ")}
		requested := toJSON(mismatch.Requested)
		out.Requested = &requested
		if code := c.printJSON(cmd, out); code != exitOK {
			return code
		}
		return c.fail(cmd, err)
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	stored, err := l.Config(ctx)
	if err != nil {
		return c.fail(cmd, err)
	}
	// Another epoch: the permits granted before no longer count.
	afresh := written && existed && stored.Epoch != before.Epoch

	if sf.json {
		return c.printJSON(cmd, setRateJSON{Name: name, Set: written, Reset: *reset || afresh, Config: toJSON(stored)})
	}
	switch {
	case !written:
		fmt.Fprintf(c.stdout, "unchanged %q: %s is set already\n", name, stored)
	case *reset:
		fmt.Fprintf(c.stdout, "set %q: %s, state reset\n", name, stored)
	case afresh && before.Algorithm != stored.Algorithm:
		fmt.Fprintf(c.stdout, "set %q: %s, state reset (the algorithm was %s)\n", name, stored, before.Algorithm)
	case afresh:
		fmt.Fprintf(c.stdout, "set %q: %s, state reset (changed by another client meanwhile)\n", name, stored)
	default:
		fmt.Fprintf(c.stdout, "set %q: %s\n", name, stored)
	}
	return exitOK
}

// setRateJSON is "set-rate --json". Config is the config stored after the
// command. A --try that found a different config stored adds Mismatch, the
// Requested config and the Error (also on stderr, exit status 2).
type setRateJSON struct {
	Name      string      `json:"name"`
	Set       bool        `json:"set"`
	Reset     bool        `json:"reset"`
	Config    configJSON  `json:"config"`
	Mismatch  bool        `json:"mismatch,omitempty"`
	Requested *configJSON `json:"requested,omitempty"`
	Error     string      `json:"error,omitempty"`
}

// otherConfigFlag names a config flag given beside --limit that a limit
// spec replaces (all but --algorithm, the limits' default), or "".
func otherConfigFlag(set map[string]bool) string {
	for _, f := range configFlagNames {
		if f != "algorithm" && set[f] {
			return f
		}
	}
	return ""
}

// setPolicy is "set-rate NAME --limit ...": it stores a keyed policy.
func setPolicy(ctx context.Context, c *cli, cmd *command, sf *storeFlags, cf *configFlags, name string, specs []string, reset, try bool) int {
	limits, err := parseLimits(specs, cf.algorithm, given(cf.fs)["algorithm"])
	if err != nil {
		return c.fail(cmd, err)
	}
	ctx, p, done, err := c.openPolicy(ctx, cmd, sf, name, 0, nil)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer done()
	written := true
	if try {
		written, err = p.TrySetLimits(ctx, limits)
		if errors.Is(err, redlimit.ErrConfigMismatch) {
			if stored, serr := p.Limits(ctx); serr == nil {
				return c.errorf(cmd, "a different policy is stored: %s (requested %s)", limitNames(stored), limitNames(limits))
			}
		}
	} else {
		var opts []redlimit.SetOption
		if reset {
			opts = append(opts, redlimit.ResetState())
		}
		err = p.SetLimits(ctx, limits, opts...)
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	stored, err := p.Limits(ctx)
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, setPolicyJSON{Name: name, Set: written, Reset: reset, Limits: limitsJSON(stored)})
	}
	switch {
	case !written:
		fmt.Fprintf(c.stdout, "unchanged policy %q: %s is set already\n", name, limitNames(stored))
	case reset:
		fmt.Fprintf(c.stdout, "set policy %q: %s, state reset\n", name, limitNames(stored))
	default:
		fmt.Fprintf(c.stdout, "set policy %q: %s\n", name, limitNames(stored))
	}
	return exitOK
}

// setPolicyJSON is "set-rate --limit ... --json": the limits stored after
// the command.
type setPolicyJSON struct {
	Name   string      `json:"name"`
	Set    bool        `json:"set"`
	Reset  bool        `json:"reset"`
	Limits []limitJSON `json:"limits"`
}
