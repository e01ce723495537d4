package main

import (
	"strings"
	"testing"
	"time"
)

// TestSetRateAlgorithms sets each algorithm at 2 per hour and uses it: the
// config printed names it (with the bucket's size), and each refuses the
// third permit with its own retry-after. The fake clocks read 03:04:05, so
// the fixed window's hour ends in 55m55s.
func TestSetRateAlgorithms(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range []struct {
				name, algorithm string
				extra           []string // more set-rate flags
				config          string
				available       string // what get says a request could have
				steps           []step // after set-rate
			}{
				{"sl", "sliding-log", nil, "2 per 1h0m0s (sliding-log, overall)", "2 permits", []step{
					{args: []string{"acquire", "sl", "--permits", "2"}, stdout: `granted 2 permits of "sl": 0 remaining` + "\n"},
					{args: []string{"acquire", "sl"}, code: 1, stdout: `refused 1 permit of "sl": 0 remaining, retry after 1h0m0s` + "\n"},
				}},
				{"fw", "fixed-window", nil, "2 per 1h0m0s (fixed-window, overall)", "2 permits", []step{
					{args: []string{"acquire", "fw", "--permits", "2"}, stdout: `granted 2 permits of "fw": 0 remaining` + "\n"},
					{args: []string{"acquire", "fw"}, code: 1, stdout: `refused 1 permit of "fw": 0 remaining, retry after 55m55s` + "\n"},
				}},
				{"sc", "sliding-counter", nil, "2 per 1h0m0s (sliding-counter, overall)", "2 permits", []step{
					{args: []string{"acquire", "sc", "--permits", "2"}, stdout: `granted 2 permits of "sc": 0 remaining` + "\n"},
					// At 04:00 the previous hour weighs 2, at 04:30 only 1.
					{args: []string{"acquire", "sc"}, code: 1, stdout: `refused 1 permit of "sc": 0 remaining, retry after 1h25m55s` + "\n"},
				}},
				{"tb", "token-bucket", nil, "2 per 1h0m0s burst 2 (token-bucket, overall)", "2 permits", []step{
					{args: []string{"acquire", "tb", "--permits", "2"}, stdout: `granted 2 permits of "tb": 0 remaining` + "\n"},
					{args: []string{"acquire", "tb"}, code: 1, stdout: `refused 1 permit of "tb": 0 remaining, retry after 30m0s` + "\n"},
				}},
				{"tb5", "token-bucket", []string{"--burst", "5"}, "2 per 1h0m0s burst 5 (token-bucket, overall)", "5 permits", []step{
					{args: []string{"acquire", "tb5", "--permits", "6"}, code: 2, stderr: `redlimit acquire: invalid permits "6": exceed 5`},
					{args: []string{"acquire", "tb5", "--permits", "5"}, stdout: `granted 5 permits of "tb5": 0 remaining` + "\n"},
				}},
				{"lb", "leaky-bucket", nil, "2 per 1h0m0s capacity 2 (leaky-bucket, overall)", "2 permits", []step{
					// Grants are spaced interval/rate apart: no two at once.
					{args: []string{"acquire", "lb"}, stdout: `granted 1 permit of "lb": 0 remaining` + "\n"},
					{args: []string{"acquire", "lb"}, code: 1, stdout: `refused 1 permit of "lb": 0 remaining, retry after 30m0s` + "\n"},
				}},
				// An empty leaky bucket's queue takes its whole capacity at once.
				{"lb3", "leaky-bucket", []string{"--capacity", "3", "--per", "hour"}, "2 per 1h0m0s capacity 3 (leaky-bucket, overall)", "3 permits", []step{
					{args: []string{"acquire", "lb3", "--permits", "3"}, stdout: `granted 3 permits of "lb3": 0 remaining` + "\n"},
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					args := append([]string{"set-rate", tc.name, "--rate", "2", "--algorithm", tc.algorithm}, tc.extra...)
					if !strings.Contains(strings.Join(tc.extra, " "), "--per") {
						args = append(args, "--interval", "1h")
					}
					steps := append([]step{
						{args: args, stdout: `set "` + tc.name + `": ` + tc.config + "\n"},
						{args: []string{"get", tc.name}, stdout: "name:      \"" + tc.name + "\"\nconfig:    " + tc.config + "\navailable: " + tc.available + "\n"},
					}, tc.steps...)
					runSteps(t, b, steps)
				})
			}
		})
	}
}

// TestAlgorithmJSON: set-rate and get --json carry the algorithm, and the
// bucket's size where it has one.
func TestAlgorithmJSON(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range []struct {
				args []string
				want configOut
			}{
				{[]string{"--algorithm", "fixed-window", "--per", "minute"}, configOut{Algorithm: "fixed-window", Mode: "overall", Rate: 3, Interval: "1m0s", IntervalMS: 60000}},
				{[]string{"--algorithm", "sliding-counter", "--interval", "1s", "--mode", "per-client"}, configOut{Algorithm: "sliding-counter", Mode: "per-client", Rate: 3, Interval: "1s", IntervalMS: 1000}},
				{[]string{"--algorithm", "token-bucket", "--interval", "1s", "--burst", "7"}, configOut{Algorithm: "token-bucket", Mode: "overall", Rate: 3, Interval: "1s", IntervalMS: 1000, Burst: 7}},
				{[]string{"--algorithm", "token-bucket", "--per", "day"}, configOut{Algorithm: "token-bucket", Mode: "overall", Rate: 3, Interval: "24h0m0s", IntervalMS: 86400000, Burst: 3}},
				{[]string{"--algorithm", "leaky-bucket", "--interval", "1s", "--capacity", "9"}, configOut{Algorithm: "leaky-bucket", Mode: "overall", Rate: 3, Interval: "1s", IntervalMS: 1000, Capacity: 9}},
			} {
				name := "j-" + tc.want.Algorithm
				r := call(t, b.deps, b.with(append([]string{"set-rate", name, "--rate", "3", "--reset", "--json"}, tc.args...)...)...)
				var set setRateOut
				decodeOne(t, r.stdout, &set)
				if want := (setRateOut{Name: name, Set: true, Reset: true, Config: tc.want}); r.code != 0 || set != want {
					t.Errorf("set-rate %q: %s: %+v, want %+v", tc.args, r, set, want)
				}
				r = call(t, b.deps, b.with("get", name, "--json")...)
				var got getOut
				decodeOne(t, r.stdout, &got)
				if r.code != 0 || got.Config != tc.want {
					t.Errorf("get after set-rate %q: %s: %+v, want %+v", tc.args, r, got.Config, tc.want)
				}
			}
		})
	}
}

// TestAlgorithmChange: SetRate keeps the permits granted, but not across a
// change of algorithm, whose state the old one's means nothing to; the
// command says so.
func TestAlgorithmChange(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"set-rate", "ch", "--rate", "2", "--interval", "1h"}, stdout: `set "ch": 2 per 1h0m0s (sliding-log, overall)` + "\n"},
				{args: []string{"acquire", "ch", "--permits", "2"}, stdout: `granted 2 permits of "ch": 0 remaining` + "\n"},
				// Same algorithm, another rate: the grants still count.
				{args: []string{"set-rate", "ch", "--rate", "3", "--interval", "1h"}, stdout: `set "ch": 3 per 1h0m0s (sliding-log, overall)` + "\n"},
				{args: []string{"get", "ch"}, stdout: "name:      \"ch\"\nconfig:    3 per 1h0m0s (sliding-log, overall)\navailable: 1 permit\n"},
				// Another algorithm: a fresh start.
				{args: []string{"set-rate", "ch", "--rate", "3", "--interval", "1h", "--algorithm", "token-bucket"}, stdout: `set "ch": 3 per 1h0m0s burst 3 (token-bucket, overall), state reset (the algorithm was sliding-log)` + "\n"},
				{args: []string{"get", "ch"}, stdout: "name:      \"ch\"\nconfig:    3 per 1h0m0s burst 3 (token-bucket, overall)\navailable: 3 permits\n"},
				// The bucket's size alone is no new algorithm.
				{args: []string{"acquire", "ch"}, stdout: `granted 1 permit of "ch": 2 remaining` + "\n"},
				{args: []string{"set-rate", "ch", "--rate", "3", "--interval", "1h", "--algorithm", "token-bucket", "--burst", "4"}, stdout: `set "ch": 3 per 1h0m0s burst 4 (token-bucket, overall)` + "\n"},
				{args: []string{"get", "ch"}, stdout: "name:      \"ch\"\nconfig:    3 per 1h0m0s burst 4 (token-bucket, overall)\navailable: 2 permits\n"}, // the tokens carry over
			})
			var set setRateOut
			r := call(t, b.deps, b.with("set-rate", "ch", "--rate", "3", "--interval", "1h", "--algorithm", "leaky-bucket", "--json")...)
			decodeOne(t, r.stdout, &set)
			if r.code != 0 || !set.Set || !set.Reset || set.Config.Algorithm != "leaky-bucket" || set.Config.Capacity != 3 {
				t.Errorf("set-rate to leaky-bucket --json: %s: %+v, want set and reset", r, set)
			}
		})
	}
}

// TestFixedWindowAlignsToTheClock: a window of an hour ends on the hour, so
// the permits come back at 04:00, not an hour after they were taken.
func TestFixedWindowAlignsToTheClock(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"set-rate", "hourly", "--rate", "1", "--per", "hour", "--algorithm", "fixed-window"}, stdout: `set "hourly": 1 per 1h0m0s (fixed-window, overall)` + "\n"},
				{args: []string{"acquire", "hourly"}, stdout: `granted 1 permit of "hourly": 0 remaining` + "\n"},
			})
			b.fake.Advance(55*time.Minute + 54*time.Second)
			runSteps(t, b, []step{{args: []string{"acquire", "hourly"}, code: 1, stdout: `refused 1 permit of "hourly": 0 remaining, retry after 1s` + "\n"}})
			b.fake.Advance(time.Second)
			runSteps(t, b, []step{{args: []string{"acquire", "hourly"}, stdout: `granted 1 permit of "hourly": 0 remaining` + "\n"}})
		})
	}
}

// TestAcquireCreatesWithAlgorithm: the config flags of acquire, --algorithm
// and the bucket sizes included, create the limiter on first use.
func TestAcquireCreatesWithAlgorithm(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"acquire", "auto-tb", "--rate", "1", "--per", "minute", "--algorithm", "token-bucket", "--burst", "3", "--permits", "3"}, stdout: `granted 3 permits of "auto-tb": 0 remaining` + "\n"},
				{args: []string{"get", "auto-tb"}, stdout: "name:      \"auto-tb\"\nconfig:    1 per 1m0s burst 3 (token-bucket, overall)\navailable: 0 permits\n"},
				{args: []string{"acquire", "auto-lb", "--rate", "2", "--interval", "1s", "--algorithm", "leaky-bucket"}, stdout: `granted 1 permit of "auto-lb": 0 remaining` + "\n"},
				{args: []string{"acquire", "auto-lb", "--rate", "2", "--interval", "1s", "--algorithm", "leaky-bucket"}, code: 1, stdout: `refused 1 permit of "auto-lb": 0 remaining, retry after 500ms` + "\n"},
				{args: []string{"get", "auto-lb", "--json"}, stdout: `{"name":"auto-lb","config":{"algorithm":"leaky-bucket","mode":"overall","rate":2,"interval":"1s","interval_ms":1000,"capacity":2},"available":0}` + "\n"},
			})
		})
	}
}

// TestAlgorithmBadInput: flags that do not fit the algorithm are the
// library's typed errors, and wrong units or combinations are usage errors;
// all exit 2 with nothing on stdout, before the store is touched.
func TestAlgorithmBadInput(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range []struct {
				args   []string
				stderr string
			}{
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--burst", "3"}, `redlimit set-rate: invalid burst "3": applies to token-bucket only`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "fixed-window", "--burst", "3"}, `invalid burst "3": applies to token-bucket only`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "leaky-bucket", "--burst", "3"}, `invalid burst "3": applies to token-bucket only`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "token-bucket", "--capacity", "3"}, `invalid capacity "3": applies to leaky-bucket only`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--capacity", "3"}, `invalid capacity "3": applies to leaky-bucket only`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "token-bucket", "--burst", "-1"}, `invalid burst "-1"`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "token-bucket", "--burst", "0"}, "invalid --burst 0: must be at least 1"},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "leaky-bucket", "--capacity", "0"}, "invalid --capacity 0: must be at least 1"},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--algorithm", "gcra"}, `redlimit set-rate: invalid algorithm "gcra": must be one of [sliding-log fixed-window sliding-counter token-bucket leaky-bucket]`},
				{[]string{"set-rate", "x", "--rate", "1", "--interval", "48h", "--algorithm", "token-bucket"}, `invalid interval "48h0m0s": must be at most 24h for token-bucket`},
				{[]string{"set-rate", "x", "--rate", "1", "--per", "week"}, `redlimit set-rate: invalid --per "week": must be second, minute, hour or day`},
				{[]string{"set-rate", "x", "--rate", "1", "--per", "second", "--interval", "1s"}, "--per and --interval cannot be combined"},
				{[]string{"set-rate", "x", "--rate", "1", "--algorithm", "token-bucket"}, "--rate and --interval are required (or --per instead of --interval)"},
				{[]string{"acquire", "x", "--algorithm", "token-bucket"}, "--rate and --interval go together"},
				{[]string{"acquire", "x", "--burst", "2"}, "--rate and --interval go together"},
				{[]string{"acquire", "x", "--rate", "1", "--per", "second", "--burst", "2"}, `redlimit acquire: invalid burst "2": applies to token-bucket only`},
				{[]string{"acquire", "x", "--rate", "1", "--per", "fortnight"}, `invalid --per "fortnight"`},
				{[]string{"acquire", "x", "--rate", "1", "--per", "minute", "--interval", "1m"}, "--per and --interval cannot be combined"},
			} {
				r := call(t, b.deps, b.with(tc.args...)...)
				if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
					t.Errorf("redlimit %q: %s; want exit 2, nothing on stdout, %q on stderr", tc.args, r, tc.stderr)
				}
			}
			// None of them stored anything.
			if r := call(t, b.deps, b.with("get", "x")...); r.code != 2 || !strings.Contains(r.stderr, "not initialized") {
				t.Errorf("get after the bad set-rates: %s", r)
			}
		})
	}
}
