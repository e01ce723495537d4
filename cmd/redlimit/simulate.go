package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redlimit/redlimit/simulate"
)

// simulateCmd is "redlimit simulate".
var simulateCmd = &command{
	name:     "simulate",
	summary:  "run one stream of requests through every algorithm on virtual time",
	synopsis: "[--traffic steady|bursty|ramp|on-off] [--rate 10] [--interval 1s] [--duration 10s]\n[--bucket 100ms] [--seed 1] [--svg FILE]",
	noStore:  true,
	run:      cmdSimulate,
	help: `
Sends one made-up stream of requests, each a TryAcquire of one permit,
through every algorithm configured with the same rate and interval (token
bucket burst and leaky bucket capacity: the rate, unless --burst or
--capacity), each on a memory store of its own, on virtual time: it takes
no time and the same flags give the same result. Prints per algorithm the
requests admitted and refused, the most admitted in any sliding window of
the interval (and that over the rate), in any tenth of it, and the longest
gap between admissions; --svg FILE also draws the requests admitted and
refused over time, one panel per algorithm.

Traffic, scaled to the rate: steady (evenly at 2 x the rate), bursty (quiet
spells, then bursts at 3 x the rate at random times: --seed), ramp (from 0
to 4 x the rate), on-off (intervals at 4 x the rate and of silence, each
straddling a window boundary; --offset moves the traffic against the
clock's window grid).`,
}

// cmdSimulate is "redlimit simulate": one stream of requests through every
// algorithm, on virtual time.
func cmdSimulate(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	cf := configFlags{fs: fs}
	traffic := fs.String("traffic", string(simulate.Steady), fmt.Sprintf("the `pattern` of arrivals: one of %v", simulate.Traffics))
	fs.Int64Var(&cf.rate, "rate", simulate.DefaultRate, "permits per interval, the limit of every algorithm")
	fs.DurationVar(&cf.interval, "interval", simulate.DefaultInterval, "the `interval` of the rate")
	fs.StringVar(&cf.per, "per", "", "the interval as a `unit`: second, minute, hour or day (instead of --interval)")
	fs.Int64Var(&cf.burst, "burst", 0, "the token bucket's size (default: the rate)")
	fs.Int64Var(&cf.capacity, "capacity", 0, "the leaky bucket's queue (default: the rate; TryAcquire never waits in it)")
	duration := fs.Duration("duration", simulate.DefaultDuration, "how long the traffic lasts (virtual time)")
	bucket := fs.Duration("bucket", simulate.DefaultBucket, "the `width` of the time buckets counted in the chart")
	seed := fs.Uint64("seed", 1, "the `seed` of the bursty traffic's random times")
	offset := fs.Duration("offset", 0, "start the traffic this long after a boundary of the clock's window grid")
	svgFile := fs.String("svg", "", "write the chart to `FILE` (SVG)")
	if _, code, ok := c.parse(fs, cmd, args); !ok {
		return code
	}
	if _, err := cf.resolveInterval(); err != nil {
		return c.usageError(cmd, err.Error())
	}
	if err := cf.checkSizes(); err != nil {
		return c.fail(cmd, err)
	}
	tr, err := simulate.ParseTraffic(*traffic)
	if err != nil {
		return c.fail(cmd, err)
	}
	// Zero values mean "the default" to the package: here they are errors.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"interval", cf.interval}, {"duration", *duration}, {"bucket", *bucket}} {
		if d.v <= 0 {
			return c.errorf(cmd, "invalid --%s %s: must be positive", d.name, d.v)
		}
	}
	if cf.rate <= 0 {
		return c.errorf(cmd, "invalid --rate %d: must be at least 1", cf.rate)
	}
	rep, err := simulate.Run(ctx, simulate.Options{
		Traffic: tr, Rate: cf.rate, Interval: cf.interval, Burst: cf.burst, Capacity: cf.capacity,
		Duration: *duration, Bucket: *bucket, Seed: *seed, Offset: *offset,
	})
	if err != nil {
		return c.fail(cmd, err)
	}
	if *svgFile != "" {
		// Drawn whole before the file is touched: no half-written chart.
		var buf bytes.Buffer
		if err := rep.WriteSVG(&buf); err != nil {
			return c.fail(cmd, err)
		}
		if err := os.WriteFile(*svgFile, buf.Bytes(), 0o644); err != nil {
			return c.fail(cmd, err)
		}
	}
	if sf.json {
		return c.printJSON(cmd, simulateJSON(rep, *svgFile))
	}
	if err := rep.WriteText(c.stdout); err != nil {
		return c.fail(cmd, err)
	}
	if *svgFile != "" {
		fmt.Fprintf(c.stdout, "\nChart written to %s.\n", *svgFile)
	}
	return exitOK
}

// simulateOut is the summary of a simulation in JSON output.
type simulateOut struct {
	Traffic    string          `json:"traffic"`
	Seed       uint64          `json:"seed"`
	Rate       int64           `json:"rate"`
	Interval   string          `json:"interval"`
	IntervalMS int64           `json:"interval_ms"`
	DurationMS int64           `json:"duration_ms"`
	BucketMS   int64           `json:"bucket_ms"`
	OffsetMS   int64           `json:"offset_ms"`
	Requests   int             `json:"requests"`
	SVG        string          `json:"svg,omitempty"`
	Algorithms []algorithmJSON `json:"algorithms"`
}

// algorithmJSON is one algorithm's row of the summary.
type algorithmJSON struct {
	Algorithm     string     `json:"algorithm"`
	Config        configJSON `json:"config"`
	Admitted      int        `json:"admitted"`
	Refused       int        `json:"refused"`
	MaxInInterval int        `json:"max_in_interval"`
	// MaxOverRate is MaxInInterval over the rate: above 1, the limit was
	// exceeded in some window of one interval.
	MaxOverRate  float64 `json:"max_over_rate"`
	MaxInTenth   int     `json:"max_in_tenth"`
	LongestGapMS int64   `json:"longest_gap_ms"`
}

func simulateJSON(rep *simulate.Report, svg string) simulateOut {
	o := rep.Options
	out := simulateOut{
		Traffic: string(o.Traffic), Seed: o.Seed, Rate: o.Rate, Interval: o.Interval.String(), IntervalMS: o.Interval.Milliseconds(),
		DurationMS: o.Duration.Milliseconds(), BucketMS: o.Bucket.Milliseconds(), OffsetMS: o.Offset.Milliseconds(),
		Requests: len(rep.Arrivals), SVG: svg, Algorithms: []algorithmJSON{},
	}
	for _, r := range rep.Results {
		s := r.Summary
		out.Algorithms = append(out.Algorithms, algorithmJSON{
			Algorithm: string(r.Config.Algorithm), Config: toJSON(r.Config),
			Admitted: s.Admitted, Refused: s.Refused, MaxInInterval: s.MaxInInterval, MaxOverRate: r.Ratio(),
			MaxInTenth: s.MaxInTenth, LongestGapMS: s.LongestGap.Milliseconds(),
		})
	}
	return out
}
