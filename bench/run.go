package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Workloads.
const (
	// one: one limiter, every request granted (a limit far above the load).
	one = "one"
	// keysUniform and keysZipf: --keys limiters at the granted limit, each
	// call on a limiter drawn uniformly or by Zipf's law (a few hot keys).
	keysUniform = "keys-uniform"
	keysZipf    = "keys-zipf"
	// denied: one limiter, used up: every request refused.
	denied = "denied"
	// halfPeak: one limiter at the granted limit, the callers paced, open
	// loop, at half the system's own decisions/s in one (same callers):
	// latency at half of peak. On Redis only.
	halfPeak = "half-peak"
)

// workloadNames are the workloads, in the order the plan runs them
// (half-peak is paced on one's figures).
var workloadNames = []string{one, denied, halfPeak, keysUniform, keysZipf}

func isKeys(w string) bool { return w == keysUniform || w == keysZipf }

// Limits. granted (one, keys, half-peak): far above any offered load, 10^7
// per second on Redis (not more, so that every system still does its
// limiting work: redis_rate counts time in float seconds since 2017, in
// which a 1 ns increment at 2^30 per second vanishes, and it would then
// write nothing), 2^30 per second in memory. denied: 1 per minute, used up
// before the measurement.
var (
	grantedRedis  = limit{Rate: 10_000_000, Interval: time.Second}
	grantedMemory = limit{Rate: 1 << 30, Interval: time.Second}
	deniedLimit   = limit{Rate: 1, Interval: time.Minute}
)

// grantedLimit is the granted limit for s.
func grantedLimit(s *system) limit {
	if s.Store == onRedis {
		return grantedRedis
	}
	return grantedMemory
}

// halfPeakShare is the share of the peak (one's decisions/s, same system
// and callers) that half-peak offers.
const halfPeakShare = 0.5

// cellSpec is one cell of the plan: a workload on one store with a number
// of callers, and the systems compared in it.
type cellSpec struct {
	Workload string
	Store    string
	Callers  int
	Systems  []string
	Duration time.Duration // measured, per system and round
}

// buildPlan lists the cells to measure, in order: on Redis one limiter,
// denied, half-peak, the keys workloads; then the Cluster cell; then in
// memory one limiter and the keys workloads; callers ascending within each.
// The systems of a cell are those whose comparison the cell is for: every
// algorithm of redlimit's Limiter against redis_rate and Redisson's script
// on one limiter and at half of peak; the token bucket only when every
// request is refused (redisstore answers an exhausted limiter's refusals
// alike for every algorithm); over many keys, the keyed policy of every
// algorithm (what a service with many keys uses) and, of the Limiter per
// key, the token bucket (redis_rate's like) and the sliding log (Redisson's
// like, the default) only; on one limiter the policy's token bucket and
// sliding log too. The Cluster cell (--cluster) is 100,000 keys, uniform,
// at 64 callers (or the most below), the policy's token bucket and fixed
// window against redis_rate. In memory memstore against x/time/rate and
// go-limiter. --quick keeps redlimit's token bucket and sliding log (over
// many keys the Limiter's token bucket and the policy's two; on the
// Cluster the fixed window too; no policy on one limiter), and measures
// denied, half-peak, keys-zipf and the in-memory keys workloads at the most
// callers only; --systems filters every cell (and, given, lifts the choice
// of algorithms per cell). The floor (floor.go, unless --floor=false) is on
// one limiter, at half of peak (at its own pace and at redlimit's) and in
// the keys cells; --quick keeps it on one limiter and at redlimit's pace.
func buildPlan(o *options, all []*system) []cellSpec {
	pick := func(store string, keep func(*system) bool) []string {
		var out []string
		for _, s := range all {
			if s.Store != store || !keep(s) || !o.systems.MatchString(s.Name) {
				continue
			}
			out = append(out, s.Name)
		}
		return out
	}
	// mainAlg: the token bucket and the sliding log, unless --systems chose.
	mainAlg := func(s *system) bool {
		return o.systemsSet || s.Algorithm == "token-bucket" || s.Algorithm == "sliding-log"
	}
	// quickAlg: --quick measures redlimit's main algorithms only.
	quickAlg := func(s *system) bool { return !o.quick || mainAlg(s) }
	limiter := func(s *system) bool { return s.Family == "redlimit" && !s.AutoPipeline && quickAlg(s) }
	policy := func(s *system) bool { return s.Family == "redlimit policy" && quickAlg(s) }
	peer := func(s *system) bool { return s.Peer }
	// The floor: in one, half-peak and the keys cells; --quick keeps it on
	// one limiter, and at half of peak at redlimit's pace only.
	floor := func(s *system, w string) bool {
		if !o.floor || s.Family != floorFamily {
			return false
		}
		if s.Name == floorPacedName {
			return w == halfPeak
		}
		return w == one || (!o.quick && (w == halfPeak || isKeys(w)))
	}
	redisSystems := map[string][]string{
		one: pick(onRedis, func(s *system) bool {
			return peer(s) || floor(s, one) || limiter(s) || (s.Family == "redlimit" && s.AutoPipeline && o.autopipeline && quickAlg(s)) || (policy(s) && mainAlg(s) && !o.quick)
		}),
		denied:   pick(onRedis, func(s *system) bool { return peer(s) || (limiter(s) && s.Algorithm == "token-bucket") }),
		halfPeak: pick(onRedis, func(s *system) bool { return peer(s) || limiter(s) || floor(s, halfPeak) }),
		keysUniform: pick(onRedis, func(s *system) bool {
			// --quick: the policy's sliding log stands for the Limiter's.
			return peer(s) || floor(s, keysUniform) || (limiter(s) && mainAlg(s) && (!o.quick || o.systemsSet || s.Algorithm == "token-bucket")) || policy(s)
		}),
	}
	redisSystems[keysZipf] = redisSystems[keysUniform]
	// The floor at redlimit's pace needs a system of redlimit's to pace it
	// like.
	if !slices.ContainsFunc(redisSystems[halfPeak], func(n string) bool { return strings.HasPrefix(n, "redlimit ") }) {
		redisSystems[halfPeak] = slices.DeleteFunc(redisSystems[halfPeak], func(n string) bool { return n == floorPacedName })
	}
	clusterSystems := pick(onRedis, func(s *system) bool {
		return s.Family == "redis_rate" || (s.Family == "redlimit policy" && (s.Algorithm == "token-bucket" || s.Algorithm == "fixed-window"))
	})
	memSystems := pick(inMemory, func(*system) bool { return true })
	var plan []cellSpec
	add := func(store, w string, names []string, d time.Duration) {
		if len(names) == 0 || !slices.Contains(o.workloads, w) {
			return
		}
		for _, c := range o.callers {
			// --quick: refusals, half of peak, Zipf's keys (with few
			// callers no calls share a run: uniform tells as much) and many
			// keys in memory at the most callers only.
			if o.quick && (w == denied || w == halfPeak || w == keysZipf || (store == inMemory && isKeys(w))) && c != slices.Max(o.callers) {
				continue
			}
			plan = append(plan, cellSpec{Workload: w, Store: store, Callers: c, Systems: names, Duration: d})
		}
	}
	for _, w := range workloadNames {
		add(onRedis, w, redisSystems[w], o.duration)
	}
	if c, ok := clusterCallers(o.callers); ok && o.cluster && len(clusterSystems) > 0 && slices.Contains(o.workloads, keysUniform) {
		plan = append(plan, cellSpec{Workload: keysUniform, Store: onCluster, Callers: c, Systems: clusterSystems, Duration: o.duration})
	}
	for _, w := range workloadNames {
		if w != halfPeak && w != denied {
			add(inMemory, w, memSystems, o.memDuration)
		}
	}
	return plan
}

// clusterCallers is the callers of the Cluster cell: 64, or the most of
// callers below it; ok is false when callers has none as many as 8 (the
// cell is about calls sharing round trips).
func clusterCallers(callers []int) (int, bool) {
	best := 0
	for _, c := range callers {
		if c <= 64 && c > best {
			best = c
		}
	}
	return best, best >= 8
}

// planned says whether the plan measures system name.
func planned(plan []cellSpec, name string) bool {
	return slices.ContainsFunc(plan, func(c cellSpec) bool { return slices.Contains(c.Systems, name) })
}

// planEstimate is how long a plan should take.
type planEstimate struct {
	measurements int
	load         time.Duration // measured windows and warm-ups
	setup        time.Duration // the rest, estimated
}

func (p planEstimate) total() time.Duration { return p.load + p.setup }

// Set-up costs, as measured on a 2-core VM: per measurement (a client, the
// counters, a limiter's MEMORY USAGE), per measurement of a Redis keys cell
// (waiting for the keys that expire, MEMORY USAGE of 100 limiters), per
// in-memory keys measurement and 100,000 keys (making the limiters and
// using each once), and per Redis system's keys (storing the configs once).
const (
	setupPerMeasurement   = 150 * time.Millisecond
	setupPerRedisKeys     = 700 * time.Millisecond
	setupPerMemoryKeys    = 300 * time.Millisecond
	setupPerKeyedSystem   = 4 * time.Second
	setupKeysForEstimates = 100_000
	setupCluster          = 5 * time.Second
)

func estimate(plan []cellSpec, o *options) planEstimate {
	var p planEstimate
	keyed := map[string]bool{}
	scale := float64(o.keys) / setupKeysForEstimates
	for _, c := range plan {
		n := len(c.Systems) * o.rounds
		p.measurements += n
		for _, s := range c.Systems {
			p.load += time.Duration(o.rounds) * (windowOf(s, c.Duration) + o.warmup)
		}
		p.setup += time.Duration(n) * setupPerMeasurement
		if isKeys(c.Workload) {
			per := setupPerMemoryKeys
			if c.Store == onRedis {
				per = setupPerRedisKeys
				for _, s := range c.Systems {
					// A keyed policy's config is one key, stored by its
					// first call.
					if !strings.HasPrefix(s, policyPrefix) {
						keyed[s] = true
					}
				}
			}
			if c.Store == onCluster {
				per = setupPerRedisKeys
				p.setup += setupCluster
			}
			p.setup += time.Duration(float64(n) * float64(per) * scale)
		}
	}
	p.setup += time.Duration(float64(len(keyed)) * float64(setupPerKeyedSystem) * scale)
	return p
}

// sequences are the keys workloads' draws, made once per run: seqLen
// limiter indexes each caller walks from its own offset.
type sequences map[string][]int32

// seqLen is the length of a keys workload's draw: a million, or twice the
// keys when more, so that with one caller a uniform draw reaches about every
// key.
func seqLen(keys int) int { return max(1<<20, 2*keys) }

// sequence draws workload w's limiter indexes among keys: uniform, or
// Zipf(s) with rank 0 the hottest. The seed is fixed: every system of a run
// (and every run) gets the same order.
func sequence(w string, keys int, s float64) []int32 {
	r := rand.New(rand.NewPCG(20261123, 1))
	out := make([]int32, seqLen(keys))
	switch w {
	case keysUniform:
		for i := range out {
			out[i] = int32(r.IntN(keys))
		}
	case keysZipf:
		z := rand.NewZipf(r, s, 1, uint64(keys-1))
		for i := range out {
			out[i] = int32(z.Uint64())
		}
	default:
		return nil
	}
	return out
}

// execute measures the plan: for each cell, its systems in turn, round
// after round (see schedule), then the cell's summaries and ratios.
func execute(ctx context.Context, e *env, o *options, rep *report, plan []cellSpec, byName map[string]*system, stderr io.Writer) error {
	if e.admin != nil {
		if err := e.reset(ctx); err != nil {
			return err
		}
	}
	seqs := sequences{}
	total := rep.Settings.Measurements
	done := 0
	began := time.Now()
	for ci, cs := range plan {
		if isKeys(cs.Workload) && seqs[cs.Workload] == nil {
			seqs[cs.Workload] = sequence(cs.Workload, o.keys, o.zipf)
		}
		c := cell{Workload: cs.Workload, Store: cs.Store, Callers: cs.Callers, Systems: cs.Systems, Rounds: o.rounds,
			DurationSec: cs.Duration.Seconds(), WarmupSec: o.warmup.Seconds(), Limiters: 1}
		if isKeys(cs.Workload) {
			c.Limiters = o.keys
			c.Distribution = "uniform"
			if cs.Workload == keysZipf {
				c.Distribution = fmt.Sprintf("Zipf s=%g", o.zipf)
			}
		}
		c.ID = c.key()
		// half-peak's pace: half the system's median decisions/s in one.
		pace := map[string]float64{}
		if cs.Workload == halfPeak {
			for _, name := range cs.Systems {
				if name == floorPacedName {
					continue
				}
				x, err := peak(ctx, e, o, rep, byName[name], cs)
				if err != nil {
					return err
				}
				pace[name] = halfPeakShare * x
			}
			if slices.Contains(cs.Systems, floorPacedName) {
				c.FloorPaceOf = slowestOurs(cs.Systems, pace, byName)
				pace[floorPacedName] = pace[c.FloorPaceOf]
			}
		}
		for r, order := range schedule(len(cs.Systems), o.rounds) {
			var names []string
			for pos, si := range order {
				s := byName[cs.Systems[si]]
				names = append(names, s.Name)
				m, err := measureOnce(ctx, e, o, cs, s, seqs[cs.Workload], pace[s.Name])
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					m.Errors++
					m.FirstError = err.Error()
				}
				m.System, m.Round, m.Position = s.Name, r+1, pos+1
				c.Measurements = append(c.Measurements, m)
				done++
				fmt.Fprintf(stderr, "[%3d/%d %5.0fs] cell %d/%d round %d/%d  %s\n", done, total, time.Since(began).Seconds(),
					ci+1, len(plan), r+1, o.rounds, m.progress(&c))
			}
			c.Order = append(c.Order, names)
		}
		c.summarise(byName)
		rep.Cells = append(rep.Cells, c)
	}
	return nil
}

// slowestOurs is the system of redlimit's among names with the lowest
// pace: the floor paced like it offers the load of redlimit's gentlest half
// of peak, so a floor that misses the target there shows it out of reach at
// the lightest load any of redlimit's systems is asked to carry.
func slowestOurs(names []string, pace map[string]float64, byName map[string]*system) string {
	best := ""
	for _, name := range names {
		s := byName[name]
		if s == nil || !strings.HasPrefix(s.Family, "redlimit") || !(pace[name] > 0) {
			continue
		}
		if best == "" || pace[name] < pace[best] {
			best = name
		}
	}
	return best
}

// peak is system s's decisions/s in one with cs's callers: the median of
// the run's one cell, or measured now (unrecorded) when the plan has none.
func peak(ctx context.Context, e *env, o *options, rep *report, s *system, cs cellSpec) (float64, error) {
	if c := rep.cell(cs.Store, one, cs.Callers); c != nil {
		if sum := c.summary(s.Name); sum != nil && sum.Errors == 0 && sum.DecisionsPerSec.Median > 0 {
			return float64(sum.DecisionsPerSec.Median), nil
		}
	}
	cal := cs
	cal.Workload = one
	m, err := measureOnce(ctx, e, o, cal, s, nil, 0)
	if err == nil && !(m.DecisionsPerSec > 0) {
		err = errors.New("no decision")
	}
	if err != nil {
		return 0, fmt.Errorf("%s: measuring the peak for half-peak: %w", s.Name, err)
	}
	return m.DecisionsPerSec, nil
}

// measureOnce measures system s once in cell cs: a fresh client (Redis) or
// store (memory), the limiters prepared, warm-up, the measured window with
// the counters read at both ends, then (Redis) the bytes of a limiter.
// pace > 0: half-peak's offered load.
func measureOnce(ctx context.Context, e *env, o *options, cs cellSpec, s *system, seq []int32, pace float64) (measurement, error) {
	m := newMeasurement()
	l := grantedLimit(s)
	names := []string{"one"}
	switch {
	case cs.Workload == denied:
		l, names = deniedLimit, []string{"denied"}
	case isKeys(cs.Workload):
		names = e.names
	default:
		seq = nil
	}
	p := prep{l: l, names: names, callers: cs.Callers, cluster: cs.Store == onCluster}
	if s.Store == onRedis {
		p.prefix = e.systemPrefix(s.Name)
	}
	// The garbage of the measurement before is not this one's to collect.
	runtime.GC()
	t, err := s.prepare(ctx, e, p)
	if err != nil {
		return m, err
	}
	defer t.close()
	switch {
	case cs.Workload == denied:
		if err := exhaust(ctx, t); err != nil {
			return m, err
		}
	case isKeys(cs.Workload) && s.Store == inMemory:
		// Steady state: every key used once before (the first use of a key
		// allocates its limiter in every system).
		for i := range t.n {
			if _, err := t.call(ctx, i); err != nil {
				return m, fmt.Errorf("using limiter %d first: %w", i, err)
			}
		}
	}
	timeEvery := 1
	if s.Store == inMemory {
		timeEvery = 64 // timing costs about as much as the decision
	}
	ld, err := runLoad(ctx, t, cs.Callers, seq, pace, o.warmup, windowOf(s.Name, cs.Duration), timeEvery, func() snapshot { return e.snap(ctx, cs.Store) })
	if err != nil {
		return m, err
	}
	m.fill(&ld, s.Store == onRedis, pace)
	if s.Store != onRedis {
		return m, nil
	}
	if cs.Workload == one || isKeys(cs.Workload) {
		b, err := bytesPerLimiter(ctx, e, t)
		if err != nil {
			return m, err
		}
		m.BytesPerLimiter = nf(b)
	}
	if isKeys(cs.Workload) {
		if err := e.settle(ctx, cs.Store, l.Interval); err != nil {
			return m, err
		}
	}
	return m, nil
}

// bytesPerLimiter is the mean MEMORY USAGE of a limiter's keys: of the one
// limiter, or of 100 spread over the keys. One more call first makes sure
// the limiter holds state (over many keys one may not have had its turn).
func bytesPerLimiter(ctx context.Context, e *env, t *target) (float64, error) {
	sample := []int{0}
	if t.n > 1 {
		sample = sample[:0]
		for k := range 100 {
			sample = append(sample, k*t.n/100)
		}
	}
	var sum int64
	for _, i := range sample {
		if _, err := t.call(ctx, i); err != nil {
			return 0, fmt.Errorf("touching limiter %d: %w", i, err)
		}
		admin := t.admin
		if admin == nil {
			admin = e.admin
		}
		n, err := memoryUsage(ctx, admin, t.redisKeys(i))
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return float64(sum) / float64(len(sample)), nil
}

// settle waits, after a keys measurement, until the keys that measurement
// left to expire are gone, so that Redis does not spend the next
// measurement's CPU expiring them: while INFO keyspace counts more than a
// few keys with a time to live (the one-limiter keys), it waits, at most an
// interval, then lets SCAN delete the expired ones. onCluster: on every
// node of the Cluster.
func (e *env) settle(ctx context.Context, store string, interval time.Duration) error {
	const few = 1000
	expiring := func() (int64, error) { return expiringIn(ctx, e.admin, e.base.DB) }
	scan := func() error {
		iter := e.admin.Scan(ctx, 0, e.prefix+"*", 5000).Iterator()
		for iter.Next(ctx) {
		}
		return iter.Err()
	}
	if store == onCluster {
		expiring = func() (int64, error) { return e.cluster.expiring(ctx) }
		scan = func() error { return e.cluster.scan(ctx, e.prefix) }
	}
	deadline := time.Now().Add(interval)
	for {
		n, err := expiring()
		if err != nil || n <= few {
			return err
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// SCAN deletes the expired keys it meets.
	return scan()
}

// expiringIn is the number of keys with a time to live in rdb's database
// db (INFO keyspace).
func expiringIn(ctx context.Context, rdb *redis.Client, db int) (int64, error) {
	info, err := rdb.Info(ctx, "keyspace").Result()
	if err != nil {
		return 0, err
	}
	prefix := "db" + strconv.Itoa(db) + ":"
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "expires="); ok {
					return strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	return 0, nil
}

// exhaust asks until a request is refused (the denied workload's limit is
// 1 per minute).
func exhaust(ctx context.Context, t *target) error {
	for range 100 {
		ok, err := t.call(ctx, 0)
		if err != nil {
			return fmt.Errorf("using up the limit: %w", err)
		}
		if !ok {
			return nil
		}
	}
	return errors.New("using up the limit: 100 requests granted at 1 per minute")
}

// newMeasurement is a measurement with every optional figure absent.
func newMeasurement() measurement {
	nan := nf(math.NaN())
	return measurement{P50Ns: nan, P99Ns: nan, P999Ns: nan, P99RawNs: nan, TimerLagP99Ns: nan,
		ClientCPUUs: nan, RedisCPUUs: nan, RedisCmds: nan, RedisRuns: nan, AllocsPerDecision: nan, BytesPerLimiter: nan,
		LoadBefore: nan, LoadAfter: nan, OtherCPUs: nan}
}
