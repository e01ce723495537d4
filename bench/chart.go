package main

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// internal/svgchart draws stacked bars over a numeric x axis (time); this
// chart is grouped bars per named system, so it is drawn here: one panel
// for the Redis systems and one for the in-memory ones, a group of
// horizontal bars per system, a bar per workload, each labelled with its
// value, on a log scale.

var workloadColors = map[string]string{one: "#2ca02c", denied: "#d62728", keysUniform: "#1f77b4", keysZipf: "#ff7f0e"}

const (
	chartWidth  = 980
	chartLeft   = 250 // system names
	chartRight  = 90  // value labels
	barHeight   = 11
	barGap      = 2
	groupGap    = 10
	panelHeader = 40
)

// chartCallers is the number of callers charted: 64 when measured, else the
// largest measured.
func (rep *report) chartCallers() int {
	const preferred = 64
	cs := rep.Settings.Callers
	if slices.Contains(cs, preferred) || len(cs) == 0 {
		return preferred
	}
	return slices.Max(cs)
}

func (rep *report) chart(w io.Writer) error {
	callers := rep.chartCallers()
	// half-peak's decisions/s is half of one's by construction: not
	// charted (its figure is latency, in the tables).
	var workloads []string
	for _, wl := range workloadNames {
		if wl != halfPeak && slices.Contains(rep.Settings.Workloads, wl) {
			workloads = append(workloads, wl)
		}
	}
	type group struct {
		system string
		values map[string]stat
		notes  map[string]string
	}
	type panel struct {
		title, store string
		groups       []group
	}
	panels := []panel{
		{title: "On Redis (one redis-server, same machine)", store: onRedis},
		{title: "In memory (one process)", store: inMemory},
	}
	for i := range panels {
		for _, s := range rep.Systems {
			if s.Store != panels[i].store {
				continue
			}
			g := group{system: s.Name, values: map[string]stat{}, notes: map[string]string{}}
			for _, wl := range workloads {
				c := rep.cell(s.Store, wl, callers)
				if c == nil {
					continue
				}
				if sum := c.summary(s.Name); sum != nil && sum.Errors == 0 && sum.DecisionsPerSec.N > 0 {
					g.values[wl] = sum.DecisionsPerSec
					// A bar that did not do what its workload asks says so.
					if f, short := c.shortOfGranted(s.Name); short {
						g.notes[wl] = " (" + grantedText(f) + ")"
					}
				}
			}
			if len(g.values) > 0 {
				panels[i].groups = append(panels[i].groups, g)
			}
		}
	}
	panels = slices.DeleteFunc(panels, func(p panel) bool { return len(p.groups) == 0 })
	if len(panels) == 0 {
		return errors.New("chart: nothing measured")
	}
	nw := len(workloads)
	groupH := nw*(barHeight+barGap) + groupGap
	height := 70
	for _, p := range panels {
		height += panelHeader + len(p.groups)*groupH + 30
	}
	plotW := float64(chartWidth - chartLeft - chartRight)

	b := bufio.NewWriter(w)
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	title := fmt.Sprintf("Decisions per second (log scale; median, line: min-max of %d rounds), %d callers (%s, GOMAXPROCS %d)", rep.Settings.Rounds, callers, rep.Machine.GoVersion, rep.Machine.GOMAXPROCS)
	pf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	pf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartWidth, height, chartWidth, height)
	pf("<title>%s</title>\n", esc(title))
	pf(`<rect width="%d" height="%d" fill="white"/>`+"\n", chartWidth, height)
	pf(`<text x="16" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", esc(title))
	lx := 16.0
	for _, wl := range workloads {
		pf(`<rect x="%.1f" y="40" width="14" height="14" fill="%s"/>`+"\n", lx, workloadColors[wl])
		pf(`<text x="%.1f" y="52">%s</text>`+"\n", lx+20, esc(wl))
		lx += 20 + 7*float64(len(wl)) + 24
	}
	y := 70.0
	for _, p := range panels {
		// A log scale: the systems span four orders of magnitude (a refusal
		// answered in memory against a round trip to Redis).
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, g := range p.groups {
			for _, st := range g.values {
				if v, w := float64(st.Min), float64(st.Max); v > 0 {
					lo, hi = min(lo, math.Floor(math.Log10(v))), max(hi, math.Ceil(math.Log10(w)))
				}
			}
		}
		if math.IsInf(lo, 0) {
			lo, hi = 0, 1
		}
		if hi <= lo {
			hi = lo + 1
		}
		xOf := func(v float64) float64 {
			if v <= 0 {
				return chartLeft
			}
			return chartLeft + (math.Log10(v)-lo)/(hi-lo)*plotW
		}
		pf(`<text x="16" y="%.1f" font-size="14" font-weight="bold">%s</text>`+"\n", y+18, esc(p.title))
		y0 := y + panelHeader
		plotH := float64(len(p.groups) * groupH)
		for e := lo; e <= hi; e++ {
			x := xOf(math.Pow(10, e))
			pf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d0d0d0"/>`+"\n", x, y0-4, x, y0+plotH)
			pf(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x, y0-8, shortNum(math.Pow(10, e)))
			if e < hi {
				for _, m := range []float64{2, 5} {
					x := xOf(m * math.Pow(10, e))
					pf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", x, y0-4, x, y0+plotH)
				}
			}
		}
		for k, g := range p.groups {
			gy := y0 + float64(k*groupH)
			pf(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", chartLeft-8, gy+float64(nw*(barHeight+barGap))/2+4, esc(g.system))
			for j, wl := range workloads {
				by := gy + float64(j*(barHeight+barGap))
				st, ok := g.values[wl]
				v := float64(st.Median)
				if !ok {
					pf(`<text x="%d" y="%.1f" font-size="10" fill="#888">%s: not measured</text>`+"\n", chartLeft+4, by+barHeight-1, esc(wl))
					continue
				}
				bw := xOf(v) - chartLeft
				pf(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s, %s: %s decisions/s</title></rect>`+"\n",
					chartLeft, by, bw, barHeight, workloadColors[wl], esc(g.system), esc(wl), thousands(v))
				if st.N > 1 {
					y := by + barHeight/2.0
					pf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>`+"\n", xOf(float64(st.Min)), y, xOf(float64(st.Max)), y)
				}
				pf(`<text x="%.1f" y="%.1f" font-size="10">%s%s</text>`+"\n", max(xOf(float64(st.Max)), chartLeft+bw)+4, by+barHeight-1, thousands(v), esc(g.notes[wl]))
			}
		}
		pf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555"/>`+"\n", chartLeft, y0-4, chartLeft, y0+plotH)
		y = y0 + plotH + 30
	}
	pf("</svg>\n")
	return b.Flush()
}

// shortNum prints an axis value: 20k, 1.5M.
func shortNum(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case v >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), ".0") + "k"
	}
	return fmt.Sprintf("%.0f", v)
}

func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}
