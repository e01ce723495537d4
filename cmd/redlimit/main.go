// Command redlimit drives redlimit rate limiters from the shell.
//
// A limiter is a name in a store holding a config (Rate permits per Interval
// under one of the algorithms, shared by every client in the "overall" mode,
// or per client in the "per-client" mode) and the algorithm's record of the
// permits granted. The store is Redis (--redis URL, or $REDIS_URL), so that
// every process using it shares the limit, or, without a URL, an in-memory
// store that lives only as long as the command.
//
// Usage ('redlimit help' prints the same list from the commands' own
// synopses, and 'redlimit COMMAND -h' a command's flags):
//
//	redlimit demo      [--callers 20] [--rate 1] [--interval 1s] [--permits 1] [--name demo]
//	redlimit set-rate  NAME --rate N (--interval D | --per UNIT) [--algorithm A] [--burst N] [--capacity N]
//	                   [--mode overall|per-client] [--reset] [--try]
//	redlimit acquire   NAME [--permits N] [--wait D] [--client ID] [--rate N --interval D [--algorithm A] ...]
//	redlimit get       NAME [--client ID] [--redisson [--layout current|legacy]]
//	redlimit delete    NAME
//	redlimit migrate   NAME [--layout current|legacy] [--client ID]...
//	redlimit simulate  [--traffic steady|bursty|ramp|on-off] [--rate 10] [--interval 1s] [--duration 10s]
//	                   [--bucket 100ms] [--seed 1] [--svg FILE]
//	redlimit bench     [--quick] [--duration 2s] [--callers 1,8,64,256] [--json FILE] [--svg FILE] [--redis URL] ...
//
// Every command but simulate also takes --redis URL, --prefix P (the Redis
// key prefix); every command takes --json (print one JSON object on stdout),
// before or after NAME.
//
// --algorithm is one of redlimit.Algorithms (default sliding-log); --burst is
// the token bucket's size and --capacity the leaky bucket's queue (both
// default to the rate, and are errors with another algorithm). A fixed
// window's length is the interval, its windows aligned to the clock; --per
// second|minute|hour|day is a shorthand for --interval.
//
// demo starts N callers at once, each waiting in Acquire on one overall
// limiter (reset first), and prints each grant as it happens: with the
// defaults, 20 callers at 1 per second are all served, in the order they
// asked, in about 19 seconds.
//
// set-rate stores a config for every client (SetRate, keeping the permits
// already granted unless --reset; or TrySetRate with --try, which writes only
// where no config is stored and fails on a different one). acquire takes
// permits now (TryAcquire) or waiting at most --wait (TryAcquireWait); with
// --rate and --interval it passes the config along so that the limiter is
// created on first use, which is what makes it useful with the memory store.
// get prints the config and the permits available, delete removes the
// limiter.
//
// simulate runs one made-up stream of requests through every algorithm on
// virtual time (the simulate package) and prints what each admitted; --svg
// draws it.
//
// Exit status: 0 success (acquire: granted), 1 acquire refused, 2 bad usage
// or error (the message is on stderr).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1 // acquire: the permits were not granted
	exitError   = 2 // bad usage, invalid argument, or an error from the store
)

func main() {
	// go-redis logs failed dials on its own; the command reports the error.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, deps{LookupEnv: os.LookupEnv})
	stop()
	os.Exit(code)
}

// quietLogger discards go-redis's log.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// deps is what run takes from its surroundings. main passes the real ones;
// tests pass a fake clock and a memory store shared between run calls.
type deps struct {
	// LookupEnv reads the environment (os.LookupEnv); nil reads nothing.
	LookupEnv func(string) (string, bool)
	// Clock, when set, is the time of the limiters and of the stores (the
	// memory store's, and the Redis store's instead of Redis TIME). Nil is
	// the real clock, with Redis keeping its own time.
	Clock clock.Clock
	// MemStore, when set, is the store used without --redis. Nil makes a
	// fresh memory store for each run, as a new process would have.
	MemStore redlimit.Store
}

// cli is one run of the command.
type cli struct {
	stdout, stderr io.Writer
	deps           deps
}

// command is a subcommand.
type command struct {
	name     string
	synopsis string // its arguments, after "redlimit COMMAND"
	help     string // what it does, for its -h
	wantName bool   // takes the NAME positional
	noStore  bool   // uses no store: no --redis, --prefix
	run      func(ctx context.Context, c *cli, cmd *command, args []string) int
}

// commands are the subcommands, in the order of the usage text.
var commands = []*command{
	{name: "demo", synopsis: "[--callers 20] [--rate 1] [--interval 1s] [--permits 1] [--name demo]", run: cmdDemo, help: `
Starts the callers at once; each waits in Acquire for its permits from one
overall limiter of rate per interval, reset first so that every run starts
afresh. Prints each grant as it happens (its time since the start and how
long the caller waited), then how long serving everyone took: with the
defaults about 19s, callers served in the order they asked.`},
	{name: "set-rate", synopsis: "NAME --rate N (--interval D | --per UNIT) [--algorithm A] [--burst N] [--capacity N] [--mode M] [--reset] [--try]", wantName: true, run: cmdSetRate, help: `
Stores the limiter's config for every client and prints it. By default
(SetRate) the permits already granted still count under the new config
(unless the algorithm changes: another algorithm's state means nothing, so
it starts afresh); --reset starts from nothing. --try (TrySetRate) writes
only where no config is stored: it reports whether it did, and a different
stored config is an error.` + algorithmsHelp},
	{name: "acquire", synopsis: "NAME [--permits N] [--wait D] [--client ID] [--rate N --interval D [--algorithm A] [--burst N] [--capacity N] [--mode M]]", wantName: true, run: cmdAcquire, help: `
Asks for permits: at once (TryAcquire) or, with --wait D, waiting at most D
for them (TryAcquireWait). Exit status 0 granted, 1 refused, 2 error.
The config flags (--rate with --interval or --per, and --algorithm, --burst,
--capacity, --mode) pass the config along with the call (WithConfig): if no
config is stored the limiter is created with it on first use (a stored
config wins). The memory store lives only as long as the command, so there
they are needed. --client names this client's own limit in per-client mode
(default: a new client every run).` + algorithmsHelp},
	{name: "get", synopsis: "NAME [--client ID] [--redisson [--layout current|legacy]]", wantName: true, run: cmdGet, help: `
Prints the stored config and the permits a request could be granted now
(for --client ID in per-client mode). With --redisson it reads a limiter of
Redisson's RRateLimiter instead (same Redis, Redisson's own keys): its
config, permits left and grant log decoded (--client ID, repeatable, adds a
PER_CLIENT client's state).`},
	{name: "delete", synopsis: "NAME", wantName: true, run: cmdDelete, help: `
Removes the limiter, its config and its state; prints whether it existed.`},
	{name: "migrate", synopsis: "NAME [--layout current|legacy] [--client ID]...", wantName: true, run: cmdMigrate, help: `
Turns the Redisson RRateLimiter called NAME (same Redis) into a native
limiter with the same config and the permits still in use, so the limit
holds across the switch. Stop the Java clients first; docs/redisson.md has
the steps. The Redisson keys are left in place.`},
	{name: "simulate", synopsis: "[--traffic steady|bursty|ramp|on-off] [--rate 10] [--interval 1s] [--duration 10s] [--bucket 100ms] [--seed 1] [--svg FILE]", noStore: true, run: cmdSimulate, help: `
Sends one made-up stream of requests, each a TryAcquire of one permit,
through every algorithm configured with the same rate and interval (token
bucket burst and leaky bucket capacity: the rate, unless --burst or
--capacity), each on a memory store of its own, on virtual time: it takes
no time and the same flags give the same result. Prints per algorithm the
requests admitted and refused, the most admitted in any sliding window of
the interval (and that over the rate), in any tenth of it, and the longest
gap between admissions; --svg FILE also draws the requests admitted and
refused over time, one panel per algorithm.

Traffic, scaled to the rate: steady (evenly at 2 x the rate), bursty (quiet
spells, then bursts at 3 x the rate at random times: --seed), ramp (from 0
to 4 x the rate), on-off (intervals at 4 x the rate and of silence, each
straddling a window boundary; --offset moves the traffic against the
clock's window grid).`},
	{name: "bench", synopsis: "[--quick] [--duration 2s] [--callers 1,8,64,256] [--json FILE] [--svg FILE] [--redis URL] ...", noStore: true, run: cmdBench, help: `
Runs the benchmark of the source tree (bench/, a Go module of its own) with
"go run . FLAGS" there, found by walking up from the working directory: it
needs the source tree and the Go toolchain, as its peers (redis_rate,
x/time/rate) are not compiled into this command on purpose. Every flag goes
to it; "redlimit bench -h" lists them. See bench/README.md.`},
}

// algorithmsHelp lists the algorithms for the help of the commands that set
// a config.
const algorithmsHelp = `

Algorithms (--algorithm, default sliding-log):
  sliding-log      at most rate permits in any window of the interval (exact)
  fixed-window     at most rate per window of the interval aligned to the clock
                   (1s, 1m, 1h, 24h: whole seconds, minutes, hours, UTC days);
                   up to 2 x rate in an interval across a window boundary
  sliding-counter  the previous window weighed by its overlap: O(1), approximate
  token-bucket     bursts of up to --burst (default: the rate), rate per
                   interval in the long run
  leaky-bucket     grants spaced interval/rate apart; --capacity (default: the
                   rate) permits may wait in its queue`

const usageHead = `redlimit: distributed rate limiters (in the style of Redisson's RRateLimiter)

Usage:
`

const usageTail = `
Every command but simulate also takes, before or after NAME:
  --redis URL   the Redis to use (default $REDIS_URL): redis://host:6379/0,
                rediss://... (TLS), redis+sentinel://s1:26379?master_name=M&addr=s2:26379,
                redis+cluster://n1:6379?addr=n2:6379;
                empty: an in-memory store that lives only as long as the command
  --prefix P    the Redis key prefix (default "redlimit:")
Every command takes:
  --json        print one JSON object on stdout instead of text (errors stay
                text on stderr)

Algorithms (--algorithm): sliding-log (the default), fixed-window,
sliding-counter, token-bucket (--burst), leaky-bucket (--capacity).
Durations are Go durations: 500ms, 1s, 1m, 1h30m; --per second|minute|hour|day
may replace --interval.
Exit status: 0 success (acquire: granted), 1 acquire refused, 2 bad usage or error.
Run 'redlimit COMMAND -h' for a command's flags.
`

// usage writes the command's usage.
func usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  redlimit %-9s %s\n", cmd.name, cmd.synopsis)
	}
	fmt.Fprint(w, `
  demo       callers each wait in Acquire on one limiter; prints the grants as they happen
  set-rate   store the limiter's config (SetRate, or TrySetRate with --try)
  acquire    take permits now, or waiting at most --wait; exit status 0 granted, 1 refused
             (--rate, --interval and the other config flags create the limiter on
             first use: needed in memory)
  get        print the config and the permits available (--redisson: a Redisson limiter)
  delete     remove the limiter
  migrate    turn a Redisson limiter into a native one, permits in use and all
  simulate   run one stream of requests through every algorithm on virtual time;
             prints what each admitted, --svg draws it
  bench      measure redlimit beside its peers (runs the bench/ module of the
             source tree)
`)
	fmt.Fprint(w, usageTail)
}

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, d deps) int {
	c := &cli{stdout: stdout, stderr: stderr, deps: d}
	if len(args) == 0 {
		usage(stderr)
		return exitError
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stderr)
		return exitError
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			return cmd.run(ctx, c, cmd, args[1:])
		}
	}
	fmt.Fprintf(stderr, "redlimit: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitError
}

// storeFlags are the flags every command takes.
type storeFlags struct {
	redisURL string
	prefix   string
	json     bool
}

// flagSet returns the flag set of cmd, with the flags every command takes.
func (c *cli) flagSet(cmd *command, sf *storeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("redlimit "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: redlimit %s %s\n%s\n\nFlags:\n", cmd.name, cmd.synopsis, cmd.help)
		fs.PrintDefaults()
	}
	if !cmd.noStore {
		// $REDIS_URL is read in parse, not shown as a default: it may hold a password.
		fs.StringVar(&sf.redisURL, "redis", "", "Redis `URL` (default $REDIS_URL); empty: an in-memory store that lives as long as the command")
		fs.StringVar(&sf.prefix, "prefix", redisstore.DefaultPrefix, "Redis key `prefix`")
	}
	fs.BoolVar(&sf.json, "json", false, "print one JSON object on stdout")
	return fs
}

// parse parses args: flags, then NAME if cmd takes it, then flags again. It
// reports false after printing what was wrong.
func (c *cli) parse(fs *flag.FlagSet, cmd *command, args []string) (name string, ok bool) {
	if err := fs.Parse(args); err != nil {
		return "", false // the flag package printed the error and the usage
	}
	rest := fs.Args()
	if cmd.wantName {
		if len(rest) == 0 {
			c.usageError(cmd, "missing NAME")
			return "", false
		}
		name = rest[0]
		if err := fs.Parse(rest[1:]); err != nil {
			return "", false
		}
		rest = fs.Args()
	}
	if len(rest) > 0 {
		c.usageError(cmd, fmt.Sprintf("unexpected argument %q", rest[0]))
		return "", false
	}
	if f := fs.Lookup("redis"); f != nil && !given(fs)["redis"] {
		_ = f.Value.Set(c.getenv("REDIS_URL")) // a string flag: never fails
	}
	return name, true
}

func (c *cli) usageError(cmd *command, msg string) {
	fmt.Fprintf(c.stderr, "redlimit %s: %s\nusage: redlimit %s %s\nRun 'redlimit %s -h' for its flags.\n", cmd.name, msg, cmd.name, cmd.synopsis, cmd.name)
}

// errorf prints a message for cmd on stderr and returns exitError.
func (c *cli) errorf(cmd *command, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "redlimit %s: %s\n", cmd.name, fmt.Sprintf(format, args...))
	return exitError
}

// fail prints err for cmd on stderr and returns exitError. Library errors
// are descriptive already; only their "redlimit: " is dropped.
func (c *cli) fail(cmd *command, err error) int {
	msg := strings.TrimPrefix(err.Error(), "redlimit: ")
	if errors.Is(err, context.Canceled) {
		msg = "interrupted: " + msg
	}
	return c.errorf(cmd, "%s", msg)
}

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

// configFlags are the flags that describe a config.
type configFlags struct {
	fs              *flag.FlagSet
	rate            int64
	interval        time.Duration
	per             string
	mode            string
	algorithm       string
	burst, capacity int64
}

// configFlagNames are the flags register adds.
var configFlagNames = []string{"rate", "interval", "per", "mode", "algorithm", "burst", "capacity"}

func (cf *configFlags) register(fs *flag.FlagSet, rateHelp string) {
	cf.fs = fs
	fs.Int64Var(&cf.rate, "rate", 0, rateHelp)
	fs.StringVar(&cf.mode, "mode", "overall", "`mode`: overall (one limit shared by all clients) or per-client")
	fs.StringVar(&cf.algorithm, "algorithm", string(redlimit.SlidingLog), fmt.Sprintf("the `algorithm`: one of %v", redlimit.Algorithms))
	fs.DurationVar(&cf.interval, "interval", 0, "the `interval` of the rate, a whole number of milliseconds (1s, 1m, ...); fixed windows are this long, aligned to the clock")
	fs.StringVar(&cf.per, "per", "", "the interval as a `unit`: second, minute, hour or day (instead of --interval)")
	fs.Int64Var(&cf.burst, "burst", 0, "token-bucket only: the bucket's size, the most permits granted at once (default: the rate)")
	fs.Int64Var(&cf.capacity, "capacity", 0, "leaky-bucket only: the most permits waiting in the queue (default: the rate)")
}

// perUnits are the units of --per.
var perUnits = map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}

// resolveInterval applies --per, which may not come with --interval. It
// reports whether an interval was given either way.
func (cf *configFlags) resolveInterval() (bool, error) {
	set := given(cf.fs)
	if !set["per"] {
		return set["interval"], nil
	}
	if set["interval"] {
		return true, errors.New("--per and --interval cannot be combined (--per sets the interval)")
	}
	d, ok := perUnits[strings.ToLower(cf.per)]
	if !ok {
		return true, fmt.Errorf("invalid --per %q: must be second, minute, hour or day", cf.per)
	}
	cf.interval = d
	return true, nil
}

// config returns the config the flags describe (after resolveInterval),
// checked: the library's typed errors say when --burst or --capacity do not
// fit the algorithm.
func (cf *configFlags) config() (redlimit.Config, error) {
	alg, err := redlimit.ParseAlgorithm(cf.algorithm)
	if err != nil {
		return redlimit.Config{}, err
	}
	mode, err := redlimit.ParseMode(cf.mode)
	if err != nil {
		return redlimit.Config{}, err
	}
	if err := cf.checkSizes(); err != nil {
		return redlimit.Config{}, err
	}
	c := redlimit.PerInterval(cf.rate, cf.interval).WithMode(mode).WithAlgorithm(alg)
	c.Burst, c.Capacity = cf.burst, cf.capacity
	return c.Normalize()
}

// checkSizes rejects an explicit --burst 0 or --capacity 0, which the
// library would read as "the default" without a word.
func (cf *configFlags) checkSizes() error {
	set := given(cf.fs)
	for _, f := range []struct {
		name string
		v    int64
	}{{"burst", cf.burst}, {"capacity", cf.capacity}} {
		if set[f.name] && f.v == 0 {
			return fmt.Errorf("invalid --%s 0: must be at least 1 (leave it out for the default, the rate)", f.name)
		}
	}
	return nil
}

// given lists the names of the flags set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// configJSON is a config in JSON output. Burst and capacity appear with
// the algorithms they belong to.
type configJSON struct {
	Algorithm  string `json:"algorithm"`
	Mode       string `json:"mode"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	Burst      int64  `json:"burst,omitempty"`
	Capacity   int64  `json:"capacity,omitempty"`
}

func toJSON(cfg redlimit.Config) configJSON {
	alg := cfg.Algorithm
	if alg == "" {
		alg = redlimit.SlidingLog
	}
	return configJSON{Algorithm: string(alg), Mode: cfg.Mode.String(), Rate: cfg.Rate, Interval: cfg.Interval.String(), IntervalMS: cfg.Interval.Milliseconds(),
		Burst: cfg.Burst, Capacity: cfg.Capacity}
}

// printJSON writes v as one line of JSON on stdout.
func (c *cli) printJSON(cmd *command, v any) int {
	if err := json.NewEncoder(c.stdout).Encode(v); err != nil {
		return c.fail(cmd, err)
	}
	return exitOK
}

func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// cmdSetRate is "redlimit set-rate".
func cmdSetRate(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var cf configFlags
	cf.register(fs, "permits per interval (required)")
	reset := fs.Bool("reset", false, "start afresh: the permits already granted no longer count")
	try := fs.Bool("try", false, "TrySetRate: store the config only if none is stored")
	name, ok := c.parse(fs, cmd, args)
	if !ok {
		return exitError
	}
	set := given(fs)
	hasInterval, err := cf.resolveInterval()
	if err != nil {
		c.usageError(cmd, err.Error())
		return exitError
	}
	if !set["rate"] || !hasInterval {
		c.usageError(cmd, "--rate and --interval are required (or --per instead of --interval)")
		return exitError
	}
	if *reset && *try {
		c.usageError(cmd, "--reset and --try cannot be combined (--try never changes a stored config)")
		return exitError
	}
	cfg, err := cf.config()
	if err != nil {
		return c.fail(cmd, err)
	}
	l, closeStore, err := c.openLimiter(&sf, name)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()

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
		return c.printJSON(cmd, struct {
			Name   string     `json:"name"`
			Set    bool       `json:"set"`
			Reset  bool       `json:"reset"`
			Config configJSON `json:"config"`
		}{name, written, *reset || afresh, toJSON(stored)})
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

// cmdAcquire is "redlimit acquire".
func cmdAcquire(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var cf configFlags
	cf.register(fs, "permits per interval: create the limiter with this config if none is stored (with --interval)")
	permits := fs.Int64("permits", 1, "`number` of permits to acquire")
	wait := fs.Duration("wait", 0, "wait at most this `duration` for the permits (0: refuse at once)")
	client := fs.String("client", "", "client `ID`: selects this client's limit in per-client mode (default: a new client)")
	name, ok := c.parse(fs, cmd, args)
	if !ok {
		return exitError
	}
	var opts []redlimit.Option
	set := given(fs)
	withConfig := false
	for _, f := range configFlagNames {
		withConfig = withConfig || set[f]
	}
	if withConfig {
		hasInterval, err := cf.resolveInterval()
		if err != nil {
			c.usageError(cmd, err.Error())
			return exitError
		}
		if !set["rate"] || !hasInterval {
			c.usageError(cmd, "--rate and --interval go together (or --rate and --per; the other config flags need them)")
			return exitError
		}
		cfg, err := cf.config()
		if err != nil {
			return c.fail(cmd, err)
		}
		opts = append(opts, redlimit.WithConfig(cfg))
	}
	if set["client"] {
		opts = append(opts, redlimit.WithClientID(*client))
	}
	if *wait < 0 {
		return c.errorf(cmd, "invalid --wait %s: must not be negative", *wait)
	}
	l, closeStore, err := c.openLimiter(&sf, name, opts...)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()

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

	code := exitOK
	if !res.Allowed {
		code = exitRefused
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
		}{Name: name, Permits: *permits, Allowed: res.Allowed, Remaining: res.Remaining,
			RetryAfterMS: res.RetryAfter.Milliseconds(), WaitedMS: res.Waited.Milliseconds()}
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

// cmdGet is "redlimit get".
func cmdGet(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	var rf redissonFlags
	fs.Var(&rf.clients, "client", "client `ID` whose permits to count in per-client mode (default: a new client; repeatable with --redisson)")
	redisson := fs.Bool("redisson", false, "read a Redisson RRateLimiter (its own keys) instead")
	fs.StringVar(&rf.layout, "layout", "current", "with --redisson: the Redisson layout, `current` or legacy")
	name, ok := c.parse(fs, cmd, args)
	if !ok {
		return exitError
	}
	if *redisson {
		return getRedisson(ctx, c, cmd, &sf, &rf, name)
	}
	if len(rf.clients) > 1 {
		return c.errorf(cmd, "one --client at a time (several only with --redisson)")
	}
	var opts []redlimit.Option
	if len(rf.clients) == 1 {
		opts = append(opts, redlimit.WithClientID(rf.clients[0]))
	}
	l, closeStore, err := c.openLimiter(&sf, name, opts...)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
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

// cmdDelete is "redlimit delete".
func cmdDelete(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	name, ok := c.parse(fs, cmd, args)
	if !ok {
		return exitError
	}
	l, closeStore, err := c.openLimiter(&sf, name)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	existed, err := l.Delete(ctx)
	if err != nil {
		return c.fail(cmd, err)
	}
	if sf.json {
		return c.printJSON(cmd, struct {
			Name    string `json:"name"`
			Existed bool   `json:"existed"`
		}{name, existed})
	}
	if existed {
		fmt.Fprintf(c.stdout, "deleted %q\n", name)
	} else {
		fmt.Fprintf(c.stdout, "%q did not exist\n", name)
	}
	return exitOK
}
