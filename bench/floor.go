package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/internal/batch"
)

// The floor is a baseline, not a rate limiter: the least a decision that
// counts can cost through the same go-redis client options as every system
// (a pool of one connection per caller), to show what the machine allows,
// so that a goal no system meets can be shown out of reach rather than just
// missed (a p99 the floor itself does not meet, a rate it does not beat).
// A lone call is one INCRBY of its key by 1: one round trip, one command.
// Calls made while others are in flight share runs as redlimit's do, with
// the same machinery (internal/batch, sized as redisstore sizes it on one
// server), and the cheapest work: one INCRBY per key per run, the keys of a
// run pipelined. It is never a peer: no ratio is taken against it or for
// it.
const (
	floorFamily = "floor"
	floorName   = "floor"
	// floorPacedName is the floor in half-peak at the pace of redlimit's
	// system with the lowest half-peak rate in the cell: the same offered
	// load, so its p99 is the floor's at redlimit's half of peak.
	floorPacedName = "floor at redlimit's pace"
	// floorDuration caps the floor's measured window: it needs fewer
	// seconds than the systems (one command, no state to warm) and keeps
	// the full run under 35 minutes.
	floorDuration = time.Second
	// The floor's runs, sized as redisstore's on one server: calls per key
	// in a run, keys in a run, runs in flight.
	floorMaxCalls, floorMaxWorks, floorMaxRuns = 256, 64, 4
)

// isFloor says whether system name is one of the floor's.
func isFloor(name string) bool { return name == floorName || name == floorPacedName }

// windowOf is system name's measured window in a cell of window d.
func windowOf(name string, d time.Duration) time.Duration {
	if isFloor(name) {
		return min(d, floorDuration)
	}
	return d
}

// floorWork is the calls on one key in one of the floor's runs.
type floorWork = batch.Work[int, struct{}, struct{}]

// prepareFloor: the floor on PREFIX+name (no expiry: the counters are a
// few bytes each, deleted with the run's keys).
func prepareFloor(ctx context.Context, e *env, p prep) (*target, error) {
	rdb := e.clientFor(p)
	keys := make([]string, len(p.names))
	for i, name := range p.names {
		keys[i] = p.prefix + name
	}
	b := batch.New(batch.Config[int, struct{}, struct{}]{
		Run: func(ctx context.Context, works []*floorWork) {
			if len(works) == 1 {
				works[0].Err = rdb.IncrBy(ctx, keys[works[0].Key], int64(len(works[0].Calls))).Err()
				return
			}
			cmds, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for _, w := range works {
					pl.IncrBy(ctx, keys[w.Key], int64(len(w.Calls)))
				}
				return nil
			})
			for i, w := range works {
				if w.Err = err; i < len(cmds) && err == nil {
					w.Err = cmds[i].Err()
				}
			}
		},
		MaxCalls: floorMaxCalls, MaxWorks: floorMaxWorks, MaxRuns: floorMaxRuns,
	})
	return &target{
		n: len(keys),
		call: func(ctx context.Context, i int) (bool, error) {
			_, err := b.Do(ctx, i, struct{}{})
			return err == nil, err
		},
		redisKeys: func(i int) []string { return []string{keys[i]} },
		admin:     e.adminFor(p),
		close: func() {
			// Runs of callers that left finish first.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = b.Wait(ctx)
			rdb.Close()
		},
	}, nil
}

// floorNote is the floor's verdict in one cell: its figures, whether its
// own p99 meets the target (p99 <= 1 ms), and the other systems' p99 and
// decisions/s beside it.
type floorNote struct {
	System string `json:"system"`
	// PaceOf: the floor at redlimit's pace, the system whose pace it took.
	PaceOf          string  `json:"pace_of,omitempty"`
	OfferedPerSec   float64 `json:"offered_per_sec,omitempty"`
	DecisionsPerSec stat    `json:"decisions_per_sec"`
	P99Ns           stat    `json:"p99_ns"`
	// P99Verdict: "yes" (median p99 <= 1 ms), "no", "errors", or at half
	// of peak "load not kept"; MeetsP99Target: it is "yes".
	P99Verdict     string `json:"p99_verdict"`
	MeetsP99Target bool   `json:"meets_p99_target"`
	// The other systems of the cell: the lowest and highest median p99 and
	// whose, how many meet the target, and the most decisions/s and whose
	// (closed-loop cells only).
	OthersP99Min       nf     `json:"others_p99_min_ns"`
	OthersP99MinOf     string `json:"others_p99_min_of,omitempty"`
	OthersP99Max       nf     `json:"others_p99_max_ns"`
	OthersP99MaxOf     string `json:"others_p99_max_of,omitempty"`
	OthersMeeting      int    `json:"others_meeting_p99_target"`
	Others             int    `json:"others"`
	OthersBestPerSec   nf     `json:"others_best_decisions_per_sec"`
	OthersBestPerSecOf string `json:"others_best_decisions_per_sec_of,omitempty"`
}

// floorNotes are the cell's floor verdicts, one per floor system measured
// (none without the floor). At half of peak the others compared with the
// floor at its own pace are every system; with the floor at redlimit's
// pace, redlimit's.
func (c *cell) floorNotes() []floorNote {
	var out []floorNote
	for _, name := range c.Systems {
		s := c.summary(name)
		if !isFloor(name) || s == nil {
			continue
		}
		n := floorNote{System: name, OfferedPerSec: s.OfferedPerSec, DecisionsPerSec: s.DecisionsPerSec, P99Ns: s.P99Ns,
			P99Verdict: p99Verdict(c, s), OthersP99Min: nf(math.NaN()), OthersP99Max: nf(math.NaN()), OthersBestPerSec: nf(math.NaN())}
		n.MeetsP99Target = n.P99Verdict == "yes"
		if name == floorPacedName {
			n.PaceOf = c.FloorPaceOf
		}
		for _, other := range c.Systems {
			o := c.summary(other)
			if isFloor(other) || o == nil || (name == floorPacedName && !strings.HasPrefix(other, "redlimit ")) {
				continue
			}
			n.Others++
			if p99Verdict(c, o) == "yes" {
				n.OthersMeeting++
			}
			if p := o.P99Ns.Median; o.P99Ns.N > 0 {
				if math.IsNaN(float64(n.OthersP99Min)) || p < n.OthersP99Min {
					n.OthersP99Min, n.OthersP99MinOf = p, other
				}
				if math.IsNaN(float64(n.OthersP99Max)) || p > n.OthersP99Max {
					n.OthersP99Max, n.OthersP99MaxOf = p, other
				}
			}
			if d := o.DecisionsPerSec.Median; c.Workload != halfPeak && o.DecisionsPerSec.N > 0 &&
				(math.IsNaN(float64(n.OthersBestPerSec)) || d > n.OthersBestPerSec) {
				n.OthersBestPerSec, n.OthersBestPerSecOf = d, other
			}
		}
		out = append(out, n)
	}
	return out
}

// floorSection prints what the floor is and, per cell, whether it meets
// p99 <= 1 ms itself, beside the others.
func (rep *report) floorSection(pf func(string, ...any)) {
	var cells []*cell
	for i := range rep.Cells {
		if len(rep.Cells[i].Floor) > 0 {
			cells = append(cells, &rep.Cells[i])
		}
	}
	if len(cells) == 0 {
		return
	}
	pf("## The floor: one bare round trip\n\n")
	pf("`%s` is not a rate limiter but the least a decision that counts can cost, through the same go-redis client "+
		"options as every system (a pool of one connection per caller): a lone call is one `INCRBY` of its key, one round "+
		"trip and one command; calls made while others are in flight share runs as redlimit's do (the same batching, "+
		"sized as redisstore's on one server), each run one `INCRBY` per key, a run's keys pipelined. So with one caller "+
		"it is a bare round trip, which no system beats, and with more it is redlimit's sharing with the limiter's work "+
		"taken out. It shows what this machine allows: a p99 the floor does not meet itself is out of reach here, not "+
		"missed by a limiter. It is never a peer: no ratio is taken against it. Its windows are at most %s. At half of "+
		"peak it runs twice: at half its own peak, like every system, and as `%s`, paced at the lowest half-peak rate "+
		"of redlimit's systems in the cell (named below): the same offered load, so its p99 is the floor's at "+
		"redlimit's half of peak. In the other cells (closed loop, every caller calling back to back) its p99 is at full "+
		"load, beside the others'; the target p99 <= 1 ms is half of peak's.\n\n",
		floorName, floorDuration, floorPacedName)
	pf("| workload | callers | floor | offered/s | decisions/s | p99 | floor p99 <= 1 ms | client CPU, Redis CPU, commands per call | compared with | their p99 (lowest - highest) | of them p99 <= 1 ms | their most decisions/s |\n")
	pf("|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, c := range cells {
		for _, n := range c.Floor {
			cost := "-"
			if s := c.summary(n.System); s != nil {
				cost = fmt.Sprintf("%s, %s, %s", micros(float64(s.ClientCPUUs.Median)), micros(float64(s.RedisCPUUs.Median)), twoDigits(float64(s.RedisCmds.Median)))
			}
			offered, with := "-", "every system"
			if n.OfferedPerSec > 0 {
				offered = thousands(n.OfferedPerSec)
			}
			if n.PaceOf != "" {
				with = "redlimit's, paced like " + n.PaceOf
			}
			p99s := "-"
			if n.Others > 0 && !math.IsNaN(float64(n.OthersP99Min)) {
				p99s = fmt.Sprintf("%s (%s) - %s (%s)", dur(float64(n.OthersP99Min)), n.OthersP99MinOf, dur(float64(n.OthersP99Max)), n.OthersP99MaxOf)
			}
			best := "-"
			if !math.IsNaN(float64(n.OthersBestPerSec)) {
				best = fmt.Sprintf("%s (%s)", thousands(float64(n.OthersBestPerSec)), n.OthersBestPerSecOf)
			}
			pf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d | %s |\n", workloadShortOf(c, rep.Settings.Keys), c.Callers, n.System, offered,
				statText(n.DecisionsPerSec, thousands), statText(n.P99Ns, dur), n.P99Verdict, cost, with, p99s, n.OthersMeeting, n.Others, best)
		}
	}
	pf("\n")
	// The verdict at half of peak, in a sentence per side.
	var out, reach []string
	load := stat{Median: nf(math.NaN()), Min: nf(math.NaN()), Max: nf(math.NaN())}
	for _, c := range cells {
		for _, n := range c.Floor {
			if c.Workload != halfPeak || n.System != floorPacedName {
				continue
			}
			if s := c.summary(n.System); s != nil && s.LoadAfter.N > 0 {
				if load.N == 0 || s.LoadAfter.Min < load.Min {
					load.Min = s.LoadAfter.Min
				}
				if load.N == 0 || s.LoadAfter.Max > load.Max {
					load.Max = s.LoadAfter.Max
				}
				load.N++
			}
			switch {
			case n.P99Verdict == "no":
				out = append(out, fmt.Sprintf("%d %s", c.Callers, plural(c.Callers, "caller")))
			case n.MeetsP99Target && n.OthersMeeting < n.Others:
				reach = append(reach, fmt.Sprintf("%d %s", c.Callers, plural(c.Callers, "caller")))
			}
		}
	}
	if len(out) > 0 {
		pf("At half of peak, even the floor at redlimit's pace has p99 above 1 ms at %s: out of reach on this machine.\n", strings.Join(out, ", "))
	}
	if len(reach) > 0 {
		pf("At half of peak, the floor at redlimit's pace meets p99 <= 1 ms at %s where some of redlimit's systems do not: within reach there.\n", strings.Join(reach, ", "))
	}
	if len(out)+len(reach) > 0 {
		if load.N > 0 {
			pf("The machine's one-minute load at the end of those windows: %s to %s; on a busy machine the floor is the machine's, not Redis's.\n",
				twoDigits(float64(load.Min)), twoDigits(float64(load.Max)))
		}
		pf("\n")
	}
}

// workloadShortOf names c's workload in a table row.
func workloadShortOf(c *cell, keys int) string {
	if c.Workload == halfPeak {
		return "half of peak"
	}
	if isKeys(c.Workload) {
		keys = c.Limiters
	}
	return workloadShort(c.Workload, keys, c.Distribution)
}
