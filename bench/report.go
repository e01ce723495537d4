package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
)

// result is one cell: a system under a workload with a number of callers.
type result struct {
	System   string `json:"system"`
	Store    string `json:"store"`
	Workload string `json:"workload"`
	Callers  int    `json:"callers"`
	Limiters int    `json:"limiters"`
	Limit    string `json:"limit"`
	// OfferedPerSec is the paced load offered (mixed on Redis, half-peak);
	// 0: the callers called as fast as they could. OfferedKept (paced
	// cells only): decisions/s reached offeredKeptAt of it; AchievedFraction
	// is decisions/s / offered.
	OfferedPerSec    float64 `json:"offered_per_sec,omitempty"`
	OfferedKept      *bool   `json:"offered_kept,omitempty"`
	AchievedFraction float64 `json:"achieved_fraction,omitempty"`
	Seconds          float64 `json:"seconds"`
	Decisions        uint64  `json:"decisions"`
	Granted          uint64  `json:"granted"`
	Refused          uint64  `json:"refused"`
	GrantedFraction  float64 `json:"granted_fraction"`
	DecisionsPerSec  float64 `json:"decisions_per_sec"`
	// NsPerOp is wall time per decision across all callers (1e9 /
	// decisions_per_sec), as Go's RunParallel benchmarks report it.
	NsPerOp        float64 `json:"ns_per_op"`
	P50Ns          float64 `json:"p50_ns"`
	P99Ns          float64 `json:"p99_ns"`
	P999Ns         float64 `json:"p999_ns"`
	LatencySamples uint64  `json:"latency_samples"`
	LatencyNote    string  `json:"latency_note,omitempty"`
	// Open loop (half-peak) only: p99 from the scheduled start as
	// measured, the load generator's timer lateness included, and the p99
	// of that lateness (calls whose caller slept until their time; see
	// runLoad).
	P99RawNs      float64 `json:"p99_raw_from_schedule_ns,omitempty"`
	TimerLagP99Ns float64 `json:"timer_lag_p99_ns,omitempty"`
	// RedisCPUMicros is Redis's CPU time (user + system, INFO cpu) in the
	// measured window per decision, in µs; null in memory.
	RedisCPUMicros  *float64 `json:"redis_cpu_us_per_decision"`
	BytesPerLimiter *float64 `json:"bytes_per_limiter"`
	BytesWhat       string   `json:"bytes_what,omitempty"`
	// OtherCPUs is the CPU other processes used during the window, in
	// CPUs (see noise.go); null when unknown. Attempts counts the
	// measurements made: a disturbed cell is measured again and the least
	// disturbed attempt kept.
	OtherCPUs  *float64 `json:"other_cpus"`
	Attempts   int      `json:"attempts"`
	Errors     uint64   `json:"errors"`
	FirstError string   `json:"first_error,omitempty"`
}

func (r *result) fill(l *load) {
	r.Seconds = l.seconds
	r.Granted, r.Refused, r.Decisions = l.granted, l.refused, l.decisions()
	r.Errors = l.errors
	r.FirstError = l.firstErr
	if r.Decisions > 0 {
		r.GrantedFraction = float64(r.Granted) / float64(r.Decisions)
		r.DecisionsPerSec = float64(r.Decisions) / l.seconds
		r.NsPerOp = 1e9 / r.DecisionsPerSec
	}
	r.LatencySamples = l.hist.n
	if l.hist.n > 0 {
		r.P50Ns, r.P99Ns, r.P999Ns = l.hist.quantile(0.50), l.hist.quantile(0.99), l.hist.quantile(0.999)
	}
	if l.rawHist.n > 0 {
		r.P99RawNs = l.rawHist.quantile(0.99)
	}
	if l.lagHist.n > 0 {
		r.TimerLagP99Ns = l.lagHist.quantile(0.99)
	}
	if r.OfferedPerSec > 0 {
		r.AchievedFraction = r.DecisionsPerSec / r.OfferedPerSec
		kept := r.AchievedFraction >= offeredKeptAt
		r.OfferedKept = &kept
	}
	if r.Store == onRedis && l.before.redisOK && l.after.redisOK && r.Decisions > 0 {
		us := (l.after.redis - l.before.redis) / float64(r.Decisions) * 1e6
		r.RedisCPUMicros = &us
	}
	if o, ok := otherCPUs(l.before, l.after, l.seconds); ok {
		r.OtherCPUs = &o
	}
}

// offeredKeptAt is the share of a paced cell's offered load its decisions/s
// must reach for the load to count as kept (the window's edges cost a call
// per caller at most).
const offeredKeptAt = 0.95

// offered prints a paced cell's offered load and whether it was kept.
func (r *result) offered() string {
	if r.OfferedPerSec <= 0 {
		return "-"
	}
	s := thousands(r.OfferedPerSec)
	if r.OfferedKept != nil && !*r.OfferedKept {
		s += fmt.Sprintf(" NOT KEPT (%.0f%%)", 100*r.AchievedFraction)
	}
	return s
}

func (r *result) progress() string {
	s := fmt.Sprintf("%-38s %-9s %4d callers  %12s/s  %5.1f%% granted  p50 %s  p99 %s", r.System, r.Workload, r.Callers,
		thousands(r.DecisionsPerSec), 100*r.GrantedFraction, dur(r.P50Ns), dur(r.P99Ns))
	if r.OfferedPerSec > 0 {
		s += fmt.Sprintf("  (paced: %s/s offered", thousands(r.OfferedPerSec))
		if r.OfferedKept != nil && !*r.OfferedKept {
			s += fmt.Sprintf(", NOT KEPT: %.0f%%", 100*r.AchievedFraction)
		}
		s += ")"
	}
	if r.OtherCPUs != nil {
		s += fmt.Sprintf("  other CPU %.2f", *r.OtherCPUs)
	}
	if r.Attempts > 1 {
		s += fmt.Sprintf(" (best of %d)", r.Attempts)
	}
	if r.Errors > 0 {
		s += fmt.Sprintf("  %d ERRORS (%s)", r.Errors, r.FirstError)
	}
	return s
}

// settings are the run's.
type settings struct {
	DurationSec    float64  `json:"duration_sec"`
	WarmupSec      float64  `json:"warmup_sec"`
	Callers        []int    `json:"callers"`
	Workloads      []string `json:"workloads"`
	Keys           int      `json:"keys"`
	Quick          bool     `json:"quick"`
	MaxOtherCPU    float64  `json:"max_other_cpu"`
	Retries        int      `json:"retries"`
	RedissonScript string   `json:"redisson_script,omitempty"`
	TotalSec       float64  `json:"total_sec"`
}

// report is everything the run found.
type report struct {
	Machine  machine  `json:"machine"`
	Args     []string `json:"args"`
	Settings settings `json:"settings"`
	Systems  []system `json:"systems"`
	Results  []result `json:"results"`
	Ratios   []ratio  `json:"ratios"`
	// HalfPeak checks issue 6's target, per Redis system (see
	// halfPeakChecks).
	HalfPeak []halfPeakCheck `json:"half_peak_p99"`
}

// halfPeakTargetNs is issue 6's target: p99 latency at half of peak
// throughput at most 1 ms on the Redis store.
const halfPeakTargetNs = 1e6

// halfPeakCheck is a Redis system's half-peak cell at the callers compared
// (64 when measured) against halfPeakTargetNs.
type halfPeakCheck struct {
	System        string  `json:"system"`
	Callers       int     `json:"callers"`
	PeakPerSec    float64 `json:"peak_per_sec"` // the granted cell's decisions/s
	OfferedPerSec float64 `json:"offered_per_sec"`
	OfferedKept   bool    `json:"offered_kept"`
	P99Ns         float64 `json:"p99_ns"`
	TargetNs      float64 `json:"target_ns"`
	// Met: the offered load was kept, without errors, at a p99 within the
	// target.
	Met bool `json:"met"`
}

// halfPeakChecks lists, per Redis system with a half-peak cell at the
// compared callers (chartCallers: 64 when measured), its p99 against the
// target.
func halfPeakChecks(rep *report) []halfPeakCheck {
	callers := rep.chartCallers()
	var out []halfPeakCheck
	for _, s := range rep.Systems {
		r := rep.find(s.Name, halfPeak, callers)
		if s.Store != onRedis || r == nil {
			continue
		}
		c := halfPeakCheck{System: s.Name, Callers: callers, OfferedPerSec: r.OfferedPerSec, P99Ns: r.P99Ns, TargetNs: halfPeakTargetNs}
		if g := rep.find(s.Name, "granted", callers); g != nil {
			c.PeakPerSec = g.DecisionsPerSec
		}
		c.OfferedKept = r.OfferedKept != nil && *r.OfferedKept
		c.Met = c.OfferedKept && r.Errors == 0 && r.P99Ns > 0 && r.P99Ns <= halfPeakTargetNs
		out = append(out, c)
	}
	return out
}

func (rep *report) find(system, workload string, callers int) *result {
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.System == system && r.Workload == workload && r.Callers == callers {
			return r
		}
	}
	return nil
}

// throughput is a cell's decisions/s, 0 when it was not measured cleanly.
func (rep *report) throughput(system, workload string, callers int) float64 {
	if r := rep.find(system, workload, callers); r != nil && r.Errors == 0 {
		return r.DecisionsPerSec
	}
	return 0
}

// ratio compares two systems in one cell: A/B of a metric.
type ratio struct {
	What     string  `json:"what"`
	Workload string  `json:"workload"`
	Callers  int     `json:"callers"`
	Metric   string  `json:"metric"` // decisions_per_sec, ns_per_op, redis_cpu_us_per_decision, p99_ns
	A        string  `json:"a"`
	B        string  `json:"b"`
	AValue   float64 `json:"a_value"`
	BValue   float64 `json:"b_value"`
	Ratio    float64 `json:"ratio"` // a_value / b_value
}

// ratioCallers is where the Redis systems are compared.
const ratioCallers = 64

// ratios compares, within the run: redlimit (its best variant, its best
// plain variant, and the like-for-like algorithm) against redis_rate and
// Redisson's script at 64 callers, granted and mixed; and memstore against
// x/time/rate in ns/op for every workload and number of callers.
func ratios(results []result) []ratio {
	rep := &report{Results: results}
	var out []ratio
	add := func(what, workload string, callers int, metric string, a, b *result) {
		if a == nil || b == nil || a.Errors > 0 || b.Errors > 0 {
			return
		}
		av, bv := metricOf(a, metric), metricOf(b, metric)
		if !(av > 0) || !(bv > 0) {
			return
		}
		out = append(out, ratio{What: what, Workload: workload, Callers: callers, Metric: metric, A: a.System, B: b.System, AValue: av, BValue: bv, Ratio: av / bv})
	}
	best := func(workload string, plainOnly bool) *result {
		var b *result
		for i := range results {
			r := &results[i]
			if !strings.HasPrefix(r.System, "redlimit ") || r.Workload != workload || r.Callers != ratioCallers || r.Errors > 0 {
				continue
			}
			if plainOnly && strings.HasSuffix(r.System, "+autopipeline") {
				continue
			}
			// Only variants that did what the workload asks: granted grants
			// (the leaky bucket grants one TryAcquire per ms at most), mixed
			// refuses about half.
			if f := r.GrantedFraction; (workload == "granted" && f < 0.99) || (workload == "mixed" && (f < 0.2 || f > 0.8)) {
				continue
			}
			if b == nil || r.DecisionsPerSec > b.DecisionsPerSec {
				b = r
			}
		}
		return b
	}
	for _, w := range []string{"granted", "mixed"} {
		rr := rep.find("redis_rate", w, ratioCallers)
		rs := rep.find("Redisson script", w, ratioCallers)
		for _, peer := range []*result{rr, rs} {
			if peer == nil {
				continue
			}
			like := "redlimit token-bucket" // GCRA is a token bucket
			if peer == rs {
				like = "redlimit sliding-log" // Redisson's is a sliding log
			}
			add("redlimit best variant vs "+peer.System, w, ratioCallers, "decisions_per_sec", best(w, false), peer)
			add("redlimit best plain (no autopipeline) vs "+peer.System, w, ratioCallers, "decisions_per_sec", best(w, true), peer)
			add("like for like ("+like+", plain) vs "+peer.System, w, ratioCallers, "decisions_per_sec", rep.find(like, w, ratioCallers), peer)
			add("like for like ("+like+", plain) vs "+peer.System, w, ratioCallers, "redis_cpu_us_per_decision", rep.find(like, w, ratioCallers), peer)
			add("like for like ("+like+", plain) vs "+peer.System, w, ratioCallers, "p99_ns", rep.find(like, w, ratioCallers), peer)
		}
	}
	var callers []int
	for _, r := range results {
		if r.System == "x/time/rate" && r.Workload == "granted" {
			callers = append(callers, r.Callers)
		}
	}
	for _, w := range workloadNames {
		for _, c := range callers {
			x := rep.find("x/time/rate", w, c)
			for _, m := range []string{"memstore token-bucket", "memstore sliding-log"} {
				add(m+" vs x/time/rate", w, c, "ns_per_op", rep.find(m, w, c), x)
			}
		}
	}
	return out
}

func metricOf(r *result, metric string) float64 {
	switch metric {
	case "decisions_per_sec":
		return r.DecisionsPerSec
	case "ns_per_op":
		return r.NsPerOp
	case "p99_ns":
		return r.P99Ns
	case "redis_cpu_us_per_decision":
		if r.RedisCPUMicros != nil {
			return *r.RedisCPUMicros
		}
	}
	return math.NaN()
}

// writeText prints the table and the ratios.
func (rep *report) writeText(w io.Writer) error {
	m := rep.Machine
	fmt.Fprintf(w, "%s, GOMAXPROCS %d (%d CPUs: %s), %s/%s; Redis %s\n", m.GoVersion, m.GOMAXPROCS, m.NumCPU, m.CPUModel, m.GOOS, m.GOARCH, m.RedisVersion)
	fmt.Fprintf(w, "%.2gs measured per cell after %.2gs of warm-up; limits: granted %s on Redis, %s in memory; denied %s (used up); keys %d limiters at the granted limit;\n"+
		"mixed: per %s, in memory half the system's granted throughput (closed loop), on Redis paced at 0.8 x it with a limit of half that (0.4 x);\n"+
		"half-peak (Redis only): the granted limit, paced open loop at %.1f x the system's granted throughput, latency from each call's scheduled start.\n\n",
		rep.Settings.DurationSec, rep.Settings.WarmupSec, grantedRedis, grantedMemory, deniedLimit, rep.Settings.Keys, mixedInterval, halfPeakShare)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tworkload\tcallers\tdecisions/s\toffered/s\tgranted\tp50\tp99\tp99.9\tRedis CPU/decision\tbytes/limiter\tother CPU\terrors\t")
	for _, r := range rep.Results {
		cpu, bytes, other := "-", "-", "-"
		if r.OtherCPUs != nil {
			other = fmt.Sprintf("%.2f", *r.OtherCPUs)
		}
		if r.RedisCPUMicros != nil {
			cpu = fmt.Sprintf("%.1fµs", *r.RedisCPUMicros)
		}
		if r.BytesPerLimiter != nil {
			bytes = thousands(*r.BytesPerLimiter)
			if r.Store == inMemory {
				bytes += " (heap)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.System, r.Workload, r.Callers, thousands(r.DecisionsPerSec),
			r.offered(), 100*r.GrantedFraction, dur(r.P50Ns), dur(r.P99Ns), dur(r.P999Ns), cpu, bytes, other, r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	errs := false
	for _, r := range rep.Results {
		if r.Errors > 0 {
			fmt.Fprintf(w, "\nerrors in %s / %s / %d callers: %s", r.System, r.Workload, r.Callers, r.FirstError)
			errs = true
		}
	}
	if errs {
		fmt.Fprintln(w)
	}
	if err := rep.writeHalfPeak(w); err != nil {
		return err
	}
	if len(rep.Ratios) == 0 {
		return nil
	}
	fmt.Fprint(w, "\nRatios (A / B, within this run):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "comparison\tworkload\tcallers\tmetric\tA\tB\tA/B\t")
	for _, q := range rep.Ratios {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%.2fx\t\n", strings.Replace(q.What, " vs ", " ("+q.A+") vs ", 1), q.Workload, q.Callers, q.Metric, num(q.AValue), num(q.BValue), q.Ratio)
	}
	return tw.Flush()
}

// writeHalfPeak prints a line per Redis system: its p99 at half of peak
// against issue 6's target (recomputed from the results, so that
// --from-json prints it for any run that measured half-peak).
func (rep *report) writeHalfPeak(w io.Writer) error {
	checks := halfPeakChecks(rep)
	if len(checks) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\np99 latency at half of peak throughput (half-peak, %d callers) against the target, %s:\n", checks[0].Callers, dur(halfPeakTargetNs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "system\tpeak/s (granted)\toffered/s\tp99\tp99 <= %s\tp99 incl. the load generator's lateness\t\n", dur(halfPeakTargetNs))
	for _, c := range checks {
		verdict := "met"
		switch r := rep.find(c.System, halfPeak, c.Callers); {
		case r.Errors > 0 || !(r.P99Ns > 0):
			verdict = "NOT MEASURED: errors"
		case !c.OfferedKept:
			verdict = "NOT MET: offered load not kept"
		case !c.Met:
			verdict = "NOT MET"
		}
		r := rep.find(c.System, halfPeak, c.Callers)
		if f := r.GrantedFraction; r.Errors == 0 && f < 0.99 {
			verdict += fmt.Sprintf(" (%.1f%% granted)", 100*f)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", c.System, thousands(c.PeakPerSec), r.offered(), dur(c.P99Ns), verdict, dur(r.P99RawNs))
	}
	return tw.Flush()
}

func (rep *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (rep *report) writeSVG(path string) error {
	var buf bytes.Buffer
	if err := rep.chart(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// thousands prints v rounded, with thousands separators.
func thousands(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// num prints a ratio's operand.
func num(v float64) string {
	if v >= 100 {
		return thousands(v)
	}
	return fmt.Sprintf("%.3g", v)
}

// dur prints ns as a short duration.
func dur(ns float64) string {
	switch {
	case math.IsNaN(ns) || ns == 0:
		return "-"
	case ns < 1e3:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3gms", ns/1e6)
	}
	return fmt.Sprintf("%.3gs", ns/1e9)
}
