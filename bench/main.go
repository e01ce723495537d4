// Command bench measures redlimit against its peers, on Redis and in memory,
// from one process: decisions per second, latency, Redis CPU per decision
// and bytes per limiter, for every system, workload and number of callers.
//
//	cd bench && go run . [--duration 2s] [--callers 1,8,64,256] [--json FILE] [--svg FILE]
//	cd bench && go run . --quick        # 64 callers, 0.5 s per cell
//
// It is a module of its own so that the peers (go-redis/redis_rate,
// golang.org/x/time/rate as a rival) never enter redlimit's go.mod; "redlimit
// bench" runs it from the source tree. See README.md.
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
	"math"
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

// workloads, in the order each cell runs them (mixed and half-peak are
// calibrated on granted's throughput).
var workloadNames = []string{"granted", "denied", "mixed", halfPeak, "keys"}

// halfPeak is the workload paced, open loop, at half the system's granted
// throughput: on Redis only (issue 6: p99 at half of peak on the Redis store).
const halfPeak = "half-peak"

// measured says whether workload w is measured on s: half-peak is not
// measured in memory (sleeps cannot pace tens of millions of calls a
// second, and the target is the Redis store's).
func measured(s *system, w string) bool { return w != halfPeak || s.Store == onRedis }

// WorkDirEnv, when set, is the directory relative --json and --svg paths are
// taken from ("redlimit bench" runs the benchmark in bench/ and sets it to
// the caller's directory).
const WorkDirEnv = "REDLIMIT_BENCH_CWD"

// options are the command line's.
type options struct {
	redisURL  string
	duration  time.Duration
	warmup    time.Duration
	callers   []int
	workloads []string
	systems   *regexp.Regexp
	keys      int
	jsonFile  string
	svgFile   string
	quick     bool
	fromJSON  string
	// A cell during which other processes used more than maxOtherCPU CPUs
	// is measured again, at most retries times.
	maxOtherCPU float64
	retries     int
	args        []string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{args: args}
	fs.StringVar(&o.redisURL, "redis", "", "use this Redis (redis://host:port/db) instead of starting a redis-server; keys go under a random redlimit-bench: prefix and are deleted between cells")
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "measured time per cell (system x workload x callers)")
	fs.DurationVar(&o.warmup, "warmup", 100*time.Millisecond, "unmeasured load before each cell's measurement")
	callers := fs.String("callers", "1,8,64,256", "comma-separated numbers of concurrent callers (goroutines)")
	workloads := fs.String("workloads", strings.Join(workloadNames, ","), "comma-separated workloads: granted, denied, mixed, half-peak (Redis only), keys")
	systemsRE := fs.String("systems", "", "only the systems whose name matches this regular expression")
	fs.IntVar(&o.keys, "keys", 100000, "distinct limiters in the keys workload")
	fs.StringVar(&o.jsonFile, "json", "", "write every figure and the machine's details to `FILE` (JSON)")
	fs.StringVar(&o.svgFile, "svg", "", "write a chart of decisions/s at 64 callers to `FILE` (SVG)")
	fs.Float64Var(&o.maxOtherCPU, "max-other-cpu", 0.25, "measure a cell again when other processes used more than this many `CPUs` during it (Linux)")
	fs.IntVar(&o.retries, "retries", 2, "the most times a disturbed cell is measured again (0: never)")
	fs.StringVar(&o.fromJSON, "from-json", "", "measure nothing: print the table of an earlier run's JSON `FILE` (and --svg its chart)")
	fs.BoolVar(&o.quick, "quick", false, "a smoke run: 64 callers only, 0.5s per cell (flags given explicitly win)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run . [flags]   (in bench/; or: redlimit bench [flags])\n\n"+
			"Measures every system x workload x callers for --duration each and prints a table;\n"+
			"progress goes to stderr. Starts its own redis-server unless --redis.\n\nFlags:\n")
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
	if o.quick {
		if !set["callers"] {
			*callers = "64"
		}
		if !set["duration"] {
			o.duration = 500 * time.Millisecond
		}
		if !set["warmup"] {
			o.warmup = 50 * time.Millisecond
		}
	}
	for _, f := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 10000 {
			return nil, usageError{msg: fmt.Sprintf("--callers: %q is not a number of callers (1..10000)", f)}
		}
		o.callers = append(o.callers, n)
	}
	for _, f := range strings.Split(*workloads, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(workloadNames, f) {
			return nil, usageError{msg: fmt.Sprintf("--workloads: unknown workload %q (want %s)", f, strings.Join(workloadNames, ", "))}
		}
		o.workloads = append(o.workloads, f)
	}
	// Run in the canonical order: mixed and half-peak follow granted.
	slices.SortStableFunc(o.workloads, func(a, b string) int {
		return slices.Index(workloadNames, a) - slices.Index(workloadNames, b)
	})
	o.workloads = slices.Compact(o.workloads)
	var err error
	if o.systems, err = regexp.Compile(*systemsRE); err != nil {
		return nil, usageError{msg: fmt.Sprintf("--systems: %v", err)}
	}
	if o.duration <= 0 || o.warmup < 0 {
		return nil, usageError{msg: "--duration must be positive and --warmup not negative"}
	}
	if o.retries < 0 || o.maxOtherCPU < 0 {
		return nil, usageError{msg: "--retries and --max-other-cpu must not be negative"}
	}
	if o.keys < 2 {
		return nil, usageError{msg: "--keys must be at least 2"}
	}
	if wd := os.Getenv(WorkDirEnv); wd != "" {
		for _, p := range []*string{&o.jsonFile, &o.svgFile, &o.fromJSON} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(wd, *p)
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
	var selected []*system
	for _, s := range systems() {
		if o.systems.MatchString(s.Name) {
			selected = append(selected, s)
		}
	}
	if len(selected) == 0 {
		return usageError{msg: "--systems matches no system"}
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

	rep := &report{Machine: m, Args: o.args, Settings: settings{
		DurationSec: o.duration.Seconds(), WarmupSec: o.warmup.Seconds(), Callers: o.callers,
		Workloads: o.workloads, Keys: o.keys, Quick: o.quick, MaxOtherCPU: o.maxOtherCPU, Retries: o.retries,
	}}
	for _, s := range selected {
		rep.Systems = append(rep.Systems, *s)
	}
	if e.redisson != nil {
		rep.Settings.RedissonScript = e.redisson.from
	}
	total := 0
	for _, s := range selected {
		for _, w := range o.workloads {
			if measured(s, w) {
				total += len(o.callers)
			}
		}
	}
	cell := 0
	began := time.Now()
	for _, s := range selected {
		for _, c := range o.callers {
			for _, w := range o.workloads {
				if !measured(s, w) {
					continue
				}
				cell++
				r, err := runCell(ctx, e, o, rep, s, w, c)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					r.Errors++
					r.FirstError = err.Error()
				}
				rep.Results = append(rep.Results, r)
				fmt.Fprintf(stderr, "[%3d/%d %5.0fs] %s\n", cell, total, time.Since(began).Seconds(), r.progress())
			}
		}
	}
	rep.Settings.TotalSec = time.Since(began).Seconds()
	rep.Ratios = ratios(rep.Results)
	rep.HalfPeak = halfPeakChecks(rep)
	if err := rep.writeText(stdout); err != nil {
		return err
	}
	if o.jsonFile != "" {
		if err := rep.writeJSON(o.jsonFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.jsonFile)
	}
	if o.svgFile != "" {
		if err := rep.writeSVG(o.svgFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.svgFile)
	}
	return nil
}

// redraw prints the table of an earlier run and draws its chart.
func redraw(o *options, stdout, stderr io.Writer) error {
	b, err := os.ReadFile(o.fromJSON)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", o.fromJSON, err)
	}
	if err := rep.writeText(stdout); err != nil {
		return err
	}
	if o.svgFile != "" {
		if err := rep.writeSVG(o.svgFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.svgFile)
	}
	return nil
}

// Limits of the workloads. granted and keys: far above any offered load,
// 10^7 per second on Redis (20 times the most any system here decides; not
// more, so that every system still does its limiting work: redis_rate
// counts time in float seconds since 2017, in which a 1 ns increment at
// 2^30 per second vanishes, and it then writes nothing), 2^30 per second in
// memory (x/time/rate decides over 10^7 per second). denied: 1 per minute,
// used up before the measurement. mixed: per 100 ms (so that the initial
// burst is a small part of the cell), half of the system's granted
// throughput in memory; on Redis the callers are paced at 0.8 x that
// throughput and the limit is half of it. half-peak: the granted limit,
// the callers paced (open loop) at 0.5 x the system's granted throughput.
var (
	grantedRedis  = limit{Rate: 10_000_000, Interval: time.Second}
	grantedMemory = limit{Rate: 1 << 30, Interval: time.Second}
	deniedLimit   = limit{Rate: 1, Interval: time.Minute}
)

// grantedLimit is the granted and keys workloads' limit for s.
func grantedLimit(s *system) limit {
	if s.Store == onRedis {
		return grantedRedis
	}
	return grantedMemory
}

const mixedInterval = 100 * time.Millisecond

// halfPeakShare is the share of the granted throughput (the peak, same
// callers) half-peak offers.
const halfPeakShare = 0.5

// runCell measures system s under workload w with callers callers. A cell
// during which other processes used more than --max-other-cpu CPUs is
// measured again, up to --retries times; the least disturbed attempt counts.
// mixed on Redis is paced (see below); in memory it is a closed loop, and a
// cell that did not refuse about half is measured again (up to 3 times)
// with its limit scaled towards half. half-peak is paced, open loop, at
// half the granted throughput, with the granted limit.
func runCell(ctx context.Context, e *env, o *options, rep *report, s *system, w string, callers int) (result, error) {
	l, pace := grantedLimit(s), 0.0
	// peak is the system's granted throughput with these callers.
	peak := func() (float64, error) {
		if x := rep.throughput(s.Name, "granted", callers); x > 0 {
			return x, nil
		}
		// granted was not run (or failed): measure it now, unrecorded.
		cal, err := measureCell(ctx, e, o, s, "granted", callers, grantedLimit(s), 0)
		if err == nil && !(cal.DecisionsPerSec > 0) {
			err = errors.New("no decision")
		}
		if err != nil {
			return 0, fmt.Errorf("calibrating %s: %w", w, err)
		}
		return cal.DecisionsPerSec, nil
	}
	switch w {
	case "denied":
		l = deniedLimit
	case halfPeak:
		x, err := peak()
		if err != nil {
			return result{System: s.Name, Store: s.Store, Workload: w, Callers: callers}, err
		}
		pace = halfPeakShare * x
	case "mixed":
		x, err := peak()
		if err != nil {
			return result{System: s.Name, Store: s.Store, Workload: w, Callers: callers}, err
		}
		share := 0.5 // of x, per second
		if s.Store == onRedis {
			// Paced: refusals may cost far less than grants (redisstore
			// answers an exhausted limiter's refusals locally), and a closed
			// loop would then be offered mostly refusals. Offered 0.8 x, so
			// that every system keeps up, with a limit of half that.
			pace, share = 0.8*x, 0.4
		}
		l = limit{Rate: max(1, int64(x*share*mixedInterval.Seconds())), Interval: mixedInterval}
	}
	var best result
	mixTries, noiseTries := 0, 0
	for attempt := 1; ; attempt++ {
		r, err := measureCell(ctx, e, o, s, w, callers, l, pace)
		if err != nil {
			r.Attempts = attempt
			return r, err
		}
		if attempt == 1 || o.better(r, best) {
			best = r
		}
		best.Attempts = attempt
		switch {
		case w == "mixed" && pace == 0 && !inBand(r) && mixTries < 3:
			// Closed loop (in memory): scale the limit towards half granted
			// and measure again.
			mixTries++
			f := r.GrantedFraction
			scale := 8.0
			if f > 0 {
				scale = min(max(0.5/f, 1.0/8), 8)
			}
			l.Rate = max(1, int64(float64(l.Rate)*scale))
		case o.disturbed(r) && noiseTries < o.retries:
			noiseTries++
		default:
			return best, nil
		}
	}
}

// inBand: a mixed cell refused about half (30 to 70%).
func inBand(r result) bool { return r.GrantedFraction >= 0.3 && r.GrantedFraction <= 0.7 }

// disturbed: other processes used more than --max-other-cpu during r.
func (o *options) disturbed(r result) bool {
	return r.OtherCPUs != nil && o.retries > 0 && *r.OtherCPUs > o.maxOtherCPU
}

// better says whether attempt a is to be kept rather than b: a mixed cell
// in the band first, then an undisturbed one, then the less disturbed.
func (o *options) better(a, b result) bool {
	if a.Workload == "mixed" && inBand(a) != inBand(b) {
		return inBand(a)
	}
	if o.disturbed(a) != o.disturbed(b) {
		return !o.disturbed(a)
	}
	if a.Workload == "mixed" && !inBand(a) {
		return math.Abs(a.GrantedFraction-0.5) < math.Abs(b.GrantedFraction-0.5)
	}
	return a.OtherCPUs != nil && b.OtherCPUs != nil && *a.OtherCPUs < *b.OtherCPUs
}

// measureCell is one measurement of a cell, with limit l, the callers
// offered pace requests per second in all (0: as fast as they can).
func measureCell(ctx context.Context, e *env, o *options, s *system, w string, callers int, l limit, pace float64) (result, error) {
	r := result{System: s.Name, Store: s.Store, Workload: w, Callers: callers, Limiters: 1, Limit: l.String(), OfferedPerSec: pace}
	if w == "keys" {
		r.Limiters = o.keys
	}
	if s.Store == onRedis {
		if err := e.reset(ctx); err != nil {
			return r, err
		}
	}

	var heap0 uint64
	if s.Store == inMemory && w == "keys" {
		heap0 = heapAlloc()
	}
	t, err := s.prepare(ctx, e, l, r.Limiters, callers)
	if err != nil {
		return r, err
	}
	defer t.close()
	if w == "denied" {
		if err := exhaust(ctx, t); err != nil {
			return r, err
		}
	}
	timeEvery := 1
	if s.Store == inMemory {
		timeEvery = 64
	}
	open := w == halfPeak
	ld, err := runLoad(ctx, t, callers, pace, open, o.warmup, o.duration, timeEvery, func() snapshot { return e.snap(ctx) })
	if err != nil {
		return r, err
	}
	r.fill(&ld)
	if timeEvery > 1 {
		r.LatencyNote = fmt.Sprintf("1 call in %d timed", timeEvery)
	}
	if open {
		r.LatencyNote = "from the scheduled start (open loop), the load generator's timer lateness taken out"
	}

	// Bytes per limiter.
	switch {
	case s.Store == onRedis:
		sample := []int{0}
		if r.Limiters > 1 {
			sample = sample[:0]
			for k := range 100 {
				sample = append(sample, k*r.Limiters/100)
			}
		}
		var sum int64
		for _, i := range sample {
			// One more call makes sure the limiter holds state (in the keys
			// workload a limiter may not have had its turn yet).
			if _, err := t.call(ctx, i); err != nil {
				return r, fmt.Errorf("touching limiter %d: %w", i, err)
			}
			n, err := memoryUsage(ctx, e.admin, t.redisKeys(i))
			if err != nil {
				return r, err
			}
			sum += n
		}
		b := float64(sum) / float64(len(sample))
		r.BytesPerLimiter, r.BytesWhat = &b, "MEMORY USAGE of the limiter's keys"
	case w == "keys":
		b := (float64(heapAlloc()) - float64(heap0)) / float64(r.Limiters)
		runtime.KeepAlive(t)
		r.BytesPerLimiter, r.BytesWhat = &b, "Go heap per limiter"
	}
	return r, nil
}

// exhaust asks until a request is refused (the denied workload's limit is
// 1 per minute).
func exhaust(ctx context.Context, t *target) error {
	for range 100 {
		ok, err := t.call(ctx, 0)
		if err != nil {
			return fmt.Errorf("using up the limit: %w", err)
		}
		if !ok {
			return nil
		}
	}
	return errors.New("using up the limit: 100 requests granted at 1 per minute")
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// reset empties Redis of the benchmark's keys: FLUSHALL on its own server,
// a SCAN of the run's prefix on another.
func (e *env) reset(ctx context.Context) error {
	if e.own {
		return e.admin.FlushAll(ctx).Err()
	}
	return e.clean(ctx)
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
