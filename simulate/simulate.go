// Package simulate runs one stream of requests through every rate-limiting
// algorithm and measures what each lets through, so that their differences
// show in numbers and in a chart (the "redlimit simulate" command). The
// algorithms' documentation says what they promise; this shows it.
//
// Time is virtual. Each algorithm runs on its own memory store under a fake
// clock that jumps from one arrival to the next, and each request is a
// TryAcquire of one permit at its arrival instant: a 10-second run takes
// milliseconds, nothing sleeps, and the same options give the same result.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// Bounds on a run, so that a typo in a flag cannot eat the machine.
const (
	// MaxRequests bounds the requests of one run (of each algorithm).
	MaxRequests = 1_000_000
	// MaxBuckets bounds the time buckets of one run: the bars of a chart.
	MaxBuckets = 10_000
)

// Defaults of the zero Options: a limit small enough that each request
// matters and a run long enough to show every algorithm's habits.
const (
	DefaultRate     = 10
	DefaultInterval = time.Second
	DefaultDuration = 10 * time.Second
	DefaultBucket   = 100 * time.Millisecond
)

// Options describe a run. Zero fields take the defaults.
type Options struct {
	// Traffic is the arrival pattern (default Steady).
	Traffic Traffic
	// Rate permits per Interval is the limit of every algorithm, and the
	// unit the traffic patterns are scaled in (defaults 10 per 1s).
	Rate     int64
	Interval time.Duration
	// Burst is the token bucket's size, Capacity the leaky bucket's queue
	// (0: the rate, as the library defaults them).
	Burst, Capacity int64
	// Duration is how long the traffic lasts (default 10s); Bucket the width
	// of the time buckets counted for the chart (default 100ms).
	Duration, Bucket time.Duration
	// Seed picks the random times of Bursty traffic (0 is a seed like any
	// other); the other patterns do not use it.
	Seed uint64
	// Offset is where the traffic starts after a boundary of the clock's
	// window grid, which fixed windows (and the sliding counter's) align to.
	// 0 starts on a boundary; half an interval moves OnOff's "on" intervals
	// onto the grid.
	Offset time.Duration
	// Algorithms to run, in order (default redlimit.Algorithms).
	Algorithms []redlimit.Algorithm
}

// withDefaults fills the zero fields and checks the others.
func (o Options) withDefaults() (Options, error) {
	if o.Traffic == "" {
		o.Traffic = Steady
	}
	var err error
	if o.Traffic, err = ParseTraffic(string(o.Traffic)); err != nil {
		return o, err
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Bucket == 0 {
		o.Bucket = DefaultBucket
	}
	if len(o.Algorithms) == 0 {
		o.Algorithms = redlimit.Algorithms
	}
	o.Algorithms = append([]redlimit.Algorithm(nil), o.Algorithms...)
	switch {
	case o.Duration < time.Millisecond:
		return o, fmt.Errorf("invalid duration %s: must be at least 1ms", o.Duration)
	case o.Bucket < time.Millisecond:
		return o, fmt.Errorf("invalid bucket %s: must be at least 1ms", o.Bucket)
	case o.Offset < 0:
		return o, fmt.Errorf("invalid offset %s: must not be negative", o.Offset)
	case (o.Duration+o.Bucket-1)/o.Bucket > MaxBuckets:
		return o, fmt.Errorf("invalid bucket %s: more than %d buckets in %s", o.Bucket, MaxBuckets, o.Duration)
	case o.Burst < 0:
		return o, fmt.Errorf("invalid burst %d: must not be negative", o.Burst)
	case o.Capacity < 0:
		return o, fmt.Errorf("invalid capacity %d: must not be negative", o.Capacity)
	}
	return o, nil
}

// config is the limit of algorithm a under o.
func (o Options) config(a redlimit.Algorithm) (redlimit.Config, error) {
	c := redlimit.PerInterval(o.Rate, o.Interval).WithAlgorithm(a)
	switch a {
	case redlimit.TokenBucket:
		c.Burst = o.Burst
	case redlimit.LeakyBucket:
		c.Capacity = o.Capacity
	}
	return c.Normalize()
}

// Report is the outcome of a run.
type Report struct {
	// Options as run, defaults filled in.
	Options Options
	// Start is the clock's reading when the traffic starts: a boundary of
	// the window grid, plus Options.Offset.
	Start time.Time
	// Arrivals are the requests' instants since Start, in order.
	Arrivals []time.Duration
	// Results holds one Result per algorithm, in Options.Algorithms order.
	Results []Result
}

// Result is what one algorithm did with the traffic.
type Result struct {
	// Config is the algorithm's limit, normalized.
	Config redlimit.Config
	// Admitted[i] reports whether request i (Report.Arrivals[i]) was granted.
	Admitted []bool
	// Grants are the instants since Start at which the store granted the
	// admitted requests, in order.
	Grants []time.Duration
	// Buckets count the requests by arrival in buckets of Options.Bucket.
	Buckets []Bucket
	Summary Summary
}

// Bucket counts the requests that arrived in one time bucket.
type Bucket struct {
	Admitted, Refused int
}

// Summary is what a Result comes to.
type Summary struct {
	Admitted, Refused int
	// MaxInInterval is the most grants in any window of one Interval,
	// [t, t+Interval) for every t: what a sliding window of the limit
	// would count. Rate or less means the limit held everywhere.
	MaxInInterval int
	// MaxInTenth is the most grants in any window of Interval/10: how
	// bursty the admitted traffic is (Rate/10 when perfectly smooth).
	MaxInTenth int
	// LongestGap is the longest time between two consecutive grants (0 with
	// fewer than two).
	LongestGap time.Duration
}

// Ratio is MaxInInterval over the rate: above 1, the limit was exceeded
// in some window of one interval.
func (r Result) Ratio() float64 { return float64(r.Summary.MaxInInterval) / float64(r.Config.Rate) }

// epoch0 is the day the virtual clocks start on: the traffic starts at the
// first boundary of the window grid after it.
var epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// startOf returns the first instant at or after epoch0 that is a boundary of
// the grid of interval (windows align to the Unix epoch), plus offset.
func startOf(interval, offset time.Duration) time.Time {
	ms, iv := epoch0.UnixMilli(), interval.Milliseconds()
	if r := ms % iv; r != 0 {
		ms += iv - r
	}
	return time.UnixMilli(ms).UTC().Add(offset)
}

// Run runs the traffic that opts describe through each algorithm.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfgs := make([]redlimit.Config, len(o.Algorithms))
	for i, a := range o.Algorithms {
		if cfgs[i], err = o.config(a); err != nil {
			return nil, err
		}
	}
	arr, err := arrivals(o.Traffic, o.Rate, o.Interval, o.Duration, o.Seed)
	if err != nil {
		return nil, err
	}
	rep := &Report{Options: o, Start: startOf(o.Interval, o.Offset), Arrivals: arr}
	for _, cfg := range cfgs {
		res, err := rep.run(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Algorithm, err)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// run sends the arrivals to one limiter of cfg on a store of its own.
func (rep *Report) run(ctx context.Context, cfg redlimit.Config) (Result, error) {
	fake := clock.NewFake(rep.Start)
	l, err := redlimit.New(memstore.New(memstore.WithTimeSource(fake)), "simulate", redlimit.WithClock(fake))
	if err != nil {
		return Result{}, err
	}
	if err := l.SetRate(ctx, cfg); err != nil {
		return Result{}, err
	}
	o := rep.Options
	res := Result{
		Config:   cfg,
		Admitted: make([]bool, len(rep.Arrivals)),
		Buckets:  make([]Bucket, (o.Duration+o.Bucket-1)/o.Bucket),
	}
	for i, at := range rep.Arrivals {
		fake.Set(rep.Start.Add(at))
		r, err := l.TryAcquire(ctx, 1)
		if err != nil {
			return Result{}, err
		}
		b := &res.Buckets[at/o.Bucket]
		if !r.Allowed {
			b.Refused++
			continue
		}
		if r.Waited != 0 {
			// TryAcquire never waits: a grant later than now would be a
			// reservation the simulation does not model.
			return Result{}, errors.New("TryAcquire granted a reservation")
		}
		b.Admitted++
		res.Admitted[i] = true
		res.Grants = append(res.Grants, r.At.Sub(rep.Start))
	}
	res.Summary = Summary{
		Admitted:      len(res.Grants),
		Refused:       len(rep.Arrivals) - len(res.Grants),
		MaxInInterval: maxInWindow(res.Grants, o.Interval),
		MaxInTenth:    maxInWindow(res.Grants, o.Interval/10),
		LongestGap:    longestGap(res.Grants),
	}
	return res, nil
}

// maxInWindow returns the most instants of ts (sorted) in any window
// [t, t+w). A fullest window can always start at one of them.
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i, t := range ts {
		for j < len(ts) && ts[j] < t+w {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// longestGap returns the longest time between consecutive instants of ts.
func longestGap(ts []time.Duration) time.Duration {
	var gap time.Duration
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i]-ts[i-1])
	}
	return gap
}
