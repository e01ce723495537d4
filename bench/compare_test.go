package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixtures are the compare mode's test inputs: three rounds of a before
// build and an after build, each a run of one round as
// scripts/benchcompare makes them, with figures chosen for the ratios
// after / before below (see TestCompare). The after runs also have a cell
// the before runs lack, and a round with errors.
func fixtures(side string) []string {
	var out []string
	for _, r := range []string{"1", "2", "3"} {
		out = append(out, filepath.Join("testdata", "compare", "round"+r+"-"+side+".json"))
	}
	return out
}

// near compares ratios computed by division with the expected decimals.
func near(got nf, want float64) bool { return math.Abs(float64(got)-want) < 1e-9 }

// TestCompare: the ratios are after / before within each round (pair i's
// round with pair i's), their median and min-max over the rounds; a round
// with errors on either side counts for neither; a cell one side lacks
// has no ratio and a note; which side ran first comes from the start
// times.
func TestCompare(t *testing.T) {
	cmp, err := compareFiles(fixtures("before"), fixtures("after"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"before", "after", "before"}; !slices.Equal(cmp.Order, want) {
		t.Errorf("order %v, want %v", cmp.Order, want)
	}
	var cells []string
	for _, c := range cmp.Cells {
		cells = append(cells, fmt.Sprintf("%s/%d", c.Workload, c.Callers))
	}
	if want := []string{"one/8", "keys-uniform/64", "one/64"}; !slices.Equal(cells, want) {
		t.Fatalf("cells %v, want %v", cells, want)
	}
	get := func(ci int, system string) systemComparison {
		t.Helper()
		for _, s := range cmp.Cells[ci].Systems {
			if s.System == system {
				return s
			}
		}
		t.Fatalf("cell %d has no %s", ci, system)
		return systemComparison{}
	}
	nan := math.NaN()
	for _, c := range []struct {
		cell                int
		system              string
		perRound            []float64
		med, min, maxv      float64
		n                   int
		cpuMed, cpuMin, cpu float64
		cpuN                int
		holds               bool
		why                 string
	}{
		// 1100/1000, 900/1000, 1000/800: median 1.1, not the ratio of
		// the medians (1000/1000).
		{0, "redlimit token-bucket", []float64{1.1, 0.9, 1.25}, 1.1, 0.9, 1.25, 3, 1.0, 0.9, 1.2, 3, true, "yes (median ≥ 1)"},
		{0, "redlimit sliding-log", []float64{0.8, 0.9, 0.95}, 0.9, 0.8, 0.95, 3, 1, 1, 1, 3, false, "**NO** (slower in every round)"},
		{1, "redlimit token-bucket", []float64{0.95, 1.05, 0.9}, 0.95, 0.9, 1.05, 3, 1, 1, 1, 3, true, "yes (1.0 within min-max)"},
		// Round 2 of the after run had an error: no ratio that round (a
		// median of two); round 3 has no Redis CPU after.
		{1, "redlimit sliding-log", []float64{1.0, nan, 1.2}, 1.1, 1.0, 1.2, 2, 0.5, 0.5, 0.5, 1, true, "yes (median ≥ 1)"},
	} {
		s := get(c.cell, c.system)
		where := cells[c.cell] + " " + c.system
		if len(s.PerRound) != len(c.perRound) {
			t.Fatalf("%s: per round %v, want %v", where, s.PerRound, c.perRound)
		}
		for r, want := range c.perRound {
			if got := s.PerRound[r]; math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && !near(nf(got), want)) {
				t.Errorf("%s: round %d ratio %v, want %v", where, r+1, got, want)
			}
		}
		if !near(s.Ratio.Median, c.med) || !near(s.Ratio.Min, c.min) || !near(s.Ratio.Max, c.maxv) || s.Ratio.N != c.n {
			t.Errorf("%s: ratio %+v, want %v [%v-%v] over %d", where, s.Ratio, c.med, c.min, c.maxv, c.n)
		}
		if !near(s.CPURatio.Median, c.cpuMed) || !near(s.CPURatio.Min, c.cpuMin) || !near(s.CPURatio.Max, c.cpu) || s.CPURatio.N != c.cpuN {
			t.Errorf("%s: Redis CPU ratio %+v, want %v [%v-%v] over %d", where, s.CPURatio, c.cpuMed, c.cpuMin, c.cpu, c.cpuN)
		}
		if ok, why := s.holds(); ok != c.holds || why != c.why {
			t.Errorf("%s: holds %v %q, want %v %q", where, ok, why, c.holds, c.why)
		}
	}
	// The sides' own figures: medians and ranges over the rounds.
	s := get(0, "redlimit token-bucket")
	if !near(s.Before.Median, 1000) || !near(s.Before.Min, 800) || !near(s.After.Median, 1000) || !near(s.After.Max, 1100) || s.After.N != 3 {
		t.Errorf("one/8 token bucket: before %+v, after %+v", s.Before, s.After)
	}
	if s := get(1, "redlimit sliding-log"); s.After.N != 2 || !near(s.After.Median, 290) {
		t.Errorf("keys sliding log after %+v, want median 290 of 2 rounds (the one with errors left out)", s.After)
	}
	if s := get(2, "redlimit token-bucket"); s.Ratio.N != 0 || len(s.PerRound) != 3 {
		t.Errorf("one/64, before has none: %+v", s)
	} else if ok, why := s.holds(); ok || why != "no data" {
		t.Errorf("one/64: holds %v %q", ok, why)
	}
	for _, r := range []string{"1", "2", "3"} {
		want := filepath.Join("testdata", "compare", "round"+r+"-before.json") + " has no cell redis/one/64 callers"
		if !slices.Contains(cmp.Notes, want) {
			t.Errorf("no note %q: %q", want, cmp.Notes)
		}
	}
	if len(cmp.Notes) != 3 {
		t.Errorf("notes %q, want the 3 missing cells only", cmp.Notes)
	}

	var b bytes.Buffer
	if err := cmp.writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"- before: redlimit commit `b316ac2b3e387ad3c9b0418bd127cac38cdccacc`, no file modified",
		"- after: redlimit commit `1111111111111111111111111111111111111111`",
		"1: before, after; 2: after, before; 3: before, after",
		"1: load 1.50, other CPUs 0.25 / load 2.50, other CPUs 0.50;",
		"| one limiter | 8 | redlimit token-bucket | 1,000 [800-1,000] | 1,000 [900-1,100] | 1.100x [0.900-1.250] | 1.100 0.900 1.250 | 1.000x [0.900-1.200] | yes (median ≥ 1) |",
		"| one limiter | 8 | redlimit sliding-log | 1,000 [1,000-1,000] | 900 [800-950] | 0.900x [0.800-0.950] | 0.800 0.900 0.950 | 1.000x [1.000-1.000] | **NO** (slower in every round) |",
		"| 100,000 keys, uniform | 64 | redlimit sliding-log | 200 [100-400] | 290 [100-480] | 1.100x [1.000-1.200] | 1.000 - 1.200 | 0.500x | yes (median ≥ 1) |",
		"| one limiter | 64 | redlimit token-bucket | - | 5,000 [5,000-5,000] | - | - - - | - | no data |",
		"**3 of 5 hold**; not: one limiter, 8 callers, redlimit sliding-log; one limiter, 64 callers, redlimit token-bucket.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// TestCompareCommand: --before and --after run the compare mode (nothing
// measured, no Redis started), print what writeMarkdown prints and write it
// to --markdown; unequal lists are a usage error, a file that is not a
// bench run's JSON an error naming it.
func TestCompareCommand(t *testing.T) {
	md := filepath.Join(t.TempDir(), "cmp.md")
	var stdout bytes.Buffer
	args := []string{"--before", strings.Join(fixtures("before"), ","), "--after", strings.Join(fixtures("after"), ","), "--markdown", md}
	if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	cmp, err := compareFiles(fixtures("before"), fixtures("after"))
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := cmp.writeMarkdown(&want); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != want.String() {
		t.Errorf("printed\n%s\nwant\n%s", stdout.String(), want.String())
	}
	if b, err := os.ReadFile(md); err != nil || string(b) != want.String() {
		t.Errorf("--markdown wrote %q (%v)", b, err)
	}

	for _, args := range [][]string{
		{"--before", fixtures("before")[0], "--after", strings.Join(fixtures("after")[:2], ",")},
		{"--before", fixtures("before")[0]},
		{"--after", fixtures("after")[0]},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	notBench := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(notBench, []byte(`{"name": "something else"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"--before", notBench, "--after", fixtures("after")[0]}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), notBench) {
		t.Errorf("comparing %s: %v, want an error naming it", notBench, err)
	}
}
