package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simulateJSONOut is the JSON of simulate, as a client would decode it.
type simulateJSONOut struct {
	Traffic    string `json:"traffic"`
	Seed       uint64 `json:"seed"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	DurationMS int64  `json:"duration_ms"`
	BucketMS   int64  `json:"bucket_ms"`
	OffsetMS   int64  `json:"offset_ms"`
	Requests   int    `json:"requests"`
	SVG        string `json:"svg"`
	Algorithms []struct {
		Algorithm     string    `json:"algorithm"`
		Config        configOut `json:"config"`
		Admitted      int       `json:"admitted"`
		Refused       int       `json:"refused"`
		MaxInInterval int       `json:"max_in_interval"`
		MaxOverRate   float64   `json:"max_over_rate"`
		MaxInTenth    int       `json:"max_in_tenth"`
		LongestGapMS  int64     `json:"longest_gap_ms"`
	} `json:"algorithms"`
}

func TestSimulateText(t *testing.T) {
	r := call(t, deps{}, "simulate")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("simulate: %s", r)
	}
	for _, want := range []string{
		"steady traffic: 200 requests in 10s, limit 10 per 1s\n\n",
		"algorithm        admitted  refused     max/1s  x rate  max/100ms  longest gap\n",
		"sliding-log           100      100         10   1.00x          2        550ms\n",
		"leaky-bucket          100      100         10   1.00x          1        100ms\n",
		"token-bucket burst 10; leaky-bucket capacity 10.\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("simulate: no %q in\n%s", want, r.stdout)
		}
	}
	// Virtual time: the same flags, the same output, in any process.
	if again := call(t, deps{}, "simulate"); again.stdout != r.stdout {
		t.Errorf("a second run printed\n%s\nthe first\n%s", again.stdout, r.stdout)
	}

	r = call(t, deps{}, "simulate", "--traffic", "bursty", "--seed", "3", "--rate", "5", "--per", "minute", "--duration", "10m", "--bucket", "10s", "--burst", "8", "--capacity", "2")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "bursty traffic (seed 3): ") || !strings.Contains(r.stdout, "limit 5 per 1m0s\n") ||
		!strings.Contains(r.stdout, "max/1m0s") || !strings.Contains(r.stdout, "max/6s") || !strings.Contains(r.stdout, "token-bucket burst 8; leaky-bucket capacity 2.") {
		t.Errorf("simulate with flags: %s", r)
	}
}

func TestSimulateJSON(t *testing.T) {
	r := call(t, deps{}, "simulate", "--traffic", "on-off", "--json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("simulate --json: %s", r)
	}
	var out simulateJSONOut
	decodeOne(t, r.stdout, &out)
	if out.Traffic != "on-off" || out.Rate != 10 || out.IntervalMS != 1000 || out.DurationMS != 10000 || out.BucketMS != 100 || out.Requests != 200 || out.SVG != "" || len(out.Algorithms) != 5 {
		t.Fatalf("simulate --json: %+v", out)
	}
	byName := map[string]int{}
	for i, a := range out.Algorithms {
		byName[a.Algorithm] = i
		if a.Admitted+a.Refused != out.Requests || a.Config.Algorithm != a.Algorithm || a.Config.Rate != 10 {
			t.Errorf("%s: %+v", a.Algorithm, a)
		}
	}
	sl, fw := out.Algorithms[byName["sliding-log"]], out.Algorithms[byName["fixed-window"]]
	if sl.MaxInInterval != 10 || sl.MaxOverRate != 1 || fw.MaxInInterval != 20 || fw.MaxOverRate != 2 {
		t.Errorf("on-off: sliding log at most %d in 1s, fixed window %d; want 10 and 20 (across a window boundary)", sl.MaxInInterval, fw.MaxInInterval)
	}
	if tb, lb := out.Algorithms[byName["token-bucket"]], out.Algorithms[byName["leaky-bucket"]]; tb.Config.Burst != 10 || lb.Config.Capacity != 10 || lb.MaxInTenth != 1 {
		t.Errorf("buckets: %+v, %+v", tb, lb)
	}

	// Half an interval later, the "on" intervals sit on the window grid.
	r = call(t, deps{}, "simulate", "--traffic", "on-off", "--offset", "500ms", "--json")
	out = simulateJSONOut{}
	decodeOne(t, r.stdout, &out)
	if fw := out.Algorithms[byName["fixed-window"]]; r.code != 0 || out.OffsetMS != 500 || fw.MaxInInterval != 10 {
		t.Errorf("on-off --offset 500ms: %s", r)
	}
}

func TestSimulateSVG(t *testing.T) {
	dir := t.TempDir()
	for _, jsonOut := range []bool{false, true} {
		file := filepath.Join(dir, "bursty.svg")
		args := []string{"simulate", "--traffic", "bursty", "--svg", file}
		if jsonOut {
			file = filepath.Join(dir, "bursty-json.svg")
			args = []string{"simulate", "--json", "--traffic", "bursty", "--svg", file}
		}
		r := call(t, deps{}, args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("simulate %q: %s", args, r)
		}
		if jsonOut {
			var out simulateJSONOut
			decodeOne(t, r.stdout, &out)
			if out.SVG != file {
				t.Errorf("svg %q, want %q", out.SVG, file)
			}
		} else if !strings.HasSuffix(r.stdout, "\nChart written to "+file+".\n") {
			t.Errorf("simulate --svg: stdout %q", r.stdout)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName xml.Name
			Groups  []struct {
				Class string `xml:"class,attr"`
			} `xml:"g"`
		}
		if err := xml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc.XMLName.Space != "http://www.w3.org/2000/svg" || len(doc.Groups) != 5 {
			t.Errorf("%s: root %v, %d panels; want svg, 5", file, doc.XMLName, len(doc.Groups))
		}
	}
}

func TestSimulateBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "x.svg")
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"simulate", "--traffic", "sideways"}, `redlimit simulate: unknown traffic "sideways": one of [steady bursty ramp on-off]`},
		{[]string{"simulate", "--rate", "0"}, "invalid --rate 0"},
		{[]string{"simulate", "--interval", "0s"}, "invalid --interval 0s: must be positive"},
		{[]string{"simulate", "--interval", "1500us"}, "must be a whole number of milliseconds"},
		{[]string{"simulate", "--interval", "48h"}, "must be at most 24h for sliding-counter"},
		{[]string{"simulate", "--duration", "0s"}, "invalid --duration 0s"},
		{[]string{"simulate", "--bucket", "-1s"}, "invalid --bucket -1s"},
		{[]string{"simulate", "--bucket", "1ms", "--duration", "1h"}, "more than 10000 buckets"},
		{[]string{"simulate", "--offset", "-1s"}, "invalid offset -1s"},
		{[]string{"simulate", "--rate", "100000", "--duration", "1h", "--bucket", "1m"}, "more than 1000000 requests"},
		{[]string{"simulate", "--burst", "0"}, "invalid --burst 0"},
		{[]string{"simulate", "--per", "week"}, `invalid --per "week"`},
		{[]string{"simulate", "--per", "second", "--interval", "1s"}, "--per and --interval cannot be combined"},
		{[]string{"simulate", "--seed", "-1"}, `invalid value "-1" for flag -seed`},
		{[]string{"simulate", "--redis", "redis://localhost"}, "flag provided but not defined: -redis"},
		{[]string{"simulate", "extra"}, `redlimit simulate: unexpected argument "extra"`},
		{[]string{"simulate", "--svg", missing}, "no such file or directory"},
	} {
		r := call(t, deps{}, tc.args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("redlimit %q: %s; want exit 2, nothing on stdout, %q on stderr", tc.args, r, tc.stderr)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("%s written", missing)
	}
}
