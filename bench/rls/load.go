package rls

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

// LoadOptions tunes Measure. The zero value measures Rules' "load"
// descriptor at 1, 8 and 64 callers, 3 rounds of 3 s.
type LoadOptions struct {
	// Domain and Key name the descriptor; default Domain and LoadKey. Its
	// limit should be far above the load, so that every call is granted.
	Domain, Key string
	// Callers are the numbers of concurrent callers (goroutines, each in
	// a closed loop: one call, then the next), one cell each; default
	// 1, 8, 64.
	Callers []int
	// Rounds is how many times each system is measured per cell; default 3.
	Rounds int
	// Duration is one measurement's window; default 3s.
	Duration time.Duration
	// Warmup is unmeasured load before the window; default 500ms.
	Warmup time.Duration
	// Conns is how many client connections each measurement opens, the
	// callers spread over them; default 1 (Envoy's proxy opens one per
	// worker thread).
	Conns int
	// OneValue puts every caller on one descriptor value, so that all
	// share one count (a global limit, a hot key); by default each caller
	// has its own.
	OneValue bool
	// RunID makes this run's descriptor values its own; default random.
	RunID string
	// Redis, when set, is the address (host:port) of the Redis both
	// systems keep their counts in: Measure then reports its CPU and
	// commands per decision (INFO, read at the window's ends).
	Redis string
	// Floor, when its Addr is set, is the gRPC floor (NewFloor, FloorName
	// if unnamed), measured in every round after the two systems, the
	// same way, and reported beside them, never in a ratio.
	Floor System
	// Progress, when set, gets one line per measurement.
	Progress io.Writer
}

// Measurement is one system measured once.
type Measurement struct {
	System  string `json:"system"`
	Callers int    `json:"callers"`
	Round   int    `json:"round"`
	// Decisions counts the calls started in the window that were answered;
	// Refused those answered OVER_LIMIT; Errors those that failed.
	Decisions int64   `json:"decisions"`
	Refused   int64   `json:"refused"`
	Errors    int64   `json:"errors"`
	PerSecond float64 `json:"decisions_per_s"`
	// P50, P99 and P999 are the latencies of the answered calls, exact.
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	// LoadBefore and LoadAfter are /proc/loadavg's one-minute figure at
	// the window's ends (0 where there is none).
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
	// CPU per decision over the window, in seconds (0 where unknown):
	// the system's process (System.PID), this process (the load
	// generator and client), Redis (LoadOptions.Redis); and Redis's
	// commands per decision.
	ServerCPU float64 `json:"server_cpu_per_decision"`
	ClientCPU float64 `json:"client_cpu_per_decision"`
	RedisCPU  float64 `json:"redis_cpu_per_decision"`
	RedisCmds float64 `json:"redis_commands_per_decision"`
}

// usage is what the window's ends read: load and CPU seconds so far (-1
// where unknown), Redis's commands so far.
type usage struct {
	load                        float64
	server, client, redis, cmds float64
}

func readUsage(ctx context.Context, pid int, rdb *redis.Client) usage {
	u := usage{load: loadAvg(), server: -1, client: procCPU(os.Getpid()), redis: -1, cmds: -1}
	if pid > 0 {
		u.server = procCPU(pid)
	}
	if rdb != nil {
		if info, err := rdb.Info(ctx, "cpu", "stats").Result(); err == nil {
			u.redis, u.cmds = redisUsage(info)
		}
	}
	return u
}

// perDecision is (to - from) / n, 0 when either end is unknown or n is 0.
func perDecision(from, to float64, n int64) float64 {
	if from < 0 || to < 0 || n == 0 {
		return 0
	}
	return (to - from) / float64(n)
}

// procCPU is the user + system CPU seconds of process pid so far, from
// /proc/PID/stat (in USER_HZ, 100 per second); -1 where unknown.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (ut + st) / 100
}

// redisUsage reads used_cpu_user + used_cpu_sys (seconds) and
// total_commands_processed from INFO cpu and stats; -1 where missing.
func redisUsage(info string) (cpu, cmds float64) {
	cpu, cmds = -1, -1
	var user, sys float64
	seen := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch k {
		case "used_cpu_user":
			user = x
			seen++
		case "used_cpu_sys":
			sys = x
			seen++
		case "total_commands_processed":
			cmds = x
		}
	}
	if seen == 2 {
		cpu = user + sys
	}
	return cpu, cmds
}

// Stat is a figure over a cell's rounds.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// N is how many rounds had the figure (0: none, the rest zero).
	N int `json:"n"`
}

// Cell sums one number of callers up: per system ([0] is A) and, for the
// ratios, A over B within each round.
type Cell struct {
	Callers   int     `json:"callers"`
	PerSecond [2]Stat `json:"decisions_per_s"`
	P50       [2]Stat `json:"p50_ns"`
	P99       [2]Stat `json:"p99_ns"`
	// Ratios are A's decisions/s over B's, and P99Ratios A's p99 over
	// B's (below 1: A answers faster), round by round (a round where B
	// answered nothing has none).
	Ratios    []float64 `json:"ratios"`
	P99Ratios []float64 `json:"p99_ratios"`
	Ratio     Stat      `json:"ratio"`
	P99Ratio  Stat      `json:"p99_ratio"`
	// CPU seconds and Redis commands per decision (Measurement's), the
	// rounds that had them.
	ServerCPU [2]Stat `json:"server_cpu_per_decision"`
	ClientCPU [2]Stat `json:"client_cpu_per_decision"`
	RedisCPU  [2]Stat `json:"redis_cpu_per_decision"`
	RedisCmds [2]Stat `json:"redis_commands_per_decision"`
	// Errors and Refused add up every measurement of the cell.
	Errors  int64 `json:"errors"`
	Refused int64 `json:"refused"`
	// Floor sums the gRPC floor's measurements up, when measured.
	Floor *FloorCell `json:"floor,omitempty"`
}

// FloorCell is the gRPC floor's figures in one cell, over the rounds.
type FloorCell struct {
	PerSecond Stat  `json:"decisions_per_s"`
	P50       Stat  `json:"p50_ns"`
	P99       Stat  `json:"p99_ns"`
	ServerCPU Stat  `json:"server_cpu_per_decision"`
	ClientCPU Stat  `json:"client_cpu_per_decision"`
	RedisCPU  Stat  `json:"redis_cpu_per_decision"`
	Errors    int64 `json:"errors"`
}

// LoadReport is the outcome of Measure.
type LoadReport struct {
	Systems      [2]System     `json:"systems"`
	Floor        *System       `json:"floor,omitempty"`
	Domain       string        `json:"domain"`
	Key          string        `json:"key"`
	Rounds       int           `json:"rounds"`
	Duration     time.Duration `json:"duration_ns"`
	Warmup       time.Duration `json:"warmup_ns"`
	Conns        int           `json:"conns"`
	OneValue     bool          `json:"one_value"`
	RunID        string        `json:"run_id"`
	Measurements []Measurement `json:"measurements"`
	Cells        []Cell        `json:"cells"`
}

func (o *LoadOptions) setDefaults() error {
	if o.Domain == "" {
		o.Domain = Domain
	}
	if o.Key == "" {
		o.Key = LoadKey
	}
	if len(o.Callers) == 0 {
		o.Callers = []int{1, 8, 64}
	}
	for _, c := range o.Callers {
		if c < 1 || c > 10000 {
			return fmt.Errorf("rls: %d callers: want 1..10000", c)
		}
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if o.Warmup < 0 {
		return fmt.Errorf("rls: negative warmup %v", o.Warmup)
	}
	if o.Warmup == 0 {
		o.Warmup = 500 * time.Millisecond
	}
	if o.Conns <= 0 {
		o.Conns = 1
	}
	if o.RunID == "" {
		o.RunID = newRunID()
	}
	if o.Floor.Addr != "" && o.Floor.Name == "" {
		o.Floor.Name = FloorName
	}
	return nil
}

// Measure measures a and b in turn, for each number of callers: in round
// r the system that went second in round r-1 goes first (A B, B A, A B,
// ...), each measurement on fresh connections with the same client
// settings. Ratios are taken within a round, so a slow stretch of the
// machine weighs on both sides of one ratio. It fails only when it cannot
// measure (bad options, ctx ended); failed calls are counted.
func Measure(ctx context.Context, a, b System, o LoadOptions) (*LoadReport, error) {
	if err := checkSystems(a, b); err != nil {
		return nil, err
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if o.Floor.Addr != "" {
		if err := checkSystems(a, o.Floor); err != nil {
			return nil, fmt.Errorf("%w (the floor)", err)
		}
		if err := checkSystems(b, o.Floor); err != nil {
			return nil, fmt.Errorf("%w (the floor)", err)
		}
	}
	r := &LoadReport{Systems: [2]System{a, b}, Domain: o.Domain, Key: o.Key, Rounds: o.Rounds,
		Duration: o.Duration, Warmup: o.Warmup, Conns: o.Conns, OneValue: o.OneValue, RunID: o.RunID}
	sys := r.Systems
	if o.Floor.Addr != "" {
		r.Floor = &o.Floor
	}
	progress := func(m Measurement) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "callers=%d round=%d %s: %.0f decisions/s p50=%v p99=%v errors=%d load %.2f->%.2f cpu/decision server=%.1fµs redis=%.1fµs client=%.1fµs\n",
				m.Callers, m.Round, m.System, m.PerSecond, m.P50, m.P99, m.Errors, m.LoadBefore, m.LoadAfter, m.ServerCPU*1e6, m.RedisCPU*1e6, m.ClientCPU*1e6)
		}
	}
	var rdb *redis.Client
	if o.Redis != "" {
		rdb = redis.NewClient(&redis.Options{Addr: o.Redis, MaxRetries: -1, PoolSize: 1})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("rls: Redis at %s: %w", o.Redis, err)
		}
	}
	for _, callers := range o.Callers {
		cell := Cell{Callers: callers}
		var per [2][]Measurement
		var floor []Measurement
		for round := range o.Rounds {
			for k := range 2 {
				i := (round + k) % 2
				m, err := measureOne(ctx, sys[i], callers, round, o, rdb)
				if err != nil {
					return nil, err
				}
				progress(m)
				per[i] = append(per[i], m)
				r.Measurements = append(r.Measurements, m)
				cell.Errors += m.Errors
				cell.Refused += m.Refused
			}
			// A round where B answered nothing has no ratio.
			if ma, mb := per[0][round], per[1][round]; mb.PerSecond > 0 && mb.P99 > 0 {
				cell.Ratios = append(cell.Ratios, ma.PerSecond/mb.PerSecond)
				cell.P99Ratios = append(cell.P99Ratios, float64(ma.P99)/float64(mb.P99))
			}
			if r.Floor != nil {
				m, err := measureOne(ctx, o.Floor, callers, round, o, rdb)
				if err != nil {
					return nil, err
				}
				progress(m)
				floor = append(floor, m)
				r.Measurements = append(r.Measurements, m)
			}
		}
		if r.Floor != nil {
			fc := &FloorCell{
				PerSecond: summarise(figures(floor, func(m Measurement) float64 { return m.PerSecond })),
				P50:       summarise(figures(floor, func(m Measurement) float64 { return float64(m.P50) })),
				P99:       summarise(figures(floor, func(m Measurement) float64 { return float64(m.P99) })),
				ServerCPU: summarise(known(figures(floor, func(m Measurement) float64 { return m.ServerCPU }))),
				ClientCPU: summarise(known(figures(floor, func(m Measurement) float64 { return m.ClientCPU }))),
				RedisCPU:  summarise(known(figures(floor, func(m Measurement) float64 { return m.RedisCPU }))),
			}
			for _, m := range floor {
				fc.Errors += m.Errors
			}
			cell.Floor = fc
		}
		for i := range 2 {
			cell.PerSecond[i] = summarise(figures(per[i], func(m Measurement) float64 { return m.PerSecond }))
			cell.P50[i] = summarise(figures(per[i], func(m Measurement) float64 { return float64(m.P50) }))
			cell.P99[i] = summarise(figures(per[i], func(m Measurement) float64 { return float64(m.P99) }))
			cell.ServerCPU[i] = summarise(known(figures(per[i], func(m Measurement) float64 { return m.ServerCPU })))
			cell.ClientCPU[i] = summarise(known(figures(per[i], func(m Measurement) float64 { return m.ClientCPU })))
			cell.RedisCPU[i] = summarise(known(figures(per[i], func(m Measurement) float64 { return m.RedisCPU })))
			cell.RedisCmds[i] = summarise(known(figures(per[i], func(m Measurement) float64 { return m.RedisCmds })))
		}
		cell.Ratio, cell.P99Ratio = summarise(cell.Ratios), summarise(cell.P99Ratios)
		r.Cells = append(r.Cells, cell)
	}
	return r, nil
}

// measureOne runs callers closed loops on s for Warmup + Duration and
// measures the calls started within the window.
func measureOne(ctx context.Context, s System, callers, round int, o LoadOptions, rdb *redis.Client) (Measurement, error) {
	m := Measurement{System: s.Name, Callers: callers, Round: round + 1}
	clients := make([]rlsv3.RateLimitServiceClient, o.Conns)
	conns := make([]*grpc.ClientConn, o.Conns)
	defer func() {
		for _, cc := range conns {
			if cc != nil {
				cc.Close()
			}
		}
	}()
	// Each connection is made, and the system seen to answer, before the
	// clock starts.
	for i := range conns {
		cc, c, err := dial(s)
		if err != nil {
			return m, err
		}
		conns[i], clients[i] = cc, c
		if _, err := callOnce(ctx, c, request(o.Domain, o.Key, o.RunID+"-"+s.Name+"-connect")); err != nil {
			return m, fmt.Errorf("rls: %s at %s: %w", s.Name, s.Addr, err)
		}
	}
	type result struct {
		lat                 []time.Duration
		ok, refused, failed int64
	}
	results := make([]result, callers)
	from := time.Now().Add(o.Warmup)
	to := from.Add(o.Duration)
	var began, ended usage
	var wg sync.WaitGroup
	// The figures of use are read as the window opens and closes, off
	// the callers' path.
	wg.Go(func() {
		if sleepUntil(ctx, from) == nil {
			began = readUsage(ctx, s.PID, rdb)
		}
		if sleepUntil(ctx, to) == nil {
			ended = readUsage(ctx, s.PID, rdb)
		}
	})
	for g := range callers {
		wg.Go(func() {
			c := clients[g%len(clients)]
			value := o.RunID + "-" + s.Name + "-" + strconv.Itoa(g)
			if o.OneValue {
				value = o.RunID + "-" + s.Name + "-all"
			}
			req := request(o.Domain, o.Key, value)
			res := &results[g]
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(to) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := c.ShouldRateLimit(cctx, req)
				cancel()
				lat := time.Since(t0)
				if t0.Before(from) {
					continue
				}
				switch {
				case err != nil:
					res.failed++
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
					res.refused++
					res.ok++
					res.lat = append(res.lat, lat)
				default:
					res.ok++
					res.lat = append(res.lat, lat)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return m, err
	}
	var lat []time.Duration
	for _, res := range results {
		m.Decisions += res.ok
		m.Refused += res.refused
		m.Errors += res.failed
		lat = append(lat, res.lat...)
	}
	slices.Sort(lat)
	m.PerSecond = float64(m.Decisions) / o.Duration.Seconds()
	m.LoadBefore, m.LoadAfter = began.load, ended.load
	m.ServerCPU = perDecision(began.server, ended.server, m.Decisions)
	m.ClientCPU = perDecision(began.client, ended.client, m.Decisions)
	m.RedisCPU = perDecision(began.redis, ended.redis, m.Decisions)
	// INFO itself is one command, run at the window's start.
	m.RedisCmds = perDecision(began.cmds+1, ended.cmds, m.Decisions)
	m.P50, m.P99, m.P999 = quantile(lat, 0.50), quantile(lat, 0.99), quantile(lat, 0.999)
	return m, nil
}

// quantile is the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// known leaves out the zeros of xs (figures a measurement did not have).
func known(xs []float64) []float64 {
	return slices.DeleteFunc(xs, func(x float64) bool { return x == 0 })
}

func figures(ms []Measurement, f func(Measurement) float64) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i] = f(m)
	}
	return out
}

// summarise is the median (the mean of the middle two for an even count)
// and range of xs; the zero Stat when there is none.
func summarise(xs []float64) Stat {
	v := slices.Clone(xs)
	if len(v) == 0 {
		return Stat{}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// loadAvg is /proc/loadavg's one-minute figure, 0 where there is none.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b) + " x")[0], 64)
	if err != nil {
		return 0
	}
	return f
}
