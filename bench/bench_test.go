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

// TestSchedule: every system once per round, rounds in turn, each round
// starting one system later (A B C, B C A, C A B, A B C).
func TestSchedule(t *testing.T) {
	got := schedule(3, 4)
	want := [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("schedule(3, 4) = %v, want %v", got, want)
	}
	for _, n := range []int{1, 2, 5, 7} {
		for r, order := range schedule(n, 3) {
			seen := slices.Sorted(slices.Values(order))
			for k := range n {
				if seen[k] != k {
					t.Fatalf("schedule(%d, 3) round %d = %v: not every system once", n, r, order)
				}
			}
		}
	}
}

// TestSummarise: median (odd and even counts), min and max, NaN left out.
func TestSummarise(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		in             []float64
		med, min, maxv float64
		n              int
	}{
		{[]float64{3, 1, 2}, 2, 1, 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4, 4},
		{[]float64{5, nan, 1}, 3, 1, 5, 2},
		{[]float64{7}, 7, 7, 7, 1},
	} {
		s := summarise(c.in)
		if float64(s.Median) != c.med || float64(s.Min) != c.min || float64(s.Max) != c.maxv || s.N != c.n {
			t.Errorf("summarise(%v) = %+v, want median %v min %v max %v n %d", c.in, s, c.med, c.min, c.maxv, c.n)
		}
	}
	if s := summarise([]float64{nan}); s.N != 0 || !math.IsNaN(float64(s.Median)) {
		t.Errorf("summarise(NaN) = %+v", s)
	}
	// NaN goes to the JSON as null and comes back as NaN.
	b, err := json.Marshal(summarise(nil))
	if err != nil || string(b) != `{"median":null,"min":null,"max":null,"n":0}` {
		t.Fatalf("JSON of an empty stat: %s, %v", b, err)
	}
	var back stat
	if err := json.Unmarshal(b, &back); err != nil || !math.IsNaN(float64(back.Median)) {
		t.Fatalf("reading it back: %+v, %v", back, err)
	}
}

// TestCellRatios: a cell's ratios are taken within each round, then
// summarised; they are not the ratio of the medians. A round with errors
// counts for neither side.
func TestCellRatios(t *testing.T) {
	byName := map[string]*system{
		"redlimit token-bucket": {Name: "redlimit token-bucket", Store: onRedis, Family: "redlimit"},
		"redis_rate":            {Name: "redis_rate", Store: onRedis, Family: "redis_rate", Peer: true},
		"Redisson script":       {Name: "Redisson script", Store: onRedis, Family: "redisson", Peer: true},
		floorName:               {Name: floorName, Store: onRedis, Family: floorFamily, Baseline: true},
	}
	c := cell{Workload: one, Store: onRedis, Callers: 8, Rounds: 4, Systems: []string{"redlimit token-bucket", "redis_rate", "Redisson script", floorName}}
	add := func(system string, round int, dps, cpu float64, errs uint64) {
		m := newMeasurement()
		m.System, m.Round, m.DecisionsPerSec, m.RedisCPUUs, m.Errors = system, round, dps, nf(cpu), errs
		c.Measurements = append(c.Measurements, m)
	}
	// Rounds 1-3 clean; in round 4 redis_rate failed.
	for r, v := range []float64{100, 200, 300, 999} {
		add("redlimit token-bucket", r+1, v, 10, 0)
	}
	for r, v := range []float64{50, 400, 150, 1} {
		errs := uint64(0)
		if r == 3 {
			errs = 1
		}
		add("redis_rate", r+1, v, 20, errs)
	}
	for r, v := range []float64{100, 100, 100, 100} {
		add("Redisson script", r+1, v, 5, 0)
	}
	for r := range 4 {
		add(floorName, r+1, 1000, 1, 0)
	}
	c.summarise(byName)
	// The floor is in no ratio, on either side, yet summarised like the
	// others, with its verdict.
	for _, q := range c.Ratios {
		if q.System == floorName || q.Peer == floorName {
			t.Errorf("a ratio with the floor: %+v", q)
		}
	}
	if len(c.Ratios) != 4 {
		t.Errorf("%d ratios, want 4 (redlimit against each peer, two metrics): %+v", len(c.Ratios), c.Ratios)
	}
	if s := c.summary(floorName); s == nil || float64(s.DecisionsPerSec.Median) != 1000 {
		t.Errorf("floor summary %+v", s)
	}
	if len(c.Floor) != 1 || c.Floor[0].System != floorName || c.Floor[0].Others != 3 ||
		float64(c.Floor[0].OthersBestPerSec) != 250 || c.Floor[0].OthersBestPerSecOf != "redlimit token-bucket" {
		t.Errorf("floor notes %+v", c.Floor)
	}

	q := c.ratio("redlimit token-bucket", "redis_rate", "decisions_per_sec")
	if q == nil {
		t.Fatalf("no ratio: %+v", c.Ratios)
	}
	// 100/50, 200/400, 300/150 and no round 4: median 2, not the ratio of
	// the medians (200/150).
	if float64(q.Median) != 2 || float64(q.Min) != 0.5 || float64(q.Max) != 2 || q.N != 3 {
		t.Errorf("ratio %+v, want median 2 [0.5-2] over 3 rounds", q)
	}
	if len(q.PerRound) != 4 || float64(q.PerRound[1]) != 0.5 || !math.IsNaN(float64(q.PerRound[3])) {
		t.Errorf("per round %v, want [2 0.5 2 NaN]", q.PerRound)
	}
	q = c.ratio("redlimit token-bucket", "Redisson script", "decisions_per_sec")
	if q == nil || float64(q.Median) != 2.5 || float64(q.Min) != 1 || float64(q.Max) != 9.99 || q.N != 4 {
		t.Errorf("vs Redisson %+v, want median 2.5 [1-9.99]", q)
	}
	if q := c.ratio("redlimit token-bucket", "redis_rate", "redis_cpu_us_per_decision"); q == nil || float64(q.Median) != 0.5 {
		t.Errorf("Redis CPU ratio %+v, want 0.5", q)
	}
	if c.ratio("redis_rate", "Redisson script", "decisions_per_sec") != nil {
		t.Error("a peer compared with a peer")
	}
	s := c.summary("redis_rate")
	if s.Errors != 1 || s.DecisionsPerSec.N != 3 || float64(s.DecisionsPerSec.Median) != 150 {
		t.Errorf("redis_rate summary %+v, want 3 rounds, median 150, 1 error", s)
	}
	// Half-peak is paced: no ratio of decisions/s.
	c.Workload = halfPeak
	c.summarise(byName)
	if len(c.Ratios) != 0 {
		t.Errorf("half-peak ratios %+v", c.Ratios)
	}
}

// TestParseCounters: Redis's CPU and its commands, INFO itself left out.
func TestParseCounters(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n\r\n# Commandstats\r\n" +
		"cmdstat_fcall:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n"
	cpu, cmds, err := parseCounters(info)
	if err != nil || cpu != 3.75 || len(cmds) != 2 || cmds["fcall"] != 10 || cmds["hmget"] != 10 {
		t.Fatalf("parseCounters = %v %v %v", cpu, cmds, err)
	}
	if _, _, err := parseCounters("# CPU\r\n"); err == nil {
		t.Error("no CPU lines: no error")
	}
}

// TestPlan: the default run's cells and its planned duration (under 35
// minutes), and --quick's (under 3), by the plan's own arithmetic: which
// of redlimit's systems each cell measures (Limiter per key, keyed
// policy), every Redis cell beside both peers, the Cluster cell at 64
// callers beside redis_rate.
func TestPlan(t *testing.T) {
	all := []string{"token-bucket", "sliding-log", "fixed-window", "sliding-counter", "leaky-bucket"}
	mains := all[:2]
	for _, c := range []struct {
		args    []string
		callers []int
		limit   time.Duration
		// The algorithms of the Limiter and of the policy per Redis
		// workload.
		limiter, policy map[string][]string
	}{
		{nil, []int{1, 8, 64, 256}, 35 * time.Minute,
			map[string][]string{one: all, denied: all[:1], halfPeak: all, keysUniform: mains, keysZipf: mains},
			map[string][]string{one: mains, keysUniform: all, keysZipf: all}},
		{[]string{"--quick"}, []int{1, 64}, 3 * time.Minute,
			map[string][]string{one: mains, denied: all[:1], halfPeak: mains, keysUniform: all[:1], keysZipf: all[:1]},
			map[string][]string{keysUniform: mains, keysZipf: mains}},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		plan := buildPlan(o, systems())
		est := estimate(plan, o)
		if est.total() >= c.limit || est.measurements == 0 {
			t.Errorf("%q: planned %v (%d measurements), want under %v", c.args, est.total(), est.measurements, c.limit)
		}
		if o.rounds < 3 {
			t.Errorf("%q: %d rounds", c.args, o.rounds)
		}
		cells := map[string][]int{}
		for _, cs := range plan {
			cells[cs.Store+"/"+cs.Workload] = append(cells[cs.Store+"/"+cs.Workload], cs.Callers)
			var limiter, policy []string
			for _, s := range cs.Systems {
				if alg, ok := strings.CutPrefix(s, policyPrefix); ok {
					policy = append(policy, alg)
				} else if alg, ok := strings.CutPrefix(s, "redlimit "); ok {
					limiter = append(limiter, alg)
				}
			}
			slices.Sort(limiter)
			slices.Sort(policy)
			switch cs.Store {
			case onRedis:
				wantL, wantP := slices.Sorted(slices.Values(c.limiter[cs.Workload])), slices.Sorted(slices.Values(c.policy[cs.Workload]))
				if !slices.Equal(limiter, wantL) || !slices.Equal(policy, wantP) || !slices.Contains(cs.Systems, "redis_rate") || !slices.Contains(cs.Systems, "Redisson script") {
					t.Errorf("%q: cell %s/%d systems %v", c.args, cs.Workload, cs.Callers, cs.Systems)
				}
			case onCluster:
				if cs.Workload != keysUniform || cs.Callers != 64 || !slices.Equal(cs.Systems, []string{policyPrefix + "fixed-window", policyPrefix + "token-bucket", "redis_rate"}) {
					t.Errorf("%q: Cluster cell %+v", c.args, cs)
				}
			case inMemory:
				if !slices.Equal(cs.Systems, []string{"memstore token-bucket", "memstore sliding-log", "memstore policy token-bucket", "x/time/rate", "go-limiter"}) {
					t.Errorf("%q: memory cell systems %v", c.args, cs.Systems)
				}
			}
		}
		// The floor: in one, half-peak (at its own half of peak and at
		// redlimit's pace) and the keys cells; --quick: one, and half-peak
		// at redlimit's pace. Never on the Cluster or in memory.
		for _, cs := range plan {
			var want []string
			switch {
			case cs.Store != onRedis || cs.Workload == denied:
			case cs.Workload == halfPeak && o.quick:
				want = []string{floorPacedName}
			case cs.Workload == halfPeak:
				want = []string{floorName, floorPacedName}
			case cs.Workload == one || !o.quick:
				want = []string{floorName}
			}
			got := slices.DeleteFunc(slices.Clone(cs.Systems), func(n string) bool { return !isFloor(n) })
			if !slices.Equal(got, want) {
				t.Errorf("%q: %s/%s/%d: floor %q, want %q", c.args, cs.Store, cs.Workload, cs.Callers, got, want)
			}
		}
		for _, k := range []string{"redis/one", "redis/keys-uniform", "redis/keys-zipf", "redis/denied", "redis/half-peak", "memory/one", "memory/keys-uniform", "memory/keys-zipf", "cluster/keys-uniform"} {
			want := c.callers
			if k == "cluster/keys-uniform" || o.quick && (k == "redis/denied" || k == "redis/half-peak" || k == "redis/keys-zipf" || k == "memory/keys-uniform" || k == "memory/keys-zipf") {
				want = []int{64}
			}
			if !slices.Equal(cells[k], want) {
				t.Errorf("%q: %s at callers %v, want %v", c.args, k, cells[k], want)
			}
		}
		t.Logf("%q: %d cells, %d measurements, planned %v", c.args, len(plan), est.measurements, est.total())
	}
	// --floor=false leaves the floor out, and so does a --systems that
	// does not match it.
	for _, args := range [][]string{{"--floor=false"}, {"--systems", "^redlimit"}} {
		o, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(buildPlan(o, systems()), func(c cellSpec) bool { return slices.ContainsFunc(c.Systems, isFloor) }) {
			t.Errorf("%q: a floor", args)
		}
	}
	// Without a system of redlimit's at half of peak, nothing to pace the
	// floor like.
	o, err := parseFlags([]string{"--systems", "floor|redis_rate", "--workloads", "one,half-peak"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range buildPlan(o, systems()) {
		if want := []string{"redis_rate", floorName}; !slices.Equal(cs.Systems, want) {
			t.Errorf("--systems floor|redis_rate: %s/%d: %q, want %q", cs.Workload, cs.Callers, cs.Systems, want)
		}
	}
	// --cluster=false, and --redis without --cluster, leave the Cluster out.
	for _, args := range [][]string{{"--cluster=false"}, {"--redis", "redis://127.0.0.1:1"}} {
		o, err := parseFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(buildPlan(o, systems()), func(c cellSpec) bool { return c.Store == onCluster }) {
			t.Errorf("%q: a Cluster cell", args)
		}
	}
}

// TestSequence: the keys workloads' draws stay within the keys; uniform
// spreads, Zipf favours the low ranks; the same every time.
func TestSequence(t *testing.T) {
	const keys = 1000
	u, z := sequence(keysUniform, keys, 1.1), sequence(keysZipf, keys, 1.1)
	if !slices.Equal(u, sequence(keysUniform, keys, 1.1)) {
		t.Error("the uniform draw differs between calls")
	}
	count := func(seq []int32, k int32) (n int) {
		for _, v := range seq {
			if v < 0 || v >= keys {
				t.Fatalf("index %d out of range", v)
			}
			if v == k {
				n++
			}
		}
		return n
	}
	perKey := len(u) / keys
	if n := count(u, 0); n < perKey/2 || n > 2*perKey {
		t.Errorf("uniform: key 0 drawn %d times of %d, want about %d", n, len(u), perKey)
	}
	if n := count(z, 0); n < 10*perKey {
		t.Errorf("Zipf: key 0 drawn %d times, want far more than %d", n, perKey)
	}
	if sequence(one, keys, 1.1) != nil {
		t.Error("a sequence for one limiter")
	}
}

// TestQuickRun runs the benchmark for real, tiny: --quick's plan, one
// round, 50 ms per measurement, 500 keys, against the redis-server it
// starts, and checks the JSON report is complete and well formed, the
// markdown has its tables, the SVG parses, and --from-json prints the same
// report again.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	jsonFile, mdFile, svgFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md"), filepath.Join(dir, "r.svg")
	var stdout, stderr bytes.Buffer
	args := []string{"--quick", "--rounds", "1", "--duration", "50ms", "--memory-duration", "20ms", "--warmup", "10ms", "--keys", "500",
		"--json", jsonFile, "--markdown", mdFile, "--svg", svgFile}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding the JSON: %v", err)
	}
	o, _ := parseFlags(args, io.Discard)
	all := systems()
	if wd, _ := os.Getwd(); !seedsAt(wd) {
		all = slices.DeleteFunc(all, func(s *system) bool { return s.Family == "redisson" })
	}
	plan := buildPlan(o, all)
	if len(rep.Cells) != len(plan) || rep.Settings.Measurements == 0 || !(rep.Settings.PlannedSec > 0) || !(rep.Settings.TotalSec > 0) {
		t.Fatalf("%d cells, want %d; settings %+v", len(rep.Cells), len(plan), rep.Settings)
	}
	n, floors := 0, 0
	for i, c := range rep.Cells {
		cs := plan[i]
		if c.Workload != cs.Workload || c.Store != cs.Store || c.Callers != cs.Callers || !slices.Equal(c.Systems, cs.Systems) {
			t.Errorf("cell %d is %s, planned %+v", i, c.ID, cs)
		}
		if len(c.Order) != 1 || len(c.Measurements) != len(c.Systems) || len(c.Summaries) != len(c.Systems) {
			t.Errorf("%s: order %v, %d measurements, %d summaries for %d systems", c.ID, c.Order, len(c.Measurements), len(c.Summaries), len(c.Systems))
		}
		redis := c.Store != inMemory
		for _, m := range c.Measurements {
			n++
			where := c.ID + " " + m.System
			if m.Errors != 0 {
				t.Errorf("%s: %d errors: %s", where, m.Errors, m.FirstError)
				continue
			}
			if m.Decisions == 0 || !(m.DecisionsPerSec > 0) || !(m.P99Ns > 0) || !(m.ClientCPUUs >= 0) || !(m.AllocsPerDecision >= 0) ||
				math.IsNaN(float64(m.LoadBefore)) || math.IsNaN(float64(m.LoadAfter)) {
				t.Errorf("%s: figures missing: %+v", where, m)
			}
			if redis != !math.IsNaN(float64(m.RedisCPUUs)) || redis != !math.IsNaN(float64(m.RedisCmds)) {
				t.Errorf("%s: Redis figures %v %v", where, m.RedisCPUUs, m.RedisCmds)
			}
			// Decisions not answered locally run commands (calls made
			// together share them).
			if redis && c.Workload != denied && !(m.RedisCmds > 0) {
				t.Errorf("%s: %v Redis commands per decision", where, m.RedisCmds)
			}
			if redis && (c.Workload == one || isKeys(c.Workload)) && !(m.BytesPerLimiter > 0) {
				t.Errorf("%s: bytes per limiter %v", where, m.BytesPerLimiter)
			}
			// On the Cluster, each node's share, the runs among them.
			if c.Store == onCluster {
				if len(m.Nodes) != clusterPrimaries || !(m.RedisRuns > 0) {
					t.Errorf("%s: %v runs per decision, nodes %+v", where, m.RedisRuns, m.Nodes)
				}
				for _, n := range m.Nodes {
					if !(n.RedisRuns > 0) || !(n.RedisCPUUs >= 0) {
						t.Errorf("%s: node %+v", where, n)
					}
				}
			} else if len(m.Nodes) != 0 {
				t.Errorf("%s: nodes off the Cluster: %+v", where, m.Nodes)
			}
			if c.Workload == denied && m.Granted > 1 {
				t.Errorf("%s: %d of %d granted", where, m.Granted, m.Decisions)
			}
			if c.Workload == halfPeak {
				// Half of its own peak; the floor at redlimit's pace, half
				// of the slowest of redlimit's peaks.
				like := m.System
				if m.System == floorPacedName {
					like = c.FloorPaceOf
					for _, name := range c.Systems {
						if strings.HasPrefix(name, "redlimit ") && rep.cell(c.Store, one, c.Callers).summary(name).DecisionsPerSec.Median <
							rep.cell(c.Store, one, c.Callers).summary(like).DecisionsPerSec.Median {
							t.Errorf("%s: paced like %s, but %s was slower", where, like, name)
						}
					}
				}
				p := rep.cell(c.Store, one, c.Callers).summary(like)
				if math.Abs(m.OfferedPerSec-float64(p.DecisionsPerSec.Median)/2) > 1e-6*m.OfferedPerSec {
					t.Errorf("%s: offered %v, %s made %v in one", where, m.OfferedPerSec, like, p.DecisionsPerSec.Median)
				}
			}
			// The floor: INCRBY, no script, its window capped (one command
			// per lone call: TestFloorCounts).
			if isFloor(m.System) {
				floors++
				if !(m.RedisCmdsBy["incrby"] >= 0.9*float64(m.RedisCmds)) || m.RedisRuns > 0.1*m.RedisCmds || m.Seconds > floorDuration.Seconds()*1.5 {
					t.Errorf("%s: commands %v, runs %v, window %vs", where, m.RedisCmdsBy, m.RedisRuns, m.Seconds)
				}
			}
		}
		// Every system against every peer of its cell, but at half of peak.
		want := 0
		if c.Workload != halfPeak {
			ours, peers := 0, 0
			for _, name := range c.Systems {
				switch s := rep.system(name); {
				case s.Baseline:
				case s.Peer:
					peers++
				default:
					ours++
				}
			}
			want = ours * peers * 2 // decisions/s and Redis CPU
			if !redis {
				want = ours * peers // Redis CPU: none in memory
			}
		}
		if len(c.Ratios) != want {
			t.Errorf("%s: %d ratios, want %d: %+v", c.ID, len(c.Ratios), want, c.Ratios)
		}
		// The floor is never in a ratio; each cell with one has its verdict.
		for _, q := range c.Ratios {
			if isFloor(q.System) || isFloor(q.Peer) {
				t.Errorf("%s: a ratio with the floor: %+v", c.ID, q)
			}
		}
		nf := slices.IndexFunc(c.Systems, isFloor)
		if (nf >= 0) != (len(c.Floor) > 0) {
			t.Errorf("%s: systems %q, floor verdicts %+v", c.ID, c.Systems, c.Floor)
		}
		for _, f := range c.Floor {
			// (a 50 ms window on a busy machine may not keep its load)
			if !slices.Contains([]string{"yes", "no", "load not kept"}, f.P99Verdict) || f.MeetsP99Target != (f.P99Verdict == "yes") || f.Others == 0 ||
				(f.System == floorPacedName) != (f.PaceOf != "") {
				t.Errorf("%s: floor verdict %+v", c.ID, f)
			}
		}
	}
	if floors == 0 {
		t.Error("the floor was not measured")
	}
	if n != rep.Settings.Measurements {
		t.Errorf("%d measurements, planned %d", n, rep.Settings.Measurements)
	}
	if rep.Machine.GoVersion == "" || rep.Machine.RedisVersion == "" || rep.Settings.ClientOptions == "" {
		t.Errorf("machine or settings missing: %+v %+v", rep.Machine, rep.Settings)
	}
	for _, s := range []string{"## Headline", "| one limiter | redlimit token-bucket | redis_rate |", "go-limiter", "## 500 keys (Zipf s=1.1)", "p99 <= 1 ms",
		"| 500 keys, uniform | redlimit policy token-bucket | redis_rate |", "| 500 keys, uniform (Cluster) | redlimit policy fixed-window | redis_rate |",
		"## 500 keys (uniform), every request granted, on a Redis Cluster of 3 primaries", "per node: Redis CPU/decision, runs/decision",
		"## The floor: one bare round trip", "| half of peak | 64 | " + floorPacedName + " |", "| one limiter | 1 | " + floorName + " |"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the report lacks %q:\n%s", s, stdout.String())
		}
	}
	if md, err := os.ReadFile(mdFile); err != nil || string(md) != stdout.String() {
		t.Errorf("--markdown wrote another report (%v)", err)
	}
	if !strings.Contains(stderr.String(), "planned: ") {
		t.Errorf("no planned duration on stderr:\n%s", stderr.String())
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
	if !bytes.Contains(svg, []byte("redis_rate")) || !bytes.Contains(svg, []byte("go-limiter")) {
		t.Error("the chart lacks systems")
	}
	if wd, _ := os.Getwd(); !seedsAt(wd) {
		t.Logf("no shared/seeds beside the tree: Redisson's script was left out (%s)", rep.Settings.RedissonScript)
	} else if !bytes.Contains(svg, []byte("Redisson script")) || !strings.Contains(rep.Settings.RedissonScript, seedFile) {
		t.Errorf("Redisson's script not measured: %q", rep.Settings.RedissonScript)
	}

	// The compare mode reads the JSON this version writes: a run against
	// itself is 1.0 in every cell (half-peak left out: paced).
	var self bytes.Buffer
	if err := run(context.Background(), []string{"--before", jsonFile, "--after", jsonFile}, &self, io.Discard); err != nil {
		t.Fatalf("--before/--after: %v", err)
	}
	cmp, err := compareFiles([]string{jsonFile}, []string{jsonFile})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, c := range cmp.Cells {
		if c.Workload == halfPeak {
			t.Errorf("half-peak compared")
		}
		for _, s := range c.Systems {
			rows++
			if s.Ratio.N != 1 || s.Ratio.Median != 1 || (c.Store != inMemory && s.CPURatio.Median != 1) {
				t.Errorf("%s/%s/%d %s against itself: %+v, Redis CPU %+v", c.Store, c.Workload, c.Callers, s.System, s.Ratio, s.CPURatio)
			}
		}
	}
	if want := fmt.Sprintf("**All %d hold.**", rows); rows == 0 || !strings.Contains(self.String(), want) {
		t.Errorf("%d rows; the comparison with itself lacks %q:\n%s", rows, want, self.String())
	}

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
}

func seedsAt(dir string) bool {
	_, err := findSeeds(dir)
	return err == nil
}

// TestWithoutSeeds: away from the source tree (no shared/seeds), the run
// leaves Redisson's script out, says so, and measures the others; over two
// rounds, in turn (the second round starting one system later); with
// --floor=false, no floor.
func TestWithoutSeeds(t *testing.T) {
	t.Chdir(t.TempDir())
	var stdout, stderr bytes.Buffer
	jsonFile := filepath.Join(t.TempDir(), "r.json")
	args := []string{"--quick", "--rounds", "2", "--duration", "30ms", "--memory-duration", "10ms", "--warmup", "10ms", "--workloads", "one", "--callers", "8", "--json", jsonFile, "--floor=false"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep report
	raw, err := os.ReadFile(jsonFile)
	if err == nil {
		err = json.Unmarshal(raw, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "Redisson's script left out") || !strings.HasPrefix(rep.Settings.RedissonScript, "left out: ") {
		t.Errorf("no note: settings %q, stderr:\n%s", rep.Settings.RedissonScript, stderr.String())
	}
	c := rep.cell(onRedis, one, 8)
	if c == nil || slices.Contains(c.Systems, "Redisson script") || !slices.Contains(c.Systems, "redis_rate") || len(c.Floor) > 0 ||
		slices.ContainsFunc(c.Systems, isFloor) || slices.ContainsFunc(rep.Systems, func(s system) bool { return s.Baseline }) {
		t.Fatalf("the Redis cell: %+v", c)
	}
	want := [][]string{{"redlimit sliding-log", "redlimit token-bucket", "redis_rate"}, {"redlimit token-bucket", "redis_rate", "redlimit sliding-log"}}
	if !slices.EqualFunc(c.Order, want, slices.Equal) {
		t.Errorf("rounds measured in the order %q, want %q", c.Order, want)
	}
	var got [][2]any
	for _, m := range c.Measurements {
		got = append(got, [2]any{m.Round, m.System})
	}
	if len(got) != 6 || got[2] != [2]any{1, "redis_rate"} || got[3] != [2]any{2, "redlimit token-bucket"} {
		t.Errorf("measurements in the order %v", got)
	}
	q := c.ratio("redlimit token-bucket", "redis_rate", "decisions_per_sec")
	if q == nil || q.N != 2 || len(q.PerRound) != 2 {
		t.Fatalf("ratio %+v", q)
	}
	for r := range 2 {
		a, b := c.rounds("redlimit token-bucket", metricOf("decisions_per_sec")), c.rounds("redis_rate", metricOf("decisions_per_sec"))
		if float64(q.PerRound[r]) != a[r]/b[r] {
			t.Errorf("round %d: ratio %v, want %v / %v", r+1, q.PerRound[r], a[r], b[r])
		}
	}
}

// TestUsage: bad flags are usage errors.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--callers", "0"}, {"--workloads", "nope"}, {"--systems", "("}, {"extra"}, {"--keys", "1"},
		{"--rounds", "0"}, {"--zipf", "1"}, {"--systems", "nothing-matches"}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if _, ok := err.(usageError); !ok {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestCommandDir: the report gives the command as its caller typed it,
// from where its paths are taken: "redlimit bench" from the repository's
// root or another folder (REDLIMIT_BENCH_CWD), "go run ." in bench/.
func TestCommandDir(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(here)
	for _, c := range []struct {
		cwd  string // REDLIMIT_BENCH_CWD; "": unset
		dir  string
		want string
	}{
		{"", "bench", "`go run . --json out.json` (in bench/)"},
		{root, ".", "`go run ./cmd/redlimit bench --json out.json` (from the repository's root)"},
		{filepath.Join(root, "docs"), "docs", "`redlimit bench --json out.json` (in docs/)"},
		{filepath.Dir(root), "", "`redlimit bench --json out.json`"},
	} {
		t.Setenv(WorkDirEnv, c.cwd)
		o, err := parseFlags([]string{"--json", "out.json"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.dir != c.dir {
			t.Errorf("from %q: dir %q, want %q", c.cwd, o.dir, c.dir)
		}
		rep := report{Args: o.args, Dir: o.dir}
		if got := rep.command(); got != c.want {
			t.Errorf("from %q: %s, want %s", c.cwd, got, c.want)
		}
	}
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

// TestShortOfGranted: where a workload means every call to be granted, a
// system refused some says so beside its ratios in the headline and in a
// granted column of its cell's table; a denied cell, all refusals, does
// not.
func TestShortOfGranted(t *testing.T) {
	rep := report{Systems: []system{
		{Name: "redlimit leaky-bucket", Store: onRedis, Family: "redlimit"},
		{Name: "redis_rate", Store: onRedis, Family: "redis_rate", Peer: true},
	}}
	byName := map[string]*system{}
	for i := range rep.Systems {
		byName[rep.Systems[i].Name] = &rep.Systems[i]
	}
	for _, wl := range []string{one, denied} {
		c := cell{Workload: wl, Store: onRedis, Callers: 64, Rounds: 1, Systems: []string{"redlimit leaky-bucket", "redis_rate"}}
		for name, granted := range map[string]float64{"redlimit leaky-bucket": 0.025, "redis_rate": 1} {
			m := newMeasurement()
			m.System, m.Round, m.DecisionsPerSec, m.GrantedFraction = name, 1, 100, granted
			c.Measurements = append(c.Measurements, m)
		}
		c.summarise(byName)
		rep.Cells = append(rep.Cells, c)
	}
	var out strings.Builder
	if err := rep.writeMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	if !strings.Contains(md, "| one limiter | redlimit leaky-bucket | redis_rate | 1.00x (2.5% granted) |") {
		t.Errorf("headline without the share granted:\n%s", md)
	}
	if strings.Count(md, "% granted)") != 1 {
		t.Errorf("a share noted where all were granted, or in the denied cell:\n%s", md)
	}
	oneTable, deniedTable, _ := strings.Cut(md[strings.Index(md, "## one limiter, every"):], "## one limiter used up")
	if !strings.Contains(oneTable, "| granted |") || !strings.Contains(oneTable, "| 2.5% |") {
		t.Errorf("the granted cell's table has no granted column:\n%s", oneTable)
	}
	if strings.Contains(deniedTable, "| granted |") {
		t.Errorf("the denied cell's table has a granted column:\n%s", deniedTable)
	}
}
