// Command rlscompare compares two running services of Envoy's rate-limit
// protocol (RLS v3 over gRPC), redlimit serve and envoyproxy/ratelimit, given
// their addresses: first their decisions on the same traffic, then their
// decisions/s and latency at 1, 8 and 64 concurrent callers (package
// bench/rls). Both must read the same rules, bench/rls/rules.yaml
// (--print-rules writes it).
//
//	cd bench && go run ./cmd/rlscompare --a redlimit=127.0.0.1:8081 --b envoy=127.0.0.1:8091
//	    [--a-pid PID --b-pid PID --redis 127.0.0.1:6379]   # CPU per decision too
//	    [--floor 127.0.0.1:8071 --floor-pid PID]           # the gRPC floor beside them
//
// --serve-floor ADDR runs the gRPC floor instead (rls.NewFloor, a baseline:
// gRPC-go answering a constant OK, no Redis) in this process until
// interrupted, then prints the calls it answered and its allocations per
// call; start it where the services run, and measure it with --floor.
//
// How to start both: docs/bench.md, "Beside envoyproxy/ratelimit".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlimit/redlimit/bench/rls"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "rlscompare:", err)
		os.Exit(1)
	}
}

// result is what --json writes.
type result struct {
	Command   []string            `json:"command"`
	Started   time.Time           `json:"started"`
	Decisions *rls.DecisionReport `json:"decisions,omitempty"`
	Load      *rls.LoadReport     `json:"load,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlscompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	aFlag := fs.String("a", "", "the first system, `NAME=host:port` (ratios are its figures over B's)")
	bFlag := fs.String("b", "", "the second system, `NAME=host:port`")
	windows := fs.Int("windows", 5, "fixed windows compared (0: skip the decisions)")
	burst := fs.Int("burst", 0, "calls to each system per window (default: the limit + 5)")
	callers := fs.String("callers", "1,8,64", "comma-separated numbers of concurrent callers, one cell each (empty: skip the load)")
	rounds := fs.Int("rounds", 3, "measurements of each system per cell, in turn (A B, B A, ...)")
	duration := fs.Duration("duration", 3*time.Second, "measured window of one measurement")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured load before each window")
	conns := fs.Int("conns", 1, "gRPC client connections per measurement, callers spread over them")
	oneValue := fs.Bool("one-value", false, "put every caller of the load on one descriptor value (one count: a global limit) instead of one each")
	aPID := fs.Int("a-pid", 0, "process id of A on this machine: report its CPU per decision (Linux)")
	bPID := fs.Int("b-pid", 0, "process id of B on this machine")
	redisAddr := fs.String("redis", "", "`host:port` of the Redis both keep their counts in: report its CPU and commands per decision")
	jsonFile := fs.String("json", "", "write every answer and measurement to `FILE` (JSON)")
	floorAddr := fs.String("floor", "", "`host:port` of a gRPC floor (--serve-floor) to measure after the two systems in each round, never in a ratio")
	floorPID := fs.Int("floor-pid", 0, "process id of the floor on this machine: report its CPU per call")
	serveFloor := fs.String("serve-floor", "", "serve the gRPC floor on `host:port` until interrupted (nothing else is run)")
	printRules := fs.Bool("print-rules", false, "print the rules both systems must read (bench/rls/rules.yaml) and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/rlscompare --a NAME=ADDR --b NAME=ADDR [flags]   (in bench/)\n\n"+
			"Compares two running RLS v3 gRPC services reading the same rules (--print-rules):\n"+
			"their decisions on the same traffic, then decisions/s and latency. Report on stdout (markdown).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printRules {
		_, err := stdout.Write(rls.Rules)
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *serveFloor != "" {
		return runFloor(ctx, *serveFloor, stderr)
	}
	a, err := parseSystem("--a", *aFlag)
	if err != nil {
		return err
	}
	b, err := parseSystem("--b", *bFlag)
	if err != nil {
		return err
	}
	a.PID, b.PID = *aPID, *bPID
	var cs []int
	for _, f := range strings.Split(*callers, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("--callers: %q is not a number of callers (1..10000)", f)
		}
		cs = append(cs, n)
	}
	if *windows < 0 || *rounds < 1 || *duration <= 0 || *warmup < 0 || *conns < 1 {
		return errors.New("--windows must not be negative, --rounds and --conns at least 1, --duration positive, --warmup not negative")
	}

	res := result{Command: append([]string{"rlscompare"}, args...), Started: time.Now().UTC()}
	if *windows > 0 {
		fmt.Fprintf(stderr, "decisions: %d windows...\n", *windows)
		res.Decisions, err = rls.Decisions(ctx, a, b, rls.Options{Windows: *windows, Burst: *burst})
		if err != nil {
			return err
		}
		res.Decisions.WriteMarkdown(stdout)
	}
	if len(cs) > 0 {
		fmt.Fprintf(stderr, "load: callers %v, %d rounds of %v + %v warm-up per system...\n", cs, *rounds, *duration, *warmup)
		res.Load, err = rls.Measure(ctx, a, b, rls.LoadOptions{Callers: cs, Rounds: *rounds, Duration: *duration,
			Warmup: *warmup, Conns: *conns, OneValue: *oneValue, Redis: *redisAddr, Progress: stderr,
			Floor: rls.System{Addr: *floorAddr, PID: *floorPID}})
		if err != nil {
			return err
		}
		res.Load.WriteMarkdown(stdout)
	}
	if *jsonFile != "" {
		data, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if res.Decisions != nil && !res.Decisions.Equal {
		return errors.New("the decisions differ (see the report)")
	}
	return nil
}

func parseSystem(flagName, v string) (rls.System, error) {
	name, addr, ok := strings.Cut(v, "=")
	if !ok || name == "" || addr == "" {
		return rls.System{}, fmt.Errorf("%s: want NAME=host:port, got %q", flagName, v)
	}
	return rls.System{Name: name, Addr: addr}, nil
}

// runFloor serves the gRPC floor on addr, at redlimit serve's collector
// target, until ctx ends.
func runFloor(ctx context.Context, addr string, stderr io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	debug.SetGCPercent(rls.FloorGCPercent)
	fmt.Fprintf(stderr, "grpc floor: serving on %s (pid %d)\n", l.Addr(), os.Getpid())
	calls, allocs, err := rls.ServeFloor(ctx, l)
	fmt.Fprintf(stderr, "grpc floor: %d calls answered, %.1f heap allocations per call (the whole process)\n", calls, allocs)
	return err
}
