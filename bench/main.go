// Command bench measures redlimit beside its peers, on Redis (one server,
// and a 3-primary Cluster it starts) and in memory, from one process: for every cell (workload x callers) it measures each
// system in turn, over several rounds (A B C, B C A, ...), and reports per
// cell the median and range of decisions/s, the ratios to each peer taken
// within each round, and per decision the client's and Redis's CPU, Redis's
// commands and the allocations; on the Cluster, per node too.
//
//	cd bench && go run . [--rounds 3] [--duration 3s] [--callers 1,8,64,256] [--json FILE] [--markdown FILE] [--svg FILE]
//	cd bench && go run . --quick        # about 2.5 minutes
//	cd bench && go run . --cluster=false  # without the Cluster cell
//	cd bench && go run . --before OLD1.json,OLD2.json --after NEW1.json,NEW2.json
//
// The last compares two builds of redlimit from their runs' JSON, round by
// round (see compare.go and scripts/benchcompare).
//
// It is a module of its own so that the peers (go-redis/redis_rate,
// golang.org/x/time/rate, sethvargo/go-limiter) never enter redlimit's
// go.mod; "redlimit bench" runs it from the source tree. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs failed dials on its own; errors are counted instead.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		os.Exit(1)
	case errors.As(err, new(usageError)):
		if ue := new(usageError); errors.As(err, ue) && !ue.printed {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// usageError is a bad command line; printed says the flag package has
// printed it already.
type usageError struct {
	msg     string
	printed bool
}

func (e usageError) Error() string { return e.msg }

// WorkDirEnv, when set, is the directory relative --json, --markdown and
// --svg paths are taken from ("redlimit bench" runs the benchmark in bench/
// and sets it to the caller's directory).
const WorkDirEnv = "REDLIMIT_BENCH_CWD"

// options are the command line's.
type options struct {
	redisURL     string
	rounds       int
	duration     time.Duration // a Redis cell's measured window
	memDuration  time.Duration // an in-memory cell's
	warmup       time.Duration
	callers      []int
	workloads    []string
	systems      *regexp.Regexp
	systemsSet   bool
	keys         int
	zipf         float64
	jsonFile     string
	mdFile       string
	svgFile      string
	quick        bool
	autopipeline bool
	cluster      bool // the Cluster cell
	floor        bool // the floor (floor.go) in the Redis cells
	fromJSON     string
	// The compare mode: the JSON files of runs of the older build and of
	// the newer, paired by position (see compare.go).
	before, after []string
	args          []string
	// dir is where the paths in args are taken from, relative to the
	// repository's root: "bench" for "go run ." there, the caller's
	// directory for "redlimit bench" ("." from the root; "" when outside
	// the tree).
	dir string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{args: args}
	fs.StringVar(&o.redisURL, "redis", "", "use this Redis (redis://host:port/db) instead of starting a redis-server; keys go under a random redlimit-bench: prefix and are deleted at the end")
	fs.IntVar(&o.rounds, "rounds", 3, "times every system of a cell is measured, in turn (A B C, B C A, C A B); medians and ranges over them")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time of one system in one round of a Redis cell")
	fs.DurationVar(&o.memDuration, "memory-duration", time.Second, "measured time of one system in one round of an in-memory cell")
	fs.DurationVar(&o.warmup, "warmup", 200*time.Millisecond, "unmeasured load before each measurement")
	callers := fs.String("callers", "1,8,64,256", "comma-separated numbers of concurrent callers (goroutines)")
	workloads := fs.String("workloads", strings.Join(workloadNames, ","), "comma-separated workloads: "+strings.Join(workloadNames, ", "))
	systemsRE := fs.String("systems", "", "only the systems whose name matches this regular expression")
	fs.IntVar(&o.keys, "keys", 100000, "distinct limiters in the keys workloads")
	fs.Float64Var(&o.zipf, "zipf", 1.1, "the exponent s of keys-zipf (key of rank k drawn with probability proportional to 1/k^s; > 1)")
	fs.StringVar(&o.jsonFile, "json", "", "write every measurement, the summaries and the machine's details to `FILE` (JSON)")
	fs.StringVar(&o.mdFile, "markdown", "", "write the report (the tables printed on stdout) to `FILE`")
	fs.StringVar(&o.svgFile, "svg", "", "write a chart of decisions/s at 64 callers to `FILE` (SVG)")
	fs.StringVar(&o.fromJSON, "from-json", "", "measure nothing: print the report of an earlier run's JSON `FILE` (and --markdown, --svg)")
	fs.BoolVar(&o.quick, "quick", false, "a short run: callers 1,64, 0.5s per Redis measurement, 0.25s in memory, redlimit's token bucket and sliding log only (flags given explicitly win)")
	before := fs.String("before", "", "compare mode, measure nothing: comma-separated JSON `FILES` of runs of the older build, each paired with the --after file at its place (see scripts/benchcompare)")
	after := fs.String("after", "", "compare mode: comma-separated JSON `FILES` of runs of the newer build, as many as --before")
	fs.BoolVar(&o.autopipeline, "autopipeline", false, "also measure redlimit with redisstore.WithAutoPipeline() on one limiter")
	fs.BoolVar(&o.floor, "floor", true, fmt.Sprintf("also measure the floor, %q: what the machine allows, not a rate limiter (a lone call is one INCRBY of its key; calls made meanwhile share runs as redlimit's do; never in a ratio); in one, half-peak (also at redlimit's pace) and the keys cells, windows of at most %s; --floor=false leaves it out", floorName, floorDuration))
	fs.BoolVar(&o.cluster, "cluster", true, fmt.Sprintf("also measure keyed policies and redis_rate over --keys keys on a Redis Cluster of %d primaries the benchmark starts (needs keys-uniform in --workloads; off by default with --redis)", clusterPrimaries))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run . [flags]   (in bench/; or: redlimit bench [flags])\n\n"+
			"Measures every cell (workload x callers) --rounds times, each system of a cell in turn,\n"+
			"and prints the report (markdown); progress goes to stderr. Starts its own redis-server unless --redis.\n"+
			"With --before and --after it measures nothing and compares two builds' runs (scripts/benchcompare).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{msg: err.Error(), printed: true}
	}
	if fs.NArg() > 0 {
		return nil, usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.systemsSet = set["systems"]
	if o.redisURL != "" && !set["cluster"] {
		o.cluster = false
	}
	if set["before"] || set["after"] {
		o.before, o.after = splitList(*before), splitList(*after)
		if len(o.before) == 0 || len(o.before) != len(o.after) {
			return nil, usageError{msg: fmt.Sprintf("--before and --after: as many files each, one pair per round (%d and %d)", len(o.before), len(o.after))}
		}
	}
	if o.quick {
		if !set["callers"] {
			*callers = "1,64"
		}
		if !set["duration"] {
			o.duration = 500 * time.Millisecond
		}
		if !set["memory-duration"] {
			o.memDuration = 250 * time.Millisecond
		}
		if !set["warmup"] {
			o.warmup = 100 * time.Millisecond
		}
	}
	for _, f := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 10000 {
			return nil, usageError{msg: fmt.Sprintf("--callers: %q is not a number of callers (1..10000)", f)}
		}
		o.callers = append(o.callers, n)
	}
	slices.Sort(o.callers)
	o.callers = slices.Compact(o.callers)
	for _, f := range strings.Split(*workloads, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(workloadNames, f) {
			return nil, usageError{msg: fmt.Sprintf("--workloads: unknown workload %q (want %s)", f, strings.Join(workloadNames, ", "))}
		}
		o.workloads = append(o.workloads, f)
	}
	var err error
	if o.systems, err = regexp.Compile(*systemsRE); err != nil {
		return nil, usageError{msg: fmt.Sprintf("--systems: %v", err)}
	}
	if o.duration <= 0 || o.memDuration <= 0 || o.warmup < 0 {
		return nil, usageError{msg: "--duration and --memory-duration must be positive and --warmup not negative"}
	}
	if o.rounds < 1 || o.rounds > 100 {
		return nil, usageError{msg: "--rounds must be 1..100"}
	}
	if o.keys < 2 || o.keys > 10_000_000 {
		return nil, usageError{msg: "--keys must be 2..10000000"}
	}
	if !(o.zipf > 1) || o.zipf > 10 {
		return nil, usageError{msg: "--zipf must be more than 1 (and at most 10)"}
	}
	o.dir = "bench"
	if wd := os.Getenv(WorkDirEnv); wd != "" {
		o.dir = ""
		if here, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(filepath.Dir(here), wd); err == nil && filepath.IsLocal(rel) {
				o.dir = filepath.ToSlash(rel)
			}
		}
		for _, p := range []*string{&o.jsonFile, &o.mdFile, &o.svgFile, &o.fromJSON} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(wd, *p)
			}
		}
		for _, list := range [][]string{o.before, o.after} {
			for i, p := range list {
				if !filepath.IsAbs(p) {
					list[i] = filepath.Join(wd, p)
				}
			}
		}
	}
	return o, nil
}

// run is the whole benchmark.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.fromJSON != "" {
		return redraw(o, stdout, stderr)
	}
	if o.before != nil {
		return compareOutput(o, stdout, stderr)
	}
	all := systems()
	// Redisson's script is read from an article kept beside the source
	// tree, not in it: without it the run goes on without that peer.
	redissonMissing := ""
	if wd, err := os.Getwd(); err == nil {
		if _, err := findSeeds(wd); err != nil {
			redissonMissing = err.Error()
			all = slices.DeleteFunc(all, func(s *system) bool { return s.Family == "redisson" })
			fmt.Fprintf(stderr, "note: Redisson's script left out: %s\n", redissonMissing)
		}
	}
	plan := buildPlan(o, all)
	if len(plan) == 0 {
		return usageError{msg: "--systems and --workloads leave nothing to measure"}
	}
	byName := map[string]*system{}
	for _, s := range all {
		byName[s.Name] = s
	}
	var selected []*system
	for _, s := range all {
		if planned(plan, s.Name) {
			selected = append(selected, s)
		}
	}
	needRedis := slices.ContainsFunc(selected, func(s *system) bool { return s.Store == onRedis })

	e := &env{prefix: "redlimit-bench:" + randomHex(4) + ":", clientID: randomHex(16)}
	e.names = make([]string, o.keys)
	for i := range e.names {
		e.names[i] = "k" + strconv.Itoa(i)
	}
	m := machineInfo()
	if needRedis {
		if o.redisURL == "" {
			fmt.Fprintln(stderr, "starting redis-server...")
			srv, err := startServer(ctx)
			if err != nil {
				return err
			}
			defer srv.stop()
			e.base, e.own = &redis.Options{Addr: srv.Addr}, true
			m.RedisServer = srv.version
		} else {
			if e.base, err = redis.ParseURL(o.redisURL); err != nil {
				return usageError{msg: fmt.Sprintf("--redis: %v", err)}
			}
			m.RedisServer = "external (--redis)"
		}
		// As redisstore.OpenURL does: context deadlines honoured, no retries
		// (a retried script could grant twice).
		e.base.ContextTimeoutEnabled, e.base.MaxRetries = true, -1
		e.admin = redis.NewClient(e.base)
		defer e.admin.Close()
		if m.RedisVersion, err = infoField(ctx, e.admin, "server", "redis_version"); err != nil {
			return fmt.Errorf("reading the Redis version: %w", err)
		}
		if slices.ContainsFunc(selected, func(s *system) bool { return s.Family == "redisson" }) {
			wd, _ := os.Getwd()
			seeds, err := findSeeds(wd)
			if err != nil {
				return err
			}
			if e.redisson, err = loadRedisson(ctx, e.admin, seeds); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "Redisson's scripts: %s\n", e.redisson.from)
		}
		defer e.clean(context.WithoutCancel(ctx))
	}
	if slices.ContainsFunc(plan, func(c cellSpec) bool { return c.Store == onCluster }) {
		fmt.Fprintf(stderr, "starting a Redis Cluster of %d primaries...\n", clusterPrimaries)
		if e.cluster, err = startCluster(ctx, clusterPrimaries); err != nil {
			return err
		}
		defer e.cluster.stop()
	}

	est := estimate(plan, o)
	rep := &report{Machine: m, Args: o.args, Dir: o.dir, Systems: make([]system, 0, len(selected)), Settings: settings{
		Rounds: o.rounds, DurationSec: o.duration.Seconds(), MemoryDurationSec: o.memDuration.Seconds(), WarmupSec: o.warmup.Seconds(),
		Callers: o.callers, Workloads: o.workloads, Keys: o.keys, Zipf: o.zipf, Quick: o.quick,
		Cells: len(plan), Measurements: est.measurements, PlannedSec: est.total().Seconds(),
		GrantedRedis: grantedRedis.String(), GrantedMemory: grantedMemory.String(), DeniedLimit: deniedLimit.String(),
		ClientOptions: "go-redis v9, a fresh client per measurement: PoolSize = callers, MaxRetries -1 (none), ContextTimeoutEnabled",
	}}
	for _, s := range selected {
		rep.Systems = append(rep.Systems, *s)
	}
	if e.cluster != nil {
		rep.Settings.Cluster = e.cluster.describe()
	}
	if e.redisson != nil {
		rep.Settings.RedissonScript = e.redisson.from
	} else if redissonMissing != "" {
		rep.Settings.RedissonScript = "left out: " + redissonMissing
	}
	fmt.Fprintf(stderr, "planned: %d cells, %d measurements (%d rounds): %s of measurement and warm-up, about %s in all with set-up\n",
		len(plan), est.measurements, o.rounds, est.load.Round(time.Second), est.total().Round(time.Second))
	if o.rounds < 3 {
		fmt.Fprintf(stderr, "note: %d round(s): a figure's spread between rounds is not known; use 3 or more for figures to publish\n", o.rounds)
	}
	began := time.Now()
	if err := execute(ctx, e, o, rep, plan, byName, stderr); err != nil {
		return err
	}
	rep.Settings.TotalSec = time.Since(began).Seconds()
	fmt.Fprintf(stderr, "done in %s (planned about %s)\n", time.Since(began).Round(time.Second), est.total().Round(time.Second))
	return rep.output(o, stdout, stderr)
}

// output prints the report and writes the files asked for.
func (rep *report) output(o *options, stdout, stderr io.Writer) error {
	if err := rep.writeMarkdown(stdout); err != nil {
		return err
	}
	if o.jsonFile != "" && o.fromJSON == "" {
		if err := rep.writeJSON(o.jsonFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.jsonFile)
	}
	if o.mdFile != "" {
		f, err := os.Create(o.mdFile)
		if err != nil {
			return err
		}
		err = rep.writeMarkdown(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.mdFile)
	}
	if o.svgFile != "" {
		if err := rep.writeSVG(o.svgFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.svgFile)
	}
	return nil
}

// splitList splits a comma-separated list, empty items left out.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// compareOutput is the compare mode: the comparison of the --before and
// --after runs, on stdout and in --markdown.
func compareOutput(o *options, stdout, stderr io.Writer) error {
	cmp, err := compareFiles(o.before, o.after)
	if err != nil {
		return err
	}
	if err := cmp.writeMarkdown(stdout); err != nil {
		return err
	}
	if o.mdFile == "" {
		return nil
	}
	f, err := os.Create(o.mdFile)
	if err != nil {
		return err
	}
	err = cmp.writeMarkdown(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fmt.Fprintf(stderr, "wrote %s\n", o.mdFile)
	}
	return err
}

// redraw prints the report of an earlier run and writes its files again.
func redraw(o *options, stdout, stderr io.Writer) error {
	b, err := os.ReadFile(o.fromJSON)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", o.fromJSON, err)
	}
	if len(rep.Cells) == 0 {
		return fmt.Errorf("%s: no cells (a report of this version of the benchmark is needed)", o.fromJSON)
	}
	return rep.output(o, stdout, stderr)
}

// reset empties Redis of the benchmark's keys at the start: FLUSHALL on its
// own server (fresh anyway); another server is left as it is (the run's
// prefix is new).
func (e *env) reset(ctx context.Context) error {
	if e.own {
		return e.admin.FlushAll(ctx).Err()
	}
	return nil
}

// clean deletes every key of this run (the systems put the prefix in every
// key name: redlimit at the start, redis_rate after "rate:", Redisson inside
// the braces).
func (e *env) clean(ctx context.Context) error {
	if e.own {
		return nil // the server goes away
	}
	iter := e.admin.Scan(ctx, 0, "*"+e.prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := e.admin.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// machine describes where the figures were measured.
type machine struct {
	GoVersion    string `json:"go_version"`
	GOOS         string `json:"goos"`
	GOARCH       string `json:"goarch"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	NumCPU       int    `json:"num_cpu"`
	CPUModel     string `json:"cpu_model"`
	MemTotal     string `json:"mem_total"`
	Kernel       string `json:"kernel"`
	RedisVersion string `json:"redis_version,omitempty"`
	RedisServer  string `json:"redis_server,omitempty"`
	Date         string `json:"date"`
	// The redlimit source measured (the bench module replaces the library
	// with ../, so uncommitted changes are compiled in): its commit and the
	// files that differ from it, outside bench/.
	RedlimitCommit   string   `json:"redlimit_commit"`
	RedlimitModified []string `json:"redlimit_modified"`
}

func machineInfo() machine {
	m := machine{
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		CPUModel: "unknown", MemTotal: "unknown", Kernel: "unknown",
		Date: time.Now().UTC().Format(time.RFC3339),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.RedlimitCommit, m.RedlimitModified = sourceState()
	return m
}

// sourceState reads the commit and the changed files of the source tree
// around the working directory (read-only git commands; no index refresh).
func sourceState() (string, []string) {
	wd, err := os.Getwd()
	if err != nil {
		return "unknown", nil
	}
	root := ""
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "bench", "go.mod")); err == nil {
			root = dir
			break
		}
		if filepath.Dir(dir) == dir {
			return "unknown (not in the source tree)", nil
		}
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown (no git)", nil
	}
	out, err := exec.Command("git", "--no-optional-locks", "-C", root, "status", "--porcelain", "--", ".", ":!bench", ":!docs").Output()
	if err != nil {
		return strings.TrimSpace(string(head)), nil
	}
	var changed []string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if len(line) > 3 {
			changed = append(changed, strings.TrimSpace(line))
		}
	}
	return strings.TrimSpace(string(head)), changed
}
