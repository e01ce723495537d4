package storetest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
)

// TestCasesWellFormed: each case has a name of its own and runs one way:
// once (fn) or per algorithm (each).
func TestCasesWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range cases {
		if c.name == "" || seen[c.name] {
			t.Errorf("case %q: empty or repeated name", c.name)
		}
		seen[c.name] = true
		if (c.fn == nil) == (c.each == nil) {
			t.Errorf("case %q: want exactly one of fn and each", c.name)
		}
	}
}

// TestFullHasEveryCapability: Full declares every capability the suite
// knows, so that a store declaring Full runs a capability's cases as soon
// as it is added.
func TestFullHasEveryCapability(t *testing.T) {
	full := Full()
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() == reflect.Bool && !v.Field(i).Bool() {
			t.Errorf("Full().%s is false", f.Name)
		}
	}
	if !reflect.DeepEqual(full.Algorithms, redlimit.Algorithms) {
		t.Errorf("Full().Algorithms = %v; want %v", full.Algorithms, redlimit.Algorithms)
	}
	for _, c := range cases {
		if why := unmet(c.needs, full); why != "" {
			t.Errorf("case %q is skipped under Full(): %s", c.name, why)
		}
	}
}

// TestEachCapabilitySkipsItsCases: a store lacking one capability skips
// at least one case, whose reason names that capability, and runs every
// case that does not need it; one lacking an algorithm skips the cases
// written for it.
func TestEachCapabilitySkipsItsCases(t *testing.T) {
	v := reflect.ValueOf(Full())
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Bool {
			continue
		}
		caps := Full()
		reflect.ValueOf(&caps).Elem().Field(i).SetBool(false)
		skipped := 0
		for _, c := range cases {
			why := unmet(c.needs, caps)
			if why == "" {
				continue
			}
			skipped++
			if !strings.Contains(why, f.Name) {
				t.Errorf("without %s, case %q is skipped for another reason: %s", f.Name, c.name, why)
			}
		}
		if skipped == 0 {
			t.Errorf("without %s no case is skipped: no case needs it, or unmet ignores it", f.Name)
		}
	}
	caps := Full()
	caps.Algorithms = []redlimit.Algorithm{redlimit.SlidingLog, redlimit.FixedWindow, redlimit.SlidingCounter, redlimit.LeakyBucket}
	for _, name := range []string{"CancelStormLarge", "MaxWaitBoundsQueue", "AlgorithmChange", "MicrosecondTokenBucket"} {
		for _, c := range cases {
			if c.name == name && !strings.Contains(unmet(c.needs, caps), "algorithm token-bucket") {
				t.Errorf("a store without token-bucket runs %s (%q)", name, unmet(c.needs, caps))
			}
		}
	}
}

// TestCapabilitiesCheck: Run refuses a declaration without algorithms or
// with one redlimit does not know.
func TestCapabilitiesCheck(t *testing.T) {
	for _, c := range []Capabilities{
		{},
		{Algorithms: []redlimit.Algorithm{"magic"}},
	} {
		if err := c.check(); err == nil {
			t.Errorf("check(%+v) = nil; want an error", c)
		}
	}
	if err := Full().check(); err != nil {
		t.Errorf("check(Full()) = %v", err)
	}
}

// TestEveryAlgorithmHasACase: the per-algorithm cases know every
// algorithm of redlimit.Algorithms, and each config they make is valid and
// of that algorithm.
func TestEveryAlgorithmHasACase(t *testing.T) {
	for _, a := range redlimit.Algorithms {
		ac, ok := algorithmCases[a]
		if !ok {
			t.Errorf("no algorithmCases entry for %s", a)
			continue
		}
		for _, c := range []redlimit.Config{ac.every, ac.limit(2, time.Hour, 2), ac.limit(10, time.Second, 310)} {
			if n, err := c.Normalize(); err != nil || n.Algorithm != a {
				t.Errorf("%s: config %+v: %v, algorithm %s", a, c, err, n.Algorithm)
			}
		}
		if ac.burst < 1 || len(ac.foreign) == 0 {
			t.Errorf("%s: burst %d, %d foreign configs; want at least 1 of each", a, ac.burst, len(ac.foreign))
		}
	}
}
