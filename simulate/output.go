package simulate

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/svgchart"
)

// Headline describes the run in one line, e.g. "bursty traffic (seed 1):
// 95 requests in 10s, limit 10 per 1s".
func (rep *Report) Headline() string {
	o := rep.Options
	seed := ""
	if o.Traffic == Bursty {
		seed = fmt.Sprintf(" (seed %d)", o.Seed)
	}
	offset := ""
	if o.Offset != 0 {
		offset = fmt.Sprintf(", starting %s after a window boundary", o.Offset)
	}
	return fmt.Sprintf("%s traffic%s: %d requests in %s, limit %d per %s%s", o.Traffic, seed, len(rep.Arrivals), o.Duration, o.Rate, o.Interval, offset)
}

// WriteText writes the summary: the headline, then a table with one row per
// algorithm, then what its columns mean.
func (rep *Report) WriteText(w io.Writer) error {
	o := rep.Options
	b := bufio.NewWriter(w)
	fmt.Fprintln(b, rep.Headline())
	fmt.Fprintln(b)
	win, tenth := "max/"+o.Interval.String(), "max/"+(o.Interval/10).String()
	fmt.Fprintf(b, "%-16s %8s %8s %10s %7s %10s %12s\n", "algorithm", "admitted", "refused", win, "x rate", tenth, "longest gap")
	for _, r := range rep.Results {
		s := r.Summary
		gap := "-"
		if s.Admitted > 1 {
			gap = s.LongestGap.String()
		}
		fmt.Fprintf(b, "%-16s %8d %8d %10d %6.2fx %10d %12s\n", r.Config.Algorithm, s.Admitted, s.Refused, s.MaxInInterval, r.Ratio(), s.MaxInTenth, gap)
	}
	fmt.Fprintln(b)
	fmt.Fprintf(b, "%s: most admitted in any window of %s (sliding, from the grant instants); x rate: that over the rate.\n", win, o.Interval)
	fmt.Fprintf(b, "%s: the same over 1/10 of the interval (burstiness). Longest gap: between two admissions.\n", tenth)
	if extra := rep.bucketsNote(); extra != "" {
		fmt.Fprintln(b, extra)
	}
	return b.Flush()
}

// bucketsNote names the bucket sizes where they are not the rate.
func (rep *Report) bucketsNote() string {
	note := ""
	for _, r := range rep.Results {
		switch {
		case r.Config.Algorithm == redlimit.TokenBucket:
			note += fmt.Sprintf("; token-bucket burst %d", r.Config.Burst)
		case r.Config.Algorithm == redlimit.LeakyBucket:
			note += fmt.Sprintf("; leaky-bucket capacity %d", r.Config.Capacity)
		}
	}
	if note == "" {
		return ""
	}
	return note[2:] + "."
}

// Chart colours: blue and orange stay apart for colour-blind readers.
const (
	colorAdmitted = "#3a78b5"
	colorRefused  = "#f0a04b"
)

// WriteSVG draws the run: one panel per algorithm, time across, a stacked
// bar per bucket of the requests admitted and refused, and the rate (scaled
// to a bucket) as a dashed line.
func (rep *Report) WriteSVG(w io.Writer) error {
	o := rep.Options
	unit, unitName := time.Second, "s"
	switch {
	case o.Duration >= 2*time.Hour:
		unit, unitName = time.Hour, "h"
	case o.Duration >= 2*time.Minute:
		unit, unitName = time.Minute, "min"
	}
	perBucket := float64(o.Rate) * float64(o.Bucket) / float64(o.Interval)
	c := &svgchart.Chart{
		Title:          "redlimit simulate: " + rep.Headline(),
		XLabel:         fmt.Sprintf("time since the start (%s)", unitName),
		YLabel:         "requests per " + o.Bucket.String(),
		XStep:          float64(o.Bucket) / float64(unit),
		Series:         []svgchart.Series{{Name: "admitted", Color: colorAdmitted}, {Name: "refused", Color: colorRefused}},
		Reference:      perBucket,
		ReferenceLabel: fmt.Sprintf("the rate: %s per %s", strconv.FormatFloat(perBucket, 'g', 4, 64), o.Bucket),
		IntegerY:       true,
	}
	for _, r := range rep.Results {
		adm, ref := make([]float64, len(r.Buckets)), make([]float64, len(r.Buckets))
		for i, b := range r.Buckets {
			adm[i], ref[i] = float64(b.Admitted), float64(b.Refused)
		}
		s := r.Summary
		name := string(r.Config.Algorithm)
		switch r.Config.Algorithm {
		case redlimit.TokenBucket:
			name += fmt.Sprintf(" (burst %d)", r.Config.Burst)
		case redlimit.LeakyBucket:
			name += fmt.Sprintf(" (capacity %d)", r.Config.Capacity)
		}
		c.Panels = append(c.Panels, svgchart.Panel{
			Title: fmt.Sprintf("%s: %d admitted, %d refused; at most %d in any %s (%.2fx the rate), %d in any %s",
				name, s.Admitted, s.Refused, s.MaxInInterval, o.Interval, r.Ratio(), s.MaxInTenth, o.Interval/10),
			Values: [][]float64{adm, ref},
		})
	}
	return c.WriteSVG(w)
}
