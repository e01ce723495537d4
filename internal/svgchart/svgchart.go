// Package svgchart writes small stacked-bar charts as standalone SVG, with
// the standard library only, so that "redlimit simulate" can draw what it
// measured without a plotting dependency.
//
// A chart is one panel per data set, stacked vertically, sharing the x axis
// (buckets of equal width) and the y scale, so that panels compare at a
// glance. Each bucket is a bar whose segments stack the series bottom up; a
// dashed horizontal line can mark a reference value (a rate limit).
package svgchart

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one kind of value stacked in every bar, with its colour (any
// SVG colour: "#1f77b4", "orange").
type Series struct {
	Name  string
	Color string
}

// Panel is one data set: Values[s][i] is series s in bucket i.
type Panel struct {
	Title  string
	Values [][]float64
}

// Chart is what WriteSVG draws. Zero sizes take defaults.
type Chart struct {
	Title  string
	XLabel string // under the bottom panel
	YLabel string // along every panel's y axis
	// XStep is the width of one bucket in x units (the tick labels' unit).
	XStep float64
	// Series are stacked bottom up, in this order, and named in the legend.
	Series []Series
	Panels []Panel
	// Reference is drawn as a dashed line in every panel when
	// ReferenceLabel is not empty; the label goes in the legend.
	Reference      float64
	ReferenceLabel string
	// IntegerY puts the y ticks on whole numbers, for counts.
	IntegerY bool
	// Width of the whole chart and height of one panel's plot, in pixels.
	Width, PanelHeight int
}

// Layout in pixels. Fixed rather than configurable: the chart stays simple.
const (
	defaultWidth       = 960
	defaultPanelHeight = 120
	marginLeft         = 64
	marginRight        = 24
	headerHeight       = 72 // title and legend
	panelTitleHeight   = 22 // above each plot
	panelAxisHeight    = 26 // x tick labels under each plot
	footerHeight       = 34 // x axis label
	fontFamily         = "sans-serif"
)

// check reports what makes the chart impossible to draw.
func (c *Chart) check() error {
	if len(c.Panels) == 0 {
		return errors.New("svgchart: no panels")
	}
	if len(c.Series) == 0 {
		return errors.New("svgchart: no series")
	}
	if !(c.XStep > 0) || math.IsInf(c.XStep, 0) {
		return fmt.Errorf("svgchart: XStep %v must be positive", c.XStep)
	}
	n := -1
	for _, p := range c.Panels {
		if len(p.Values) != len(c.Series) {
			return fmt.Errorf("svgchart: panel %q has %d series, want %d", p.Title, len(p.Values), len(c.Series))
		}
		for _, vs := range p.Values {
			if n >= 0 && len(vs) != n {
				return fmt.Errorf("svgchart: panel %q: series of %d buckets, want %d", p.Title, len(vs), n)
			}
			n = len(vs)
			for _, v := range vs {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("svgchart: panel %q: value %v: bars must be finite and not negative", p.Title, v)
				}
			}
		}
	}
	if n == 0 {
		return errors.New("svgchart: no buckets")
	}
	return nil
}

// buckets is the number of bars per panel (check has passed).
func (c *Chart) buckets() int { return len(c.Panels[0].Values[0]) }

// WriteSVG writes the chart as one standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	if err := c.check(); err != nil {
		return err
	}
	width, ph := c.Width, c.PanelHeight
	if width <= 0 {
		width = defaultWidth
	}
	if ph <= 0 {
		ph = defaultPanelHeight
	}
	n := c.buckets() // more buckets than pixels make bars thinner than a pixel: still an honest area
	plotW := float64(width - marginLeft - marginRight)
	panelH := panelTitleHeight + ph + panelAxisHeight
	height := headerHeight + len(c.Panels)*panelH + footerHeight

	// One y scale for every panel, so that their bars compare.
	top := 0.0
	for _, p := range c.Panels {
		for i := range n {
			s := 0.0
			for _, vs := range p.Values {
				s += vs[i]
			}
			top = max(top, s)
		}
	}
	if c.ReferenceLabel != "" {
		top = max(top, c.Reference)
	}
	// Headroom above the tallest bar, so that it does not touch the title.
	yStep := niceStep(top, 4)
	if c.IntegerY {
		yStep = max(yStep, 1)
	}
	yMax := math.Ceil(top*1.1/yStep) * yStep
	if yMax <= 0 {
		yMax = yStep
	}
	xTotal := float64(n) * c.XStep
	xStep := niceStep(xTotal, 10)

	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n", width, height, width, height, fontFamily)
	p("<title>%s</title>\n", esc(c.Title))
	p(`<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	p(`<text x="%d" y="28" font-size="%s" font-weight="bold">%s</text>`+"\n", marginLeft, num(fitFont(c.Title, 18, plotW)), esc(c.Title))

	// Legend: a swatch per series, then the reference line.
	lx, ly := float64(marginLeft), 52.0
	for _, s := range c.Series {
		p(`<rect x="%s" y="%s" width="14" height="14" fill="%s"/>`+"\n", num(lx), num(ly-11), esc(s.Color))
		p(`<text x="%s" y="%s">%s</text>`+"\n", num(lx+20), num(ly), esc(s.Name))
		lx += 20 + textWidth(s.Name) + 24
	}
	if c.ReferenceLabel != "" {
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#222" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", num(lx), num(ly-4), num(lx+28), num(ly-4))
		p(`<text x="%s" y="%s">%s</text>`+"\n", num(lx+34), num(ly), esc(c.ReferenceLabel))
	}

	barW := plotW / float64(n)
	gap := 0.0
	if barW >= 4 {
		gap = max(1, barW*0.12)
	}
	for k, panel := range c.Panels {
		y0 := float64(headerHeight + k*panelH + panelTitleHeight) // top of the plot
		yOf := func(v float64) float64 { return y0 + float64(ph) - v/yMax*float64(ph) }
		p(`<g class="panel">` + "\n")
		p(`<text x="%d" y="%s" font-size="%s" font-weight="bold">%s</text>`+"\n", marginLeft, num(y0-7), num(fitFont(panel.Title, 13, plotW)), esc(panel.Title))
		// Grid and y ticks.
		for j := 0.0; j*yStep <= yMax+yStep/2; j++ {
			v := j * yStep
			y := yOf(v)
			p(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#e3e3e3"/>`+"\n", marginLeft, num(y), num(float64(marginLeft)+plotW), num(y))
			p(`<text x="%d" y="%s" text-anchor="end" font-size="11">%s</text>`+"\n", marginLeft-6, num(y+4), tick(v, yStep))
		}
		for j := 0.0; j*xStep <= xTotal*(1+1e-9); j++ {
			x := j * xStep
			px := float64(marginLeft) + x/xTotal*plotW
			p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e3e3e3"/>`+"\n", num(px), num(y0), num(px), num(y0+float64(ph)))
			p(`<text x="%s" y="%s" text-anchor="middle" font-size="11">%s</text>`+"\n", num(px), num(y0+float64(ph)+16), tick(x, xStep))
		}
		// Bars: each series' segment on top of the ones before it.
		for i := range n {
			x := float64(marginLeft) + float64(i)*barW + gap/2
			base := 0.0
			for s, vs := range panel.Values {
				v := vs[i]
				if v == 0 {
					continue
				}
				p(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n", num(x), num(yOf(base+v)), num(barW-gap), num(yOf(base)-yOf(base+v)), esc(c.Series[s].Color))
				base += v
			}
		}
		if c.ReferenceLabel != "" {
			y := yOf(c.Reference)
			p(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#222" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", marginLeft, num(y), num(float64(marginLeft)+plotW), num(y))
		}
		// Axes last, over the bars.
		p(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#555"/>`+"\n", marginLeft, num(y0), marginLeft, num(y0+float64(ph)))
		p(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#555"/>`+"\n", marginLeft, num(y0+float64(ph)), num(float64(marginLeft)+plotW), num(y0+float64(ph)))
		if c.YLabel != "" {
			cy := y0 + float64(ph)/2
			p(`<text x="16" y="%s" text-anchor="middle" font-size="11" transform="rotate(-90 16 %s)">%s</text>`+"\n", num(cy), num(cy), esc(c.YLabel))
		}
		p("</g>\n")
	}
	if c.XLabel != "" {
		p(`<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(float64(marginLeft)+plotW/2), height-12, esc(c.XLabel))
	}
	p("</svg>\n")
	return b.Flush()
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span
// into about parts pieces (1 for an empty span).
func niceStep(span float64, parts int) float64 {
	if !(span > 0) {
		return 1
	}
	raw := span / float64(parts)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// tick prints v with as many decimals as step needs (no 0.30000000000000004).
func tick(v, step float64) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// num prints a coordinate with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// textWidth estimates the width of s at 12px, for laying out the legend.
func textWidth(s string) float64 { return 6.8 * float64(len([]rune(s))) }

// fitFont returns size, or less (down to 9) if bold text s would not fit
// in width pixels at size: an estimate, as SVG cannot measure text.
func fitFont(s string, size, width float64) float64 {
	est := 0.62 * size * float64(len([]rune(s))) // bold sans-serif, about
	if est <= width {
		return size
	}
	return max(9, math.Floor(size*width/est*10)/10)
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s)) // a strings.Builder never fails
	return sb.String()
}
