package simulate_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/simulate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run runs opts and fails the test on an error.
func run(t *testing.T, opts simulate.Options) *simulate.Report {
	t.Helper()
	rep, err := simulate.Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run(%+v): %v", opts, err)
	}
	return rep
}

// result returns rep's result for algorithm a.
func result(t *testing.T, rep *simulate.Report, a redlimit.Algorithm) simulate.Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Config.Algorithm == a {
			return r
		}
	}
	t.Fatalf("no result for %s", a)
	return simulate.Result{}
}

// limits are the limits the property tests run under: the default, one whose
// spacing (interval/rate) is no whole number of ms, and one of a minute.
var limits = []struct {
	rate     int64
	interval time.Duration
	duration time.Duration
}{
	{10, time.Second, 10 * time.Second},
	{7, 300 * time.Millisecond, 5 * time.Second},
	{3, time.Second, 7 * time.Second},
	{100, time.Minute, 10 * time.Minute},
}

// eachRun calls f with every traffic pattern under every limit, and with a
// few seeds for the bursty one.
func eachRun(t *testing.T, f func(t *testing.T, rep *simulate.Report)) {
	for _, lim := range limits {
		for _, tr := range simulate.Traffics {
			seeds := []uint64{1}
			if tr == simulate.Bursty {
				seeds = []uint64{0, 1, 2, 3, 42}
			}
			for _, seed := range seeds {
				opts := simulate.Options{Traffic: tr, Rate: lim.rate, Interval: lim.interval, Duration: lim.duration, Seed: seed, Bucket: lim.duration / 100}
				t.Run(fmt.Sprintf("%s/%dper%s/seed%d", tr, lim.rate, lim.interval, seed), func(t *testing.T) {
					f(t, run(t, opts))
				})
			}
		}
	}
}

// The sliding log's promise: never more than Rate grants in any window of
// one Interval, whatever the traffic; and it does reach the rate.
func TestSlidingLogNeverExceedsTheRate(t *testing.T) {
	eachRun(t, func(t *testing.T, rep *simulate.Report) {
		r := result(t, rep, redlimit.SlidingLog)
		if int64(r.Summary.MaxInInterval) != r.Config.Rate {
			t.Errorf("at most %d grants in a window of %s, want exactly the rate %d", r.Summary.MaxInInterval, r.Config.Interval, r.Config.Rate)
		}
		// The same, checked naively against every grant.
		for i, g := range r.Grants {
			n := 0
			for _, h := range r.Grants[i:] {
				if h < g+r.Config.Interval {
					n++
				}
			}
			if int64(n) > r.Config.Rate {
				t.Fatalf("%d grants in [%s, %s), rate %d", n, g, g+r.Config.Interval, r.Config.Rate)
			}
		}
	})
}

// The leaky bucket spaces grants Interval/Rate apart at millisecond
// resolution: never two closer than that rounded down to a whole ms,
// whatever the traffic.
func TestLeakyBucketSpacesGrants(t *testing.T) {
	eachRun(t, func(t *testing.T, rep *simulate.Report) {
		r := result(t, rep, redlimit.LeakyBucket)
		for i := 1; i < len(r.Grants); i++ {
			if gap := r.Grants[i] - r.Grants[i-1]; int64(gap+time.Millisecond)*r.Config.Rate <= int64(r.Config.Interval) {
				t.Fatalf("grants %d and %d %s apart, less than %s/%d", i-1, i, gap, r.Config.Interval, r.Config.Rate)
			}
		}
		if r.Summary.Admitted > 1 && int64(r.Summary.MaxInTenth)*10 > r.Config.Rate+10 {
			t.Errorf("%d grants in a tenth of the interval, rate %d", r.Summary.MaxInTenth, r.Config.Rate)
		}
	})
}

// Every request is admitted or refused, once; the buckets, the grants and
// the summary agree; an admitted request is granted at its arrival.
func TestTotalsAddUp(t *testing.T) {
	eachRun(t, func(t *testing.T, rep *simulate.Report) {
		if len(rep.Arrivals) == 0 {
			t.Fatal("no requests")
		}
		for i := 1; i < len(rep.Arrivals); i++ {
			if rep.Arrivals[i] < rep.Arrivals[i-1] || rep.Arrivals[i]%time.Millisecond != 0 {
				t.Fatalf("arrival %d at %s after %s: want whole ms in order", i, rep.Arrivals[i], rep.Arrivals[i-1])
			}
		}
		if last := rep.Arrivals[len(rep.Arrivals)-1]; last >= rep.Options.Duration || rep.Arrivals[0] < 0 {
			t.Fatalf("arrivals from %s to %s, outside [0, %s)", rep.Arrivals[0], last, rep.Options.Duration)
		}
		if len(rep.Results) != len(redlimit.Algorithms) {
			t.Fatalf("%d results, want one per algorithm", len(rep.Results))
		}
		for _, r := range rep.Results {
			s := r.Summary
			if s.Admitted+s.Refused != len(rep.Arrivals) || len(r.Admitted) != len(rep.Arrivals) || len(r.Grants) != s.Admitted {
				t.Errorf("%s: %d admitted + %d refused, %d grants, of %d requests", r.Config.Algorithm, s.Admitted, s.Refused, len(r.Grants), len(rep.Arrivals))
			}
			var adm, ref int
			for _, b := range r.Buckets {
				adm += b.Admitted
				ref += b.Refused
			}
			if adm != s.Admitted || ref != s.Refused {
				t.Errorf("%s: buckets count %d admitted, %d refused; summary %d, %d", r.Config.Algorithm, adm, ref, s.Admitted, s.Refused)
			}
			k := 0
			for i, ok := range r.Admitted {
				if ok {
					if r.Grants[k] != rep.Arrivals[i] {
						t.Fatalf("%s: request %d arrived at %s, granted at %s", r.Config.Algorithm, i, rep.Arrivals[i], r.Grants[k])
					}
					k++
				}
			}
		}
	})
}

// The fixed window lets 2 x Rate through in one interval when traffic
// straddles a window boundary, as on-off's "on" intervals do by default;
// the same traffic on the grid (offset half an interval) stays within it.
func TestFixedWindowExceedsAcrossABoundary(t *testing.T) {
	for _, lim := range limits {
		opts := simulate.Options{Traffic: simulate.OnOff, Rate: lim.rate, Interval: lim.interval, Duration: lim.duration}
		r := result(t, run(t, opts), redlimit.FixedWindow)
		if want := 2 * lim.rate; int64(r.Summary.MaxInInterval) != want {
			t.Errorf("%d per %s, across the grid: at most %d grants in an interval, want %d", lim.rate, lim.interval, r.Summary.MaxInInterval, want)
		}
		opts.Offset = lim.interval / 2
		r = result(t, run(t, opts), redlimit.FixedWindow)
		if int64(r.Summary.MaxInInterval) != lim.rate {
			t.Errorf("%d per %s, on the grid: at most %d grants in an interval, want %d", lim.rate, lim.interval, r.Summary.MaxInInterval, lim.rate)
		}
	}
	// Bursts at random times straddle boundaries too.
	r := result(t, run(t, simulate.Options{Traffic: simulate.Bursty, Seed: 1}), redlimit.FixedWindow)
	if r.Summary.MaxInInterval <= simulate.DefaultRate {
		t.Errorf("bursty, seed 1: at most %d grants in an interval, want more than the rate", r.Summary.MaxInInterval)
	}
}

// After a quiet spell a token bucket is full: the first Burst requests of a
// burst all pass at once, where the sliding log lets through only Rate.
func TestTokenBucketAdmitsABurstAfterQuiet(t *testing.T) {
	for _, burst := range []int64{0, 5, 25} {
		opts := simulate.Options{Traffic: simulate.OnOff, Burst: burst}
		rep := run(t, opts)
		tb, sl := result(t, rep, redlimit.TokenBucket), result(t, rep, redlimit.SlidingLog)
		b := tb.Config.Burst
		// Each "on" interval starts after an interval of silence, which
		// refills Rate tokens: a full bucket when Burst <= Rate, and the
		// first one starts full whatever its size.
		for phase := 0; ; phase++ {
			start := time.Duration(2*phase)*time.Second + 500*time.Millisecond
			if start >= rep.Options.Duration {
				break
			}
			if phase > 0 && b > rep.Options.Rate {
				break
			}
			first := indexAt(rep.Arrivals, start)
			if got := run1s(tb.Admitted[first:]); int64(got) < b {
				t.Errorf("burst %d: phase at %s: the first %d requests admitted, want at least %d", b, start, got, b)
			}
			if got := run1s(sl.Admitted[first:]); int64(got) != rep.Options.Rate {
				t.Errorf("burst %d: phase at %s: sliding log admitted the first %d, want %d", b, start, got, rep.Options.Rate)
			}
		}
		// A burst never passes more than the tokens there can be: Burst at
		// once, plus the refill while it lasts.
		if got := tb.Summary.MaxInInterval; int64(got) > b+rep.Options.Rate {
			t.Errorf("burst %d: %d grants in an interval, more than burst + rate", b, got)
		}
	}
}

// indexAt is the index of the first arrival at or after at.
func indexAt(arr []time.Duration, at time.Duration) int {
	for i, a := range arr {
		if a >= at {
			return i
		}
	}
	return len(arr)
}

// run1s counts the leading trues.
func run1s(bs []bool) int {
	for i, b := range bs {
		if !b {
			return i
		}
	}
	return len(bs)
}

// The patterns have the shapes their docs promise.
func TestTrafficShapes(t *testing.T) {
	count := func(arr []time.Duration, from, to time.Duration) int {
		n := 0
		for _, a := range arr {
			if a >= from && a < to {
				n++
			}
		}
		return n
	}
	steady := run(t, simulate.Options{Traffic: simulate.Steady}).Arrivals
	if len(steady) != 200 || steady[1]-steady[0] != 50*time.Millisecond {
		t.Errorf("steady: %d arrivals, %s apart; want 200, 50ms apart (2 x 10 per 1s)", len(steady), steady[1]-steady[0])
	}
	ramp := run(t, simulate.Options{Traffic: simulate.Ramp}).Arrivals
	if n, half := len(ramp), count(ramp, 0, 5*time.Second); n != 200 || half != 50 {
		t.Errorf("ramp: %d arrivals, %d in the first half; want 200 (0 to 4 x 10 per 1s over 10s), 50", n, half)
	}
	if last := count(ramp, 9*time.Second, 10*time.Second); last < 38 || last > 40 {
		t.Errorf("ramp: %d arrivals in the last second, want about 39 (close to 4 x the rate)", last)
	}
	onoff := run(t, simulate.Options{Traffic: simulate.OnOff}).Arrivals
	for s := time.Duration(0); s < 10*time.Second; s += time.Second / 2 {
		on := (s/(time.Second/2))%4 == 1 || (s/(time.Second/2))%4 == 2 // 0.5-1.5s, 2.5-3.5s, ...
		want := 0
		if on {
			want = 20 // 4 x 10 per 1s, half a second
		}
		if got := count(onoff, s, s+time.Second/2); got != want {
			t.Errorf("on-off: %d arrivals in [%s, %s), want %d", got, s, s+time.Second/2, want)
		}
	}

	// Bursty: the seed decides, and decides the same way every time.
	a := run(t, simulate.Options{Traffic: simulate.Bursty, Seed: 7})
	b := run(t, simulate.Options{Traffic: simulate.Bursty, Seed: 7})
	c := run(t, simulate.Options{Traffic: simulate.Bursty, Seed: 8})
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs of one seed differ")
	}
	if reflect.DeepEqual(a.Arrivals, c.Arrivals) {
		t.Error("seeds 7 and 8 give the same arrivals")
	}
	// Quiet spells of at least half an interval, bursts at 3 x the rate.
	var quiet int
	for i := 1; i < len(a.Arrivals); i++ {
		gap := a.Arrivals[i] - a.Arrivals[i-1]
		if gap >= 500*time.Millisecond {
			quiet++
		} else if gap > 34*time.Millisecond {
			t.Errorf("bursty: a gap of %s inside a burst, want 1s/30", gap)
		}
	}
	if quiet < 3 {
		t.Errorf("bursty: %d quiet spells in 10s, want several", quiet)
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		opts simulate.Options
		want string
	}{
		{simulate.Options{Traffic: "sideways"}, `unknown traffic "sideways"`},
		{simulate.Options{Rate: -1}, `invalid rate "-1"`},
		{simulate.Options{Interval: 1500 * time.Microsecond}, "whole number of milliseconds"},
		{simulate.Options{Interval: 48 * time.Hour}, "must be at most 24h for sliding-counter"},
		{simulate.Options{Duration: -time.Second}, "invalid duration -1s"},
		{simulate.Options{Bucket: time.Microsecond}, "invalid bucket 1µs"},
		{simulate.Options{Bucket: time.Millisecond, Duration: time.Minute}, "more than 10000 buckets"},
		{simulate.Options{Offset: -time.Second}, "invalid offset -1s"},
		{simulate.Options{Burst: -1}, "invalid burst -1"},
		{simulate.Options{Rate: 1_000_000, Duration: time.Minute, Bucket: time.Second}, "more than 1000000 requests"},
		{simulate.Options{Algorithms: []redlimit.Algorithm{"gcra"}}, `invalid algorithm "gcra"`},
	} {
		if _, err := simulate.Run(context.Background(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v): %v, want %q", tc.opts, err, tc.want)
		}
	}
	// Traffic names are case-blind, as ParseTraffic is.
	if _, err := simulate.Run(context.Background(), simulate.Options{Traffic: "Steady", Duration: time.Second}); err != nil {
		t.Errorf("Run(Traffic: Steady): %v", err)
	}
	// Only the algorithms asked for run, in the order asked.
	rep := run(t, simulate.Options{Algorithms: []redlimit.Algorithm{redlimit.LeakyBucket, redlimit.SlidingLog}})
	if len(rep.Results) != 2 || rep.Results[0].Config.Algorithm != redlimit.LeakyBucket || rep.Results[1].Config.Algorithm != redlimit.SlidingLog {
		t.Errorf("results for %v", rep.Results)
	}
}

// The chart is one standalone SVG document with a panel per algorithm.
func TestWriteSVG(t *testing.T) {
	rep := run(t, simulate.Options{Traffic: simulate.Bursty, Seed: 1})
	var buf bytes.Buffer
	if err := rep.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name
		Title   string `xml:"title"`
		Groups  []struct {
			Class string   `xml:"class,attr"`
			Texts []string `xml:"text"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	if doc.XMLName.Space != "http://www.w3.org/2000/svg" || doc.XMLName.Local != "svg" {
		t.Errorf("root element %v", doc.XMLName)
	}
	if !strings.Contains(doc.Title, "bursty traffic (seed 1)") {
		t.Errorf("title %q", doc.Title)
	}
	if len(doc.Groups) != len(redlimit.Algorithms) {
		t.Fatalf("%d panels, want %d", len(doc.Groups), len(redlimit.Algorithms))
	}
	for i, g := range doc.Groups {
		if g.Class != "panel" || len(g.Texts) == 0 || !strings.HasPrefix(g.Texts[0], string(redlimit.Algorithms[i])) {
			t.Errorf("panel %d: class %q, texts %q", i, g.Class, g.Texts)
		}
	}
}

// The default run: steady traffic at twice the limit. The sliding log and
// the fixed window admit the first half of every second, the leaky bucket
// one request in two, evenly; the token bucket starts full, so 19 pass in
// the first second; the sliding counter admits fewer, as it weighs the
// previous second as if its grants had been spread evenly over it.
func ExampleRun() {
	rep, err := simulate.Run(context.Background(), simulate.Options{Traffic: simulate.Steady})
	if err != nil {
		panic(err)
	}
	_ = rep.WriteText(os.Stdout)
	// Output:
	// steady traffic: 200 requests in 10s, limit 10 per 1s
	//
	// algorithm        admitted  refused     max/1s  x rate  max/100ms  longest gap
	// sliding-log           100      100         10   1.00x          2        550ms
	// fixed-window          100      100         10   1.00x          2        550ms
	// sliding-counter        91      109         10   1.00x          2        650ms
	// token-bucket          109       91         19   1.90x          2        100ms
	// leaky-bucket          100      100         10   1.00x          1        100ms
	//
	// max/1s: most admitted in any window of 1s (sliding, from the grant instants); x rate: that over the rate.
	// max/100ms: the same over 1/10 of the interval (burstiness). Longest gap: between two admissions.
	// token-bucket burst 10; leaky-bucket capacity 10.
}
