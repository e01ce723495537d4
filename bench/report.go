package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// measurement is one system measured once: one round of one cell. Figures
// a measurement does not have (Redis's in memory, latency without a timed
// call) are NaN, null in the JSON.
type measurement struct {
	System   string  `json:"system"`
	Round    int     `json:"round"`    // from 1
	Position int     `json:"position"` // its place in the round, from 1
	Seconds  float64 `json:"seconds"`  // the measured window
	// Decisions are the calls completed in the measured window, granted or
	// refused (errors are counted apart).
	Decisions       uint64  `json:"decisions"`
	Granted         uint64  `json:"granted"`
	Refused         uint64  `json:"refused"`
	GrantedFraction float64 `json:"granted_fraction"`
	DecisionsPerSec float64 `json:"decisions_per_sec"`
	// OfferedPerSec is half-peak's paced load (0: a closed loop);
	// AchievedFraction is decisions/s over it.
	OfferedPerSec    float64 `json:"offered_per_sec,omitempty"`
	AchievedFraction float64 `json:"achieved_fraction,omitempty"`
	// Latency of one call, from a log-linear histogram (within 3%); in
	// memory one call in 64 is timed. In half-peak from the call's scheduled
	// start, the load generator's timer lateness taken out; P99RawNs with
	// it, TimerLagP99Ns that lateness.
	P50Ns          nf     `json:"p50_ns"`
	P99Ns          nf     `json:"p99_ns"`
	P999Ns         nf     `json:"p999_ns"`
	LatencySamples uint64 `json:"latency_samples"`
	P99RawNs       nf     `json:"p99_raw_from_schedule_ns"`
	TimerLagP99Ns  nf     `json:"timer_lag_p99_ns"`
	// Per decision: this process's CPU (getrusage, user + system: the load
	// generator, the client, the garbage collector), Redis's CPU (INFO cpu,
	// user + system), Redis's commands (INFO commandstats, the commands
	// scripts run included; RedisCmdsBy per command), and this process's
	// allocations (runtime.MemStats.Mallocs). CPU in µs.
	ClientCPUUs       nf                 `json:"client_cpu_us_per_decision"`
	RedisCPUUs        nf                 `json:"redis_cpu_us_per_decision"`
	RedisCmds         nf                 `json:"redis_commands_per_decision"`
	RedisCmdsBy       map[string]float64 `json:"redis_commands_per_decision_by_name,omitempty"`
	AllocsPerDecision nf                 `json:"allocs_per_decision"`
	// RedisRuns: the script and function runs (FCALL, EVALSHA...) among
	// the commands, per decision. Nodes: on a Cluster, each node's share.
	RedisRuns nf            `json:"redis_runs_per_decision"`
	Nodes     []nodeFigures `json:"nodes,omitempty"`
	// BytesPerLimiter: MEMORY USAGE of a limiter's keys after the
	// measurement (Redis, one and keys).
	BytesPerLimiter nf `json:"bytes_per_limiter"`
	// The machine's one-minute load average (/proc/loadavg) before and
	// after the window, and the CPUs other processes used during it
	// (/proc/stat less this process and Redis; see noise.go).
	LoadBefore nf     `json:"load_before"`
	LoadAfter  nf     `json:"load_after"`
	OtherCPUs  nf     `json:"other_cpus"`
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// nodeFigures is one Cluster node's part of a measurement, per decision
// (of the whole Cluster's decisions): its CPU (µs), commands and runs.
type nodeFigures struct {
	Addr       string `json:"addr"`
	RedisCPUUs nf     `json:"redis_cpu_us_per_decision"`
	RedisCmds  nf     `json:"redis_commands_per_decision"`
	RedisRuns  nf     `json:"redis_runs_per_decision"`
}

// fill sets m's figures from a run's load; redis: the system is on Redis.
func (m *measurement) fill(l *load, redis bool, pace float64) {
	m.Seconds = l.seconds
	m.Granted, m.Refused, m.Decisions = l.granted, l.refused, l.decisions()
	m.Errors = l.errors
	m.FirstError = l.firstErr
	m.OfferedPerSec = pace
	d := float64(m.Decisions)
	if m.Decisions > 0 {
		m.GrantedFraction = float64(m.Granted) / d
		m.DecisionsPerSec = d / l.seconds
	}
	if pace > 0 {
		m.AchievedFraction = m.DecisionsPerSec / pace
	}
	m.LatencySamples = l.hist.n
	if l.hist.n > 0 {
		m.P50Ns, m.P99Ns, m.P999Ns = nf(l.hist.quantile(0.50)), nf(l.hist.quantile(0.99)), nf(l.hist.quantile(0.999))
	}
	if l.rawHist.n > 0 {
		m.P99RawNs = nf(l.rawHist.quantile(0.99))
	}
	if l.lagHist.n > 0 {
		m.TimerLagP99Ns = nf(l.lagHist.quantile(0.99))
	}
	a, b := l.before, l.after
	if a.loadOK && b.loadOK {
		m.LoadBefore, m.LoadAfter = nf(a.load1), nf(b.load1)
	}
	if o, ok := otherCPUs(a, b, l.seconds); ok {
		m.OtherCPUs = nf(o)
	}
	if m.Decisions == 0 {
		return
	}
	if a.rusageOK && b.rusageOK {
		m.ClientCPUUs = nf((b.rusage - a.rusage) / d * 1e6)
	}
	m.AllocsPerDecision = nf(float64(b.mallocs-a.mallocs) / d)
	if redis && a.redisOK && b.redisOK {
		m.RedisCPUUs = nf((b.redis - a.redis) / d * 1e6)
		var total uint64
		m.RedisCmdsBy = map[string]float64{}
		for name, n := range b.redisCmds {
			if delta := n - a.redisCmds[name]; n > a.redisCmds[name] {
				total += delta
				m.RedisCmdsBy[name] = float64(delta) / d
			}
		}
		m.RedisCmds = nf(float64(total) / d)
		m.RedisRuns = nf(runsOf(m.RedisCmdsBy))
		if len(a.nodes) == len(b.nodes) {
			for i, bn := range b.nodes {
				an := a.nodes[i]
				var cmds uint64
				by := map[string]float64{}
				for name, n := range bn.cmds {
					if n > an.cmds[name] {
						cmds += n - an.cmds[name]
						by[name] = float64(n-an.cmds[name]) / d
					}
				}
				m.Nodes = append(m.Nodes, nodeFigures{Addr: bn.addr, RedisCPUUs: nf((bn.cpu - an.cpu) / d * 1e6),
					RedisCmds: nf(float64(cmds) / d), RedisRuns: nf(runsOf(by))})
			}
		}
	}
}

// progress is m's line on stderr.
func (m *measurement) progress(c *cell) string {
	s := fmt.Sprintf("%-6s %-12s %4d callers  %-30s %12s/s", c.Store, c.Workload, c.Callers, m.System, thousands(m.DecisionsPerSec))
	if m.GrantedFraction < 0.99 && m.Decisions > 0 && c.Workload != denied {
		s += " (" + grantedText(m.GrantedFraction) + ")"
	}
	s += fmt.Sprintf("  p99 %s  client %s/dec", dur(float64(m.P99Ns)), micros(float64(m.ClientCPUUs)))
	if !math.IsNaN(float64(m.RedisCPUUs)) {
		s += fmt.Sprintf("  Redis %s/dec %.2f cmds/dec", micros(float64(m.RedisCPUUs)), float64(m.RedisCmds))
	}
	s += fmt.Sprintf("  %.2f allocs/dec  load %.2f", float64(m.AllocsPerDecision), float64(m.LoadAfter))
	if m.OfferedPerSec > 0 && m.AchievedFraction < offeredKeptAt {
		s += fmt.Sprintf("  offered %s/s NOT KEPT (%.0f%%)", thousands(m.OfferedPerSec), 100*m.AchievedFraction)
	}
	if m.Errors > 0 {
		s += fmt.Sprintf("  %d ERRORS (%s)", m.Errors, m.FirstError)
	}
	return s
}

// offeredKeptAt is the share of half-peak's offered load its decisions/s
// must reach for the load to count as kept (the window's edges cost a call
// per caller at most).
const offeredKeptAt = 0.95

// cell is one workload on one store with one number of callers: its
// systems measured in turn, Rounds times.
type cell struct {
	ID           string  `json:"id"` // store/workload/callers
	Workload     string  `json:"workload"`
	Store        string  `json:"store"`
	Callers      int     `json:"callers"`
	Limiters     int     `json:"limiters"`
	Distribution string  `json:"distribution,omitempty"`
	Rounds       int     `json:"rounds"`
	DurationSec  float64 `json:"duration_sec"`
	WarmupSec    float64 `json:"warmup_sec"`
	// Systems in the order of the tables; Order the order each round
	// measured them in.
	Systems      []string      `json:"systems"`
	Order        [][]string    `json:"order"`
	Measurements []measurement `json:"measurements"`
	Summaries    []summary     `json:"summaries"`
	Ratios       []ratio       `json:"ratios"`
	// FloorPaceOf: in half-peak, the system whose pace the floor at
	// redlimit's pace took. Floor: the floor's verdicts (floor.go).
	FloorPaceOf string      `json:"floor_pace_of,omitempty"`
	Floor       []floorNote `json:"floor,omitempty"`
}

func (c *cell) key() string { return fmt.Sprintf("%s/%s/%d", c.Store, c.Workload, c.Callers) }

// shortOfGranted reports, for a workload that asks every call to be
// granted, the median share of system's calls in c that were (ok: below
// 99%, so its figures are not of grants alone and its report says so).
func (c *cell) shortOfGranted(system string) (share float64, ok bool) {
	s := c.summary(system)
	if s == nil || c.Workload == denied || s.GrantedFraction.N == 0 {
		return 0, false
	}
	share = float64(s.GrantedFraction.Median)
	return share, share < 0.99
}

// grantedText is a share of calls granted, as the report prints it.
func grantedText(share float64) string { return fmt.Sprintf("%.1f%% granted", 100*share) }

// summary is one system's figures over a cell's rounds: each the median
// and range of the rounds' (errors: their sum).
type summary struct {
	System            string `json:"system"`
	DecisionsPerSec   stat   `json:"decisions_per_sec"`
	GrantedFraction   stat   `json:"granted_fraction"`
	P50Ns             stat   `json:"p50_ns"`
	P99Ns             stat   `json:"p99_ns"`
	ClientCPUUs       stat   `json:"client_cpu_us_per_decision"`
	RedisCPUUs        stat   `json:"redis_cpu_us_per_decision"`
	RedisCmds         stat   `json:"redis_commands_per_decision"`
	AllocsPerDecision stat   `json:"allocs_per_decision"`
	RedisRuns         stat   `json:"redis_runs_per_decision"`
	BytesPerLimiter   stat   `json:"bytes_per_limiter"`
	LoadBefore        stat   `json:"load_before"`
	LoadAfter         stat   `json:"load_after"`
	OtherCPUs         stat   `json:"other_cpus"`
	// Nodes: on a Cluster, each node's figures (in the measurements' order
	// of nodes).
	Nodes []nodeSummary `json:"nodes,omitempty"`
	// Half-peak: the offered load, and in how many rounds it was kept.
	OfferedPerSec float64 `json:"offered_per_sec,omitempty"`
	KeptRounds    int     `json:"offered_kept_rounds,omitempty"`
	Errors        uint64  `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
}

// nodeSummary is one Cluster node's figures over a cell's rounds.
type nodeSummary struct {
	Addr       string `json:"addr"`
	RedisCPUUs stat   `json:"redis_cpu_us_per_decision"`
	RedisCmds  stat   `json:"redis_commands_per_decision"`
	RedisRuns  stat   `json:"redis_runs_per_decision"`
}

// ratio compares a system (redlimit's, memstore's) with a peer in one cell:
// the metric's ratio system / peer taken within each round, and its median
// and range over the rounds.
type ratio struct {
	System   string `json:"system"`
	Peer     string `json:"peer"`
	Metric   string `json:"metric"` // decisions_per_sec, redis_cpu_us_per_decision
	PerRound []nf   `json:"per_round"`
	stat
}

// ratioMetrics are the metrics compared, with how to read them.
var ratioMetrics = []string{"decisions_per_sec", "redis_cpu_us_per_decision"}

// rounds returns system's figure f per round (NaN where the round had
// errors or no such figure).
func (c *cell) rounds(system string, f func(*measurement) float64) []float64 {
	out := make([]float64, c.Rounds)
	for r := range out {
		out[r] = math.NaN()
	}
	for i := range c.Measurements {
		m := &c.Measurements[i]
		if m.System == system && m.Round >= 1 && m.Round <= c.Rounds && m.Errors == 0 {
			out[m.Round-1] = f(m)
		}
	}
	return out
}

// summarise fills the cell's summaries and ratios from its measurements.
func (c *cell) summarise(byName map[string]*system) {
	c.Summaries, c.Ratios = nil, nil
	fig := func(system string, f func(*measurement) float64) stat { return summarise(c.rounds(system, f)) }
	for _, name := range c.Systems {
		s := summary{System: name}
		s.DecisionsPerSec = fig(name, func(m *measurement) float64 { return m.DecisionsPerSec })
		s.GrantedFraction = fig(name, func(m *measurement) float64 { return m.GrantedFraction })
		s.P50Ns = fig(name, func(m *measurement) float64 { return float64(m.P50Ns) })
		s.P99Ns = fig(name, func(m *measurement) float64 { return float64(m.P99Ns) })
		s.ClientCPUUs = fig(name, func(m *measurement) float64 { return float64(m.ClientCPUUs) })
		s.RedisCPUUs = fig(name, func(m *measurement) float64 { return float64(m.RedisCPUUs) })
		s.RedisCmds = fig(name, func(m *measurement) float64 { return float64(m.RedisCmds) })
		s.AllocsPerDecision = fig(name, func(m *measurement) float64 { return float64(m.AllocsPerDecision) })
		s.BytesPerLimiter = fig(name, func(m *measurement) float64 { return float64(m.BytesPerLimiter) })
		s.LoadBefore = fig(name, func(m *measurement) float64 { return float64(m.LoadBefore) })
		s.LoadAfter = fig(name, func(m *measurement) float64 { return float64(m.LoadAfter) })
		s.OtherCPUs = fig(name, func(m *measurement) float64 { return float64(m.OtherCPUs) })
		s.RedisRuns = fig(name, func(m *measurement) float64 { return float64(m.RedisRuns) })
		s.Nodes = c.nodeSummaries(name)
		for _, m := range c.Measurements {
			if m.System != name {
				continue
			}
			s.Errors += m.Errors
			if s.FirstError == "" {
				s.FirstError = m.FirstError
			}
			if m.OfferedPerSec > 0 {
				s.OfferedPerSec = m.OfferedPerSec
				if m.Errors == 0 && m.AchievedFraction >= offeredKeptAt {
					s.KeptRounds++
				}
			}
		}
		c.Summaries = append(c.Summaries, s)
	}
	c.Floor = c.floorNotes()
	if c.Workload == halfPeak {
		return // paced: decisions/s is the offered load
	}
	// The floor is never a peer, nor compared with one.
	for _, a := range c.Systems {
		if sa := byName[a]; sa == nil || sa.Peer || sa.Baseline {
			continue
		}
		for _, b := range c.Systems {
			if sb := byName[b]; sb == nil || !sb.Peer || sb.Baseline {
				continue
			}
			for _, metric := range ratioMetrics {
				get := metricOf(metric)
				per := perRoundRatios(c.rounds(a, get), c.rounds(b, get))
				st := summarise(per)
				if st.N == 0 {
					continue
				}
				c.Ratios = append(c.Ratios, ratio{System: a, Peer: b, Metric: metric, PerRound: nfs(per), stat: st})
			}
		}
	}
}

// nodeSummaries summarises system's per-node figures (nil: not on a
// Cluster).
func (c *cell) nodeSummaries(system string) []nodeSummary {
	var out []nodeSummary
	for i := range c.Measurements {
		if m := &c.Measurements[i]; m.System == system && len(m.Nodes) > len(out) {
			for _, n := range m.Nodes[len(out):] {
				out = append(out, nodeSummary{Addr: n.Addr})
			}
		}
	}
	for k := range out {
		node := func(f func(*nodeFigures) nf) stat {
			return summarise(c.rounds(system, func(m *measurement) float64 {
				if k < len(m.Nodes) {
					return float64(f(&m.Nodes[k]))
				}
				return math.NaN()
			}))
		}
		out[k].RedisCPUUs = node(func(n *nodeFigures) nf { return n.RedisCPUUs })
		out[k].RedisCmds = node(func(n *nodeFigures) nf { return n.RedisCmds })
		out[k].RedisRuns = node(func(n *nodeFigures) nf { return n.RedisRuns })
	}
	return out
}

func metricOf(metric string) func(*measurement) float64 {
	switch metric {
	case "decisions_per_sec":
		return func(m *measurement) float64 { return m.DecisionsPerSec }
	case "redis_cpu_us_per_decision":
		return func(m *measurement) float64 { return float64(m.RedisCPUUs) }
	}
	panic("bench: unknown metric " + metric)
}

func (c *cell) summary(system string) *summary {
	for i := range c.Summaries {
		if c.Summaries[i].System == system {
			return &c.Summaries[i]
		}
	}
	return nil
}

func (c *cell) ratio(system, peer, metric string) *ratio {
	for i := range c.Ratios {
		if q := &c.Ratios[i]; q.System == system && q.Peer == peer && q.Metric == metric {
			return q
		}
	}
	return nil
}

// settings are the run's.
type settings struct {
	Rounds            int      `json:"rounds"`
	DurationSec       float64  `json:"duration_sec"`
	MemoryDurationSec float64  `json:"memory_duration_sec"`
	WarmupSec         float64  `json:"warmup_sec"`
	Callers           []int    `json:"callers"`
	Workloads         []string `json:"workloads"`
	Keys              int      `json:"keys"`
	Zipf              float64  `json:"zipf"`
	Quick             bool     `json:"quick"`
	Cells             int      `json:"cells"`
	Measurements      int      `json:"measurements"`
	PlannedSec        float64  `json:"planned_sec"`
	TotalSec          float64  `json:"total_sec"`
	RedissonScript    string   `json:"redisson_script,omitempty"`
	Cluster           string   `json:"cluster,omitempty"`
	GrantedRedis      string   `json:"granted_limit_redis"`
	GrantedMemory     string   `json:"granted_limit_memory"`
	DeniedLimit       string   `json:"denied_limit"`
	ClientOptions     string   `json:"client_options"`
}

// report is everything the run found.
type report struct {
	Machine machine  `json:"machine"`
	Args    []string `json:"args"`
	// Dir is where Args' paths are taken from (options.dir); "" in a run
	// that did not record it, or was run from outside the tree.
	Dir      string   `json:"dir,omitempty"`
	Settings settings `json:"settings"`
	Systems  []system `json:"systems"`
	Cells    []cell   `json:"cells"`
}

// command is the run's command line as its caller would type it again,
// from where its paths are taken.
func (rep *report) command() string {
	args := strings.Join(rep.Settings.quoteArgs(rep.Args), " ")
	switch rep.Dir {
	case ".":
		return fmt.Sprintf("`go run ./cmd/redlimit bench %s` (from the repository's root)", args)
	case "bench":
		return fmt.Sprintf("`go run . %s` (in bench/)", args)
	case "":
		return fmt.Sprintf("`redlimit bench %s`", args)
	}
	return fmt.Sprintf("`redlimit bench %s` (in %s/)", args, rep.Dir)
}

func (rep *report) cell(store, workload string, callers int) *cell {
	for i := range rep.Cells {
		if c := &rep.Cells[i]; c.Store == store && c.Workload == workload && c.Callers == callers {
			return c
		}
	}
	return nil
}

func (rep *report) system(name string) *system {
	for i := range rep.Systems {
		if rep.Systems[i].Name == name {
			return &rep.Systems[i]
		}
	}
	return nil
}

func (rep *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (rep *report) writeSVG(path string) error {
	var buf bytes.Buffer
	if err := rep.chart(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// workloadTitle names a workload in the report.
func workloadTitle(w, store string, keys int, dist string) string {
	where := "on Redis"
	switch store {
	case inMemory:
		where = "in memory"
	case onCluster:
		where = fmt.Sprintf("on a Redis Cluster of %d primaries", clusterPrimaries)
	}
	switch w {
	case one:
		return "one limiter, every request granted, " + where
	case denied:
		return "one limiter used up, every request refused, " + where
	case halfPeak:
		return "half of peak (paced, open loop, at half each system's own decisions/s on one limiter), " + where
	}
	return fmt.Sprintf("%s keys (%s), every request granted, %s", thousands(float64(keys)), dist, where)
}

// workloadShort names a workload in the headline table.
func workloadShort(w string, keys int, dist string) string {
	switch w {
	case one:
		return "one limiter"
	case denied:
		return "one limiter, refused"
	}
	return fmt.Sprintf("%s keys, %s", thousands(float64(keys)), dist)
}

// writeMarkdown prints the report: the run, the headline ratios, and a
// table per workload with every system and number of callers.
func (rep *report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	pf := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m, st := rep.Machine, rep.Settings
	pf("## Run\n\n")
	pf("- machine: %s, GOMAXPROCS %d (%d CPUs: %s), %s/%s, kernel %s, memory %s\n", m.GoVersion, m.GOMAXPROCS, m.NumCPU, m.CPUModel, m.GOOS, m.GOARCH, m.Kernel, m.MemTotal)
	pf("- Redis: %s (%s)\n", m.RedisVersion, m.RedisServer)
	mod := "no file modified"
	if len(m.RedlimitModified) > 0 {
		mod = "modified: " + strings.Join(m.RedlimitModified, ", ")
	}
	pf("- redlimit: commit `%s`, %s; date %s\n", m.RedlimitCommit, mod, m.Date)
	pf("- command: %s\n", rep.command())
	pf("- %d rounds; per system and round %gs measured on Redis, %gs in memory, after %gs of warm-up; %d measurements in %d cells, %s (planned about %s)\n",
		st.Rounds, st.DurationSec, st.MemoryDurationSec, st.WarmupSec, st.Measurements, st.Cells, secs(st.TotalSec), secs(st.PlannedSec))
	pf("- limits: granted %s on Redis, %s in memory; denied %s, used up first; keys workloads: %s limiters, Zipf s=%g; Redis client: %s\n",
		st.GrantedRedis, st.GrantedMemory, st.DeniedLimit, thousands(float64(st.Keys)), st.Zipf, st.ClientOptions)
	if st.Cluster != "" {
		pf("- Redis Cluster: %s; the same client options, a ClusterClient (pool per node)\n", st.Cluster)
	}
	pf("- figures: median [min-max] over the rounds; a ratio is taken within each round (system / peer), then its median [min-max]\n\n")

	rep.headline(pf)
	rep.floorSection(pf)

	for _, store := range []string{onRedis, onCluster, inMemory} {
		for _, wl := range workloadNames {
			var cells []*cell
			for i := range rep.Cells {
				if c := &rep.Cells[i]; c.Store == store && c.Workload == wl {
					cells = append(cells, c)
				}
			}
			if len(cells) == 0 {
				continue
			}
			rep.workloadTable(pf, cells)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// quoteArgs prints the command line's arguments for a shell.
func (settings) quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$|&;<>()*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}

// headline prints the ratios of decisions/s, system over peer, per
// workload and callers: the one table to read first.
func (rep *report) headline(pf func(string, ...any)) {
	var callers []int
	for _, c := range rep.Cells {
		if !slices.Contains(callers, c.Callers) {
			callers = append(callers, c.Callers)
		}
	}
	slices.Sort(callers)
	type row struct{ store, workload, dist, system, peer string }
	var rows []row
	for _, c := range rep.Cells {
		for _, q := range c.Ratios {
			r := row{c.Store, c.Workload, c.Distribution, q.System, q.Peer}
			if q.Metric == "decisions_per_sec" && !slices.Contains(rows, r) {
				rows = append(rows, r)
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	pf("## Headline: decisions per second, system / peer\n\n")
	pf("Median [min-max] over the rounds of the ratio within each round; above 1: the first system made more decisions per second.\n\n")
	pf("| workload | system | peer |")
	for _, n := range callers {
		pf(" %d %s |", n, plural(n, "caller"))
	}
	pf("\n|---|---|---|%s\n", strings.Repeat("---:|", len(callers)))
	for _, r := range rows {
		where := ""
		switch r.store {
		case inMemory:
			where = " (memory)"
		case onCluster:
			where = " (Cluster)"
		}
		pf("| %s%s | %s | %s |", workloadShort(r.workload, rep.Settings.Keys, r.dist), where, r.system, r.peer)
		for _, n := range callers {
			txt := "-"
			if c := rep.cell(r.store, r.workload, n); c != nil {
				if q := c.ratio(r.system, r.peer, "decisions_per_sec"); q != nil {
					txt = ratioText(q.stat)
					// A ratio of figures that are not of grants alone says so.
					if f, short := c.shortOfGranted(r.system); short {
						txt += " (" + grantedText(f) + ")"
					}
					if f, short := c.shortOfGranted(r.peer); short {
						txt += " (" + r.peer + " " + grantedText(f) + ")"
					}
				}
			}
			pf(" %s |", txt)
		}
		pf("\n")
	}
	pf("\n")
}

// workloadTable prints one workload's cells: a row per callers and system.
func (rep *report) workloadTable(pf func(string, ...any), cells []*cell) {
	c0 := cells[0]
	pf("## %s\n\n", workloadTitle(c0.Workload, c0.Store, c0.Limiters, c0.Distribution))
	var peers []string
	for _, c := range cells {
		for _, name := range c.Systems {
			if s := rep.system(name); s != nil && s.Peer && !slices.Contains(peers, name) {
				peers = append(peers, name)
			}
		}
	}
	redis := c0.Store != inMemory
	half := c0.Workload == halfPeak
	type column struct {
		head  string
		value func(c *cell, s *summary) string
	}
	ratioCol := func(head, peer, metric string) column {
		return column{head, func(c *cell, s *summary) string {
			if q := c.ratio(s.System, peer, metric); q != nil {
				return ratioText(q.stat)
			}
			return "-"
		}}
	}
	cols := []column{
		{"callers", func(c *cell, _ *summary) string { return fmt.Sprint(c.Callers) }},
		{"system", func(_ *cell, s *summary) string { return s.System }},
		{"decisions/s", func(_ *cell, s *summary) string { return statText(s.DecisionsPerSec, thousands) }},
	}
	if half {
		cols = append(cols, column{"offered/s (rounds kept)", func(c *cell, s *summary) string {
			return fmt.Sprintf("%s (%d/%d)", thousands(s.OfferedPerSec), s.KeptRounds, c.Rounds)
		}})
	} else {
		for _, p := range peers {
			cols = append(cols, ratioCol("vs "+p, p, "decisions_per_sec"))
		}
	}
	// Where a system was refused calls a granted workload meant to grant,
	// the share granted, in a column of its own.
	short := false
	for _, c := range cells {
		for _, name := range c.Systems {
			if _, ok := c.shortOfGranted(name); ok {
				short = true
			}
		}
	}
	if short {
		cols = append(cols, column{"granted", func(_ *cell, s *summary) string {
			return statText(s.GrantedFraction, func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) })
		}})
	}
	cols = append(cols, column{"p99", func(_ *cell, s *summary) string { return statText(s.P99Ns, dur) }})
	if half {
		cols = append(cols, column{"p99 <= 1 ms", p99Verdict})
	}
	cols = append(cols, column{"client CPU/decision", func(_ *cell, s *summary) string { return statText(s.ClientCPUUs, micros) }})
	if redis {
		cols = append(cols, column{"Redis CPU/decision", func(_ *cell, s *summary) string { return statText(s.RedisCPUUs, micros) }})
		if !half {
			for _, p := range peers {
				cols = append(cols, ratioCol("Redis CPU vs "+p, p, "redis_cpu_us_per_decision"))
			}
		}
		cols = append(cols, column{"Redis commands/decision", func(_ *cell, s *summary) string { return statText(s.RedisCmds, twoDigits) }})
	}
	if c0.Store == onCluster {
		cols = append(cols,
			column{"runs/decision (FCALL, EVALSHA)", func(_ *cell, s *summary) string { return statText(s.RedisRuns, twoDigits) }},
			column{"per node: Redis CPU/decision, runs/decision", func(_ *cell, s *summary) string {
				var parts []string
				for _, n := range s.Nodes {
					parts = append(parts, micros(float64(n.RedisCPUUs.Median))+", "+twoDigits(float64(n.RedisRuns.Median)))
				}
				if len(parts) == 0 {
					return "-"
				}
				return strings.Join(parts, " · ")
			}})
	}
	cols = append(cols, column{"allocs/decision", func(_ *cell, s *summary) string { return statText(s.AllocsPerDecision, twoDigits) }})
	if redis && (c0.Workload == one || isKeys(c0.Workload)) {
		cols = append(cols, column{"bytes/limiter", func(_ *cell, s *summary) string { return statText(s.BytesPerLimiter, thousands) }})
	}
	cols = append(cols,
		column{"load before → after", func(_ *cell, s *summary) string {
			return twoDigits(float64(s.LoadBefore.Median)) + " → " + twoDigits(float64(s.LoadAfter.Median))
		}},
		column{"errors", func(_ *cell, s *summary) string { return fmt.Sprint(s.Errors) }},
	)
	pf("|")
	for _, col := range cols {
		pf(" %s |", col.head)
	}
	pf("\n|")
	for _, col := range cols {
		if col.head == "system" {
			pf("---|")
		} else {
			pf("---:|")
		}
	}
	pf("\n")
	var errs []string
	for _, c := range cells {
		for _, name := range c.Systems {
			s := c.summary(name)
			if s == nil {
				continue
			}
			pf("|")
			for _, col := range cols {
				pf(" %s |", col.value(c, s))
			}
			pf("\n")
			if s.Errors > 0 {
				errs = append(errs, fmt.Sprintf("%d callers, %s: %s", c.Callers, s.System, s.FirstError))
			}
		}
	}
	if len(errs) > 0 {
		pf("\nErrors: %s\n", strings.Join(errs, "; "))
	}
	pf("\n")
}

// halfPeakTargetNs is the latency target at half of peak: p99 at most 1 ms.
const halfPeakTargetNs = 1e6

// p99Verdict says whether s's median p99 in c meets the target: "yes",
// "no", or why it cannot say ("errors"; at half of peak "load not kept").
func p99Verdict(c *cell, s *summary) string {
	switch {
	case s.Errors > 0:
		return "errors"
	case s.OfferedPerSec > 0 && s.KeptRounds < c.Rounds:
		return "load not kept"
	case s.P99Ns.N == 0:
		return "-"
	case float64(s.P99Ns.Median) <= halfPeakTargetNs:
		return "yes"
	}
	return "no"
}

// statText prints a stat as "median [min-max]" with f.
func statText(s stat, f func(float64) string) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return f(float64(s.Median))
	}
	return fmt.Sprintf("%s [%s-%s]", f(float64(s.Median)), f(float64(s.Min)), f(float64(s.Max)))
}

// ratioText prints a ratio's stat as "1.23x [1.10-1.31]".
func ratioText(s stat) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.2fx", float64(s.Median))
	}
	return fmt.Sprintf("%.2fx [%.2f-%.2f]", float64(s.Median), float64(s.Min), float64(s.Max))
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

func twoDigits(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// micros prints µs.
func micros(us float64) string {
	switch {
	case math.IsNaN(us):
		return "-"
	case us < 10:
		return fmt.Sprintf("%.2fµs", us)
	case us < 100:
		return fmt.Sprintf("%.1fµs", us)
	}
	return fmt.Sprintf("%.0fµs", us)
}

// secs prints seconds as minutes and seconds.
func secs(s float64) string {
	if s < 60 {
		return fmt.Sprintf("%.0fs", s)
	}
	return fmt.Sprintf("%dmin %02.0fs", int(s/60), math.Mod(s, 60))
}

// thousands prints v rounded, with thousands separators.
func thousands(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dur prints ns as a short duration.
func dur(ns float64) string {
	switch {
	case math.IsNaN(ns) || ns == 0:
		return "-"
	case ns < 1e3:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3gms", ns/1e6)
	}
	return fmt.Sprintf("%.3gs", ns/1e9)
}
