package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// wantSystems is every system the benchmark compares.
var wantSystems = []string{
	"redlimit sliding-log", "redlimit sliding-log +autopipeline",
	"redlimit fixed-window", "redlimit fixed-window +autopipeline",
	"redlimit sliding-counter", "redlimit sliding-counter +autopipeline",
	"redlimit token-bucket", "redlimit token-bucket +autopipeline",
	"redlimit leaky-bucket", "redlimit leaky-bucket +autopipeline",
	"redis_rate", "Redisson script",
	"memstore token-bucket", "memstore sliding-log", "x/time/rate",
}

// redissonSystem is the system that replays Redisson's script, read from
// the shared seeds beside the repository.
const redissonSystem = "Redisson script"

// TestQuickRun runs the whole benchmark in quick mode (64 callers) for a
// tiny duration, against the redis-server it starts, and checks the JSON:
// every system under every workload (half-peak on Redis only), no errors,
// the figures present. Without the shared seeds (a plain clone) the
// Redisson system is left out and its subtest skips.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	jsonFile, svgFile := filepath.Join(dir, "results.json"), filepath.Join(dir, "bench.svg")
	var stdout, stderr bytes.Buffer
	// No re-measuring of cells disturbed by other processes: a smoke run.
	args := []string{"--quick", "--duration", "40ms", "--warmup", "10ms", "--keys", "500", "--retries", "0", "--json", jsonFile, "--svg", svgFile}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	_, seedErr := findSeeds(wd)
	wantSystems := wantSystems
	if seedErr != nil {
		wantSystems = slices.DeleteFunc(slices.Clone(wantSystems), func(s string) bool { return s == redissonSystem })
		args = append(args, "--systems", "^(redlimit|redis_rate|memstore|x/time/rate)")
	}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}

	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("decoding the JSON: %v", err)
	}
	var names []string
	for _, s := range rep.Systems {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, wantSystems) {
		t.Errorf("systems %q, want %q", names, wantSystems)
	}
	const inMemorySystems = 3
	wantCells := len(wantSystems)*len(workloadNames) - inMemorySystems // no half-peak in memory
	if len(rep.Results) != wantCells {
		t.Errorf("%d results, want %d (every system x workload at 64 callers, half-peak on Redis only)", len(rep.Results), wantCells)
	}
	for _, sys := range wantSystems {
		onRedis := !strings.HasPrefix(sys, "memstore") && sys != "x/time/rate"
		for _, w := range workloadNames {
			r := rep.find(sys, w, 64)
			if w == halfPeak && !onRedis {
				if r != nil {
					t.Errorf("%s measured under half-peak in memory", sys)
				}
				continue
			}
			if r == nil {
				t.Errorf("no result for %s / %s / 64 callers", sys, w)
				continue
			}
			if r.Errors != 0 || r.FirstError != "" {
				t.Errorf("%s / %s: %d errors: %s", sys, w, r.Errors, r.FirstError)
			}
			if r.Decisions == 0 || !(r.DecisionsPerSec > 0) || !(r.P50Ns > 0) || r.P99Ns < r.P50Ns || r.P999Ns < r.P99Ns {
				t.Errorf("%s / %s: figures missing: %+v", sys, w, r)
			}
			if onRedis && (r.RedisCPUMicros == nil || *r.RedisCPUMicros < 0 || r.BytesPerLimiter == nil) {
				t.Errorf("%s / %s: no Redis CPU or bytes per limiter: %+v", sys, w, r)
			}
			if w == "denied" && r.Granted > 1 { // a fixed window may turn over once
				t.Errorf("%s / denied: %d of %d granted", sys, r.Granted, r.Decisions)
			}
			if w == "keys" && (r.Limiters != 500 || r.BytesPerLimiter == nil) {
				t.Errorf("%s / keys: %d limiters, bytes %v", sys, r.Limiters, r.BytesPerLimiter)
			}
			// Paced at half the granted cell's throughput, the offered rate
			// checked (whether it was kept depends on the machine), latency
			// from the schedule.
			if g := rep.find(sys, "granted", 64); w == halfPeak && g != nil &&
				(math.Abs(r.OfferedPerSec-g.DecisionsPerSec/2) > 1e-6*g.DecisionsPerSec || r.OfferedKept == nil || !(r.AchievedFraction > 0) ||
					!(r.P99RawNs > 0) || !strings.Contains(r.LatencyNote, "scheduled start")) {
				t.Errorf("%s / half-peak: %+v, granted %v/s", sys, r, g.DecisionsPerSec)
			}
			if w == "mixed" && onRedis && (r.OfferedPerSec <= 0 || r.OfferedKept == nil) {
				t.Errorf("%s / mixed: not paced: %+v", sys, r)
			}
		}
	}
	if rep.Machine.GoVersion == "" || rep.Machine.GOMAXPROCS < 1 || rep.Machine.CPUModel == "" || rep.Machine.RedisVersion == "" || rep.Machine.RedisServer == "" {
		t.Errorf("machine details missing: %+v", rep.Machine)
	}
	metrics := map[string]bool{}
	for _, q := range rep.Ratios {
		metrics[q.Metric] = true
		if !(q.Ratio > 0) || math.IsInf(q.Ratio, 0) {
			t.Errorf("ratio %+v", q)
		}
	}
	if !metrics["ns_per_op"] || !metrics["redis_cpu_us_per_decision"] {
		t.Errorf("ratios lack memstore vs x/time/rate or Redis CPU: %+v", rep.Ratios)
	}

	for _, sys := range wantSystems {
		if !strings.Contains(stdout.String(), sys) {
			t.Errorf("the table has no row for %s:\n%s", sys, stdout.String())
		}
	}
	if len(rep.HalfPeak) != len(wantSystems)-inMemorySystems {
		t.Errorf("half-peak checks %+v, want one per Redis system", rep.HalfPeak)
	}
	for _, c := range rep.HalfPeak {
		if c.Callers != 64 || c.TargetNs != 1e6 || !(c.PeakPerSec > 0) || !(c.P99Ns > 0) {
			t.Errorf("half-peak check %+v", c)
		}
		if !strings.Contains(stdout.String(), "p99 latency at half of peak") {
			t.Errorf("the text has no half-peak lines:\n%s", stdout.String())
		}
	}
	if progress := fmt.Sprintf("[%3d/%d", wantCells, wantCells); !strings.Contains(stderr.String(), progress) {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	svg, err := os.ReadFile(svgFile)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not XML: %v", err)
		}
	}
	for _, sys := range []string{"redis_rate", "x/time/rate"} {
		if !bytes.Contains(svg, []byte(sys)) {
			t.Errorf("the chart lacks %s", sys)
		}
	}

	// --from-json prints the same table and draws the same chart.
	var again bytes.Buffer
	svg2 := filepath.Join(dir, "again.svg")
	if err := run(context.Background(), []string{"--from-json", jsonFile, "--svg", svg2}, &again, io.Discard); err != nil {
		t.Fatalf("--from-json: %v", err)
	}
	if again.String() != stdout.String() {
		t.Errorf("--from-json printed\n%s\nthe run printed\n%s", again.String(), stdout.String())
	}
	if b, err := os.ReadFile(svg2); err != nil || !bytes.Equal(b, svg) {
		t.Errorf("--from-json drew another chart (%v)", err)
	}

	t.Run(redissonSystem, func(t *testing.T) {
		if seedErr != nil {
			t.Skipf("Redisson's script is read from the shared seeds beside the repository: %v", seedErr)
		}
		if !strings.Contains(rep.Settings.RedissonScript, seedFile) {
			t.Errorf("Redisson's script from %q, want the seed", rep.Settings.RedissonScript)
		}
		if !bytes.Contains(svg, []byte(redissonSystem)) {
			t.Errorf("the chart lacks %s", redissonSystem)
		}
	})
}

// TestHistogram: quantiles within the buckets' 3%.
func TestHistogram(t *testing.T) {
	var h hist
	for v := 1; v <= 100000; v++ {
		h.add(time.Duration(v) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := q * 100000e3
		if got := h.quantile(q); math.Abs(got-want)/want > 0.03 {
			t.Errorf("quantile %v = %v, want %v within 3%%", q, got, want)
		}
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 1000, 1 << 40, math.MaxUint64} {
		i := bucketOf(v)
		if i < 0 || i >= len(h.counts) {
			t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
		}
		if mid := bucketMid(i); v >= 64 && math.Abs(mid-float64(v))/float64(v) > 1.0/32 {
			t.Errorf("bucket of %d has middle %v", v, mid)
		}
	}
	var empty hist
	if !math.IsNaN(empty.quantile(0.5)) {
		t.Error("an empty histogram has a quantile")
	}
}

// TestUsage: bad flags are usage errors.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--callers", "0"}, {"--workloads", "nope"}, {"--systems", "("}, {"extra"}, {"--keys", "1"}, {"--retries", "-1"}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if _, ok := err.(usageError); !ok {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestOpenLoop: on a virtual timeline, a 60 ms stall of the system shows in
// every call due during it when latency is taken from the schedule (open
// loop), in one call when taken from the call (closed); the load
// generator's own lateness (a sleep woken up to a millisecond late) does not
// count.
func TestOpenLoop(t *testing.T) {
	const every, stall, fast = 500 * time.Microsecond, 60 * time.Millisecond, 20 * time.Microsecond
	base := time.Unix(1_700_000_000, 0)
	var open, closed []time.Duration
	var queueEnd, prevEnd time.Time
	for k := 0; k < 600; k++ {
		sched := base.Add(time.Duration(k) * every)
		late := time.Duration(k%7) * 150 * time.Microsecond // up to 0.9 ms late
		t0 := later(sched.Add(late), prevEnd)               // one caller: after the call before
		d := fast
		if k == 100 {
			d = stall
		}
		t1 := t0.Add(d)
		lat, raw, lag, end := openTimes(sched, t0, t1, queueEnd)
		if raw != t1.Sub(sched) || lag != t0.Sub(sched) {
			t.Fatalf("call %d: raw %v lag %v", k, raw, lag)
		}
		open, closed, queueEnd, prevEnd = append(open, lat), append(closed, d), end, t1
	}
	slow := func(ds []time.Duration) (n int) {
		for _, d := range ds {
			if d >= 10*time.Millisecond {
				n++
			}
		}
		return n
	}
	// The calls due in the stall's first 50 ms (100 of them) waited 10 ms or
	// more; lateness alone made none of the others slow.
	if n := slow(open); n < 100 || n > 125 {
		t.Errorf("open loop: %d calls took 10 ms or more; want the 100 due in the stall's first 50 ms and no more than its tail", n)
	}
	if n := slow(closed); n != 1 {
		t.Errorf("closed loop: %d calls took 10 ms or more, want the stall in 1", n)
	}
	if lat := open[50]; lat != fast {
		t.Errorf("a call before the stall: %v from its schedule, want %v (the timer's lateness is not counted)", lat, fast)
	}
}
