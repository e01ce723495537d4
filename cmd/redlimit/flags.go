package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

// storeFlags are the flags every command takes.
type storeFlags struct {
	redisURL string
	prefix   string
	timeout  time.Duration
	json     bool
}

// defaultTimeout is the default of --timeout.
const defaultTimeout = 5 * time.Second

// flagSet returns the flag set of cmd, with the flags every command takes.
// It prints nothing itself: parse reports a bad flag in one line and prints
// the help for -h.
func (c *cli) flagSet(cmd *command, sf *storeFlags) *flag.FlagSet {
	fs := newFlagSet(cmd)
	if !cmd.noStore {
		// $REDIS_URL is read in parse, not shown as a default: it may hold a password.
		fs.StringVar(&sf.redisURL, "redis", "", "Redis `URL` (default $REDIS_URL): redis://host:6379/0, rediss://, redis+sentinel://, redis+cluster://; empty: an in-memory store that lives as long as the command")
		fs.StringVar(&sf.prefix, "prefix", redisstore.DefaultPrefix, "Redis key `prefix`")
		fs.DurationVar(&sf.timeout, "timeout", defaultTimeout, "the most connecting to Redis or one call to it may take")
	}
	fs.BoolVar(&sf.json, "json", false, "print one JSON object on stdout")
	return fs
}

// newFlagSet returns an empty flag set for cmd that prints nothing
// itself (see flagSet).
func newFlagSet(cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("redlimit "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args: flags, then NAME if cmd takes it, then flags again.
// When it reports !ok the command is over, with exit status code: -h
// printed the help on stdout (0), or a usage error was printed (2).
func (c *cli) parse(fs *flag.FlagSet, cmd *command, args []string) (name string, code int, ok bool) {
	failed := func(err error) (string, int, bool) {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(fs, cmd)
			return "", exitOK, false
		}
		return "", c.usageError(cmd, err.Error()), false
	}
	if err := fs.Parse(args); err != nil {
		return failed(err)
	}
	rest := fs.Args()
	if cmd.wantName {
		if len(rest) == 0 {
			return "", c.usageError(cmd, "missing NAME"), false
		}
		name = rest[0]
		if err := fs.Parse(rest[1:]); err != nil {
			return failed(err)
		}
		rest = fs.Args()
	}
	if len(rest) > 0 {
		return "", c.usageError(cmd, fmt.Sprintf("unexpected argument %q", rest[0])), false
	}
	if f := fs.Lookup("redis"); f != nil && !given(fs)["redis"] {
		_ = f.Value.Set(c.getenv("REDIS_URL")) // a string flag: never fails
	}
	if f := fs.Lookup("timeout"); f != nil {
		if d := f.Value.(flag.Getter).Get().(time.Duration); d <= 0 {
			return "", c.usageError(cmd, fmt.Sprintf("invalid --timeout %s: must be positive", d)), false
		}
	}
	return name, exitOK, true
}

// printHelp prints cmd's help on stdout: its synopsis, what it does and its
// flags.
func (c *cli) printHelp(fs *flag.FlagSet, cmd *command) {
	fmt.Fprintf(c.stdout, "%s\n%s\n", synopsisLine(cmd), cmd.help)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(c.stdout, "\nFlags:\n")
	fs.SetOutput(c.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// usageError prints a usage error of cmd in one line, and where to read its
// usage, on stderr; it returns exitError.
func (c *cli) usageError(cmd *command, msg string) int {
	fmt.Fprintf(c.stderr, "redlimit %s: %s\nrun 'redlimit help %s' for usage\n", cmd.name, msg, cmd.name)
	return exitError
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
