package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The compare mode (--before, --after) measures nothing: it reads the JSON
// of runs of two builds of redlimit (an older commit's bench and the
// current one, two processes since two versions of one module cannot be
// linked into one binary) and prints, per cell and system, after / before
// taken within each round, then the median and range of those ratios.
// The i-th file of --before and the i-th of --after are a pair, run one
// right after the other (scripts/benchcompare alternates which goes
// first); round r of a pair's cell is compared with round r of the other
// side's, so that a slow stretch of the machine that hits a round hits
// both sides of its ratio.

// comparison is the compare mode's result.
type comparison struct {
	Before, After []run1 // per pair
	// Order says, per pair, which side ran first ("before" or "after";
	// "" when the start times do not tell).
	Order []string
	Cells []cellComparison
	// Notes are what the reader must know about the inputs: cells or
	// systems only one side has, settings that differ, too few rounds.
	Notes []string
}

// run1 is one bench run read back: its file and what it says of itself.
type run1 struct {
	File string
	rep  *report
}

// cellComparison is one cell (store, workload, callers) in both builds.
type cellComparison struct {
	Store, Workload, Distribution string
	Callers, Limiters             int
	Systems                       []systemComparison
}

// systemComparison is one system of a cell in both builds: its
// decisions/s over every round of each side, and after / before taken
// within each round (decisions/s, and Redis CPU per decision where the
// runs have it), in the order pair 1 round 1, pair 1 round 2, ..., pair 2
// round 1, ...; NaN where either side lacks the round (errors, missing).
type systemComparison struct {
	System        string
	Before, After stat
	Ratio         stat
	PerRound      []float64
	CPURatio      stat
	CPUPerRound   []float64
}

// holds says whether the after build lost no speed in a cell: the median
// of the per-round ratios of decisions/s after / before is 1.0 or more, or
// the rounds' min-max reaches 1.0 (the difference is within what the
// rounds spread over). Only when every round was slower does it fail.
// why says which; no data (no round on both sides) does not hold.
func (s systemComparison) holds() (ok bool, why string) {
	switch {
	case s.Ratio.N == 0:
		return false, "no data"
	case float64(s.Ratio.Median) >= 1:
		return true, "yes (median ≥ 1)"
	case float64(s.Ratio.Max) >= 1:
		return true, "yes (1.0 within min-max)"
	}
	return false, "**NO** (slower in every round)"
}

// readReport reads one bench run's JSON.
func readReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rep.Cells) == 0 {
		return nil, fmt.Errorf("%s: no cells (not the JSON of a bench run?)", path)
	}
	return &rep, nil
}

// compareFiles reads the pairs of runs and compares them.
func compareFiles(before, after []string) (*comparison, error) {
	if len(before) == 0 || len(before) != len(after) {
		return nil, usageError{msg: fmt.Sprintf("--before and --after: as many files each, one pair per round (%d and %d)", len(before), len(after))}
	}
	var bs, as []run1
	for i := range before {
		b, err := readReport(before[i])
		if err != nil {
			return nil, err
		}
		a, err := readReport(after[i])
		if err != nil {
			return nil, err
		}
		bs, as = append(bs, run1{File: before[i], rep: b}), append(as, run1{File: after[i], rep: a})
	}
	return compareRuns(bs, as), nil
}

// compareRuns compares runs pair by pair (before[i] with after[i]); the
// cells and systems in the order of the first after run.
func compareRuns(before, after []run1) *comparison {
	cmp := &comparison{Before: before, After: after}
	for i := range before {
		cmp.Order = append(cmp.Order, firstOf(before[i].rep, after[i].rep))
	}
	note := func(format string, args ...any) {
		if s := fmt.Sprintf(format, args...); !slices.Contains(cmp.Notes, s) {
			cmp.Notes = append(cmp.Notes, s)
		}
	}
	// The cells and systems: those of every run, in the order met.
	type key struct {
		store, workload string
		callers         int
	}
	var keys []key
	systemsOf := map[key][]string{}
	for _, side := range [][]run1{after, before} {
		for _, r := range side {
			for _, c := range r.rep.Cells {
				k := key{c.Store, c.Workload, c.Callers}
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
				for _, s := range c.Systems {
					if !slices.Contains(systemsOf[k], s) {
						systemsOf[k] = append(systemsOf[k], s)
					}
				}
			}
		}
	}
	dps := metricOf("decisions_per_sec")
	cpu := metricOf("redis_cpu_us_per_decision")
	for _, k := range keys {
		if k.workload == halfPeak {
			// Paced at each build's own peak: its decisions/s is the
			// offered load, not a speed to compare.
			note("half-peak cells left out: their decisions/s is the offered load")
			continue
		}
		cc := cellComparison{Store: k.store, Workload: k.workload, Callers: k.callers}
		for _, name := range systemsOf[k] {
			sc := systemComparison{System: name}
			var bAll, aAll []float64
			for i := range before {
				bc, ac := before[i].rep.cell(k.store, k.workload, k.callers), after[i].rep.cell(k.store, k.workload, k.callers)
				for j, c := range []*cell{bc, ac} {
					file := []string{before[i].File, after[i].File}[j]
					if c == nil {
						note("%s has no cell %s/%s/%d callers", file, k.store, k.workload, k.callers)
					} else if !slices.Contains(c.Systems, name) {
						note("%s has no %q in %s/%s/%d callers", file, name, k.store, k.workload, k.callers)
					}
				}
				n := 0
				for _, c := range []*cell{bc, ac} {
					if c != nil {
						n = max(n, c.Rounds)
						if cc.Distribution == "" {
							cc.Distribution, cc.Limiters = c.Distribution, c.Limiters
						}
					}
				}
				bd, ad := roundsOf(bc, name, dps, n), roundsOf(ac, name, dps, n)
				bAll, aAll = append(bAll, bd...), append(aAll, ad...)
				sc.PerRound = append(sc.PerRound, perRoundRatios(ad, bd)...)
				sc.CPUPerRound = append(sc.CPUPerRound, perRoundRatios(roundsOf(ac, name, cpu, n), roundsOf(bc, name, cpu, n))...)
			}
			sc.Before, sc.After = summarise(bAll), summarise(aAll)
			sc.Ratio, sc.CPURatio = summarise(sc.PerRound), summarise(sc.CPUPerRound)
			cc.Systems = append(cc.Systems, sc)
		}
		cmp.Cells = append(cmp.Cells, cc)
	}
	if n := cmp.rounds(); n < 3 {
		note("%d round(s): the issue's comparison asks for at least 3", n)
	}
	// Runs that differ in what they measure are not comparable figure by
	// figure: say so.
	ref := after[0].rep.Settings
	for _, r := range append(slices.Clone(before), after...) {
		s := r.rep.Settings
		if s.DurationSec != ref.DurationSec || s.WarmupSec != ref.WarmupSec || s.Keys != ref.Keys || s.Zipf != ref.Zipf {
			note("%s was measured with other settings (duration %gs, warm-up %gs, %d keys) than %s (%gs, %gs, %d keys)",
				r.File, s.DurationSec, s.WarmupSec, s.Keys, after[0].File, ref.DurationSec, ref.WarmupSec, ref.Keys)
		}
	}
	for _, side := range [][]run1{before, after} {
		for _, r := range side[1:] {
			if r.rep.Machine.RedlimitCommit != side[0].rep.Machine.RedlimitCommit {
				note("%s measured commit %s, %s commit %s", r.File, r.rep.Machine.RedlimitCommit, side[0].File, side[0].rep.Machine.RedlimitCommit)
			}
		}
	}
	return cmp
}

// roundsOf is system's figure f in each of n rounds of c (NaN where c is
// nil, lacks the system, or the round had errors).
func roundsOf(c *cell, system string, f func(*measurement) float64, n int) []float64 {
	out := make([]float64, n)
	for r := range out {
		out[r] = math.NaN()
	}
	if c != nil {
		copy(out, c.rounds(system, f))
	}
	return out
}

// firstOf says which of two runs started first, by their start times.
func firstOf(before, after *report) string {
	b, errB := time.Parse(time.RFC3339, before.Machine.Date)
	a, errA := time.Parse(time.RFC3339, after.Machine.Date)
	switch {
	case errA != nil || errB != nil || a.Equal(b):
		return ""
	case b.Before(a):
		return "before"
	}
	return "after"
}

// rounds is the number of paired rounds: the per-round ratios of the
// first system compared.
func (cmp *comparison) rounds() int {
	for _, c := range cmp.Cells {
		for _, s := range c.Systems {
			return len(s.PerRound)
		}
	}
	return 0
}

// writeMarkdown prints the comparison.
func (cmp *comparison) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	side := func(name string, runs []run1) {
		m := runs[0].rep.Machine
		mod := "no file modified"
		if len(m.RedlimitModified) > 0 {
			mod = "modified: " + strings.Join(m.RedlimitModified, ", ")
		}
		var files []string
		for _, r := range runs {
			files = append(files, r.File)
		}
		pf("- %s: redlimit commit `%s`, %s; runs %s\n", name, m.RedlimitCommit, mod, strings.Join(files, ", "))
	}
	pf("## redlimit after / before\n\n")
	side("before", cmp.Before)
	side("after", cmp.After)
	var order []string
	for i, o := range cmp.Order {
		switch o {
		case "before":
			order = append(order, fmt.Sprintf("%d: before, after", i+1))
		case "after":
			order = append(order, fmt.Sprintf("%d: after, before", i+1))
		default:
			order = append(order, fmt.Sprintf("%d: ?", i+1))
		}
	}
	pf("- %d pairs of runs, %d rounds; which ran first, per pair (from their start times): %s\n", len(cmp.Before), cmp.rounds(), strings.Join(order, "; "))
	var load []string
	for i := range cmp.Before {
		load = append(load, fmt.Sprintf("%d: %s / %s", i+1, cmp.Before[i].rep.busy(), cmp.After[i].rep.busy()))
	}
	pf("- the machine's load, per pair (before / after; the median over a run's measurements of the one-minute load average, and of the CPUs other processes used): %s\n", strings.Join(load, "; "))
	a := cmp.After[0].rep
	pf("- a run: `bench %s`\n", strings.Join(a.Settings.quoteArgs(a.Args), " "))
	m, st := a.Machine, a.Settings
	pf("- per system and round: %gs measured after %gs of warm-up; keys workloads: %s limiters\n", st.DurationSec, st.WarmupSec, thousands(float64(st.Keys)))
	pf("- machine: %s, GOMAXPROCS %d (%d CPUs: %s), Redis %s\n", m.GoVersion, m.GOMAXPROCS, m.NumCPU, m.CPUModel, m.RedisVersion)
	pf("- figures: decisions/s median [min-max] over the rounds; after / before taken within each round, then its median [min-max] (above 1: the after build is faster; for Redis CPU per decision, below 1: it uses less); **holds**: the median of decisions/s after / before is 1.0 or more, or the rounds' min-max reaches 1.0\n\n")
	pf("| workload | callers | system | before decisions/s | after decisions/s | after / before | per round | Redis CPU/decision after / before | holds |\n")
	pf("|---|---:|---|---:|---:|---:|---|---:|---|\n")
	var held, total int
	var failed []string
	for _, c := range cmp.Cells {
		where := ""
		if c.Store == inMemory {
			where = " (memory)"
		}
		wl := c.Workload
		if c.Limiters > 0 {
			wl = workloadShort(c.Workload, c.Limiters, c.Distribution)
		}
		for _, s := range c.Systems {
			ok, why := s.holds()
			total++
			if ok {
				held++
			} else {
				failed = append(failed, fmt.Sprintf("%s%s, %d callers, %s", wl, where, c.Callers, s.System))
			}
			var per []string
			for _, x := range s.PerRound {
				per = append(per, ratio3(x))
			}
			pf("| %s%s | %d | %s | %s | %s | %s | %s | %s | %s |\n", wl, where, c.Callers, s.System,
				statText(s.Before, thousands), statText(s.After, thousands), ratioText3(s.Ratio), strings.Join(per, " "),
				ratioText3(s.CPURatio), why)
		}
	}
	pf("\n")
	if len(failed) == 0 {
		pf("**All %d hold.**\n", total)
	} else {
		pf("**%d of %d hold**; not: %s.\n", held, total, strings.Join(failed, "; "))
	}
	if len(cmp.Notes) > 0 {
		pf("\nNotes:\n\n")
		for _, n := range cmp.Notes {
			pf("- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// busy is how loaded the machine was during a run: the median over its
// measurements of the one-minute load average at the window's end, and of
// the CPUs other processes used in it ("-" where the run lacks them).
func (rep *report) busy() string {
	var load, other []float64
	for _, c := range rep.Cells {
		for _, m := range c.Measurements {
			load, other = append(load, float64(m.LoadAfter)), append(other, float64(m.OtherCPUs))
		}
	}
	return fmt.Sprintf("load %s, other CPUs %s", twoDigits(float64(summarise(load).Median)), twoDigits(float64(summarise(other).Median)))
}

// ratio3 prints one ratio with three decimals ("-" for NaN): a verdict
// against 1.0 must not be hidden by the rounding.
func ratio3(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.3f", x)
}

// ratioText3 prints a ratio's stat as "1.023x [0.981-1.052]".
func ratioText3(s stat) string {
	switch s.N {
	case 0:
		return "-"
	case 1:
		return ratio3(float64(s.Median)) + "x"
	}
	return fmt.Sprintf("%sx [%s-%s]", ratio3(float64(s.Median)), ratio3(float64(s.Min)), ratio3(float64(s.Max)))
}
