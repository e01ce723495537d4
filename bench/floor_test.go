package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestFloorCounts: the floor does the work of a decision that counts, on a
// real redis-server: every call, lone or sharing a run with others, adds
// exactly one to its key, over one key and over many, and a lone call is
// one command.
func TestFloorCounts(t *testing.T) {
	ctx := context.Background()
	srv, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	e := &env{base: &redis.Options{Addr: srv.Addr}, prefix: "floor-test:"}
	e.admin = redis.NewClient(e.options(1))
	defer e.admin.Close()
	for _, c := range []struct {
		keys, callers, each int
	}{{1, 1, 50}, {1, 16, 200}, {10, 16, 200}} {
		names := make([]string, c.keys)
		for i := range names {
			names[i] = "k" + strconv.Itoa(i)
		}
		p := prep{l: grantedRedis, names: names, callers: c.callers, prefix: e.systemPrefix(floorName) + strconv.Itoa(c.keys) + "-" + strconv.Itoa(c.callers) + ":"}
		tg, err := prepareFloor(ctx, e, p)
		if err != nil {
			t.Fatal(err)
		}
		_, before, err := redisCounters(ctx, e.admin)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, c.callers)
		for g := range c.callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range c.each {
					if ok, err := tg.call(ctx, (g+k)%c.keys); err != nil || !ok {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%+v: a call failed: %v", c, err)
		}
		_, after, err := redisCounters(ctx, e.admin)
		if err != nil {
			t.Fatal(err)
		}
		tg.close()
		var sum int64
		for i := range names {
			v, err := e.admin.Get(ctx, tg.redisKeys(i)[0]).Int64()
			if err != nil {
				t.Fatalf("%+v: key %d: %v", c, i, err)
			}
			sum += v
		}
		if want := int64(c.callers * c.each); sum != want {
			t.Errorf("%+v: the keys add up to %d, want %d (one per call)", c, sum, want)
		}
		cmds := after["incrby"] - before["incrby"]
		if c.callers == 1 && cmds != uint64(c.each) {
			t.Errorf("one caller: %d commands for %d calls, want one each", cmds, c.each)
		}
		if cmds == 0 || cmds > uint64(c.callers*c.each) {
			t.Errorf("%+v: %d INCRBY for %d calls", c, cmds, c.callers*c.each)
		}
		t.Logf("%d keys, %d callers: %d calls in %d INCRBY", c.keys, c.callers, c.callers*c.each, cmds)
	}
}

// TestFloorSection: the report's floor section says per cell whether the
// floor meets p99 <= 1 ms, beside the others, and at half of peak, where
// the floor at redlimit's pace misses it (out of reach) and where it meets
// it while redlimit does not (within reach).
func TestFloorSection(t *testing.T) {
	byName := map[string]*system{}
	for _, s := range systems() {
		byName[s.Name] = s
	}
	rep := &report{Settings: settings{Keys: 100_000}}
	for _, s := range systems() {
		rep.Systems = append(rep.Systems, *s)
	}
	// p99s in ms per system, in two half-peak cells and one of one.
	add := func(w string, callers int, p99ms map[string]float64) {
		c := cell{Workload: w, Store: onRedis, Callers: callers, Rounds: 1, Limiters: 1}
		if w == halfPeak {
			c.FloorPaceOf = "redlimit sliding-log"
		}
		for _, name := range slices.Sorted(maps.Keys(p99ms)) { // a run's order is fixed
			ms := p99ms[name]
			c.Systems = append(c.Systems, name)
			m := newMeasurement()
			m.System, m.Round, m.Decisions, m.DecisionsPerSec, m.P99Ns = name, 1, 1000, 1000, nf(ms*1e6)
			m.ClientCPUUs, m.RedisCPUUs, m.RedisCmds = 12, 3, 0.5
			if w == halfPeak {
				m.OfferedPerSec, m.AchievedFraction = 1000, 1
			}
			c.Measurements = append(c.Measurements, m)
		}
		c.summarise(byName)
		rep.Cells = append(rep.Cells, c)
	}
	add(one, 8, map[string]float64{"redlimit sliding-log": 3, "redis_rate": 2, floorName: 0.5})
	add(halfPeak, 1, map[string]float64{"redlimit sliding-log": 2, "redis_rate": 0.9, floorName: 0.4, floorPacedName: 0.6})
	add(halfPeak, 8, map[string]float64{"redlimit sliding-log": 3, "redlimit token-bucket": 4, "redis_rate": 2.5, floorName: 1.5, floorPacedName: 2})
	var b strings.Builder
	rep.floorSection(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	out := b.String()
	for _, want := range []string{
		"## The floor: one bare round trip",
		"| one limiter | 8 | floor | - | 1,000 | 500µs | yes | 12.0µs, 3.00µs, 0.50 | every system | 2ms (redis_rate) - 3ms (redlimit sliding-log) | 0 of 2 | 1,000 (",
		"| half of peak | 1 | floor at redlimit's pace | 1,000 | 1,000 | 600µs | yes | 12.0µs, 3.00µs, 0.50 | redlimit's, paced like redlimit sliding-log | 2ms (redlimit sliding-log) - 2ms (redlimit sliding-log) | 0 of 1 | - |",
		"| half of peak | 8 | floor | 1,000 | 1,000 | 1.5ms | no | 12.0µs, 3.00µs, 0.50 | every system | 2.5ms (redis_rate) - 4ms (redlimit token-bucket) | 0 of 3 | - |",
		"even the floor at redlimit's pace has p99 above 1 ms at 8 callers: out of reach",
		"meets p99 <= 1 ms at 1 caller where some of redlimit's systems do not: within reach",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the floor section lacks %q:\n%s", want, out)
		}
	}
	c := rep.cell(onRedis, halfPeak, 8)
	if len(c.Floor) != 2 || c.Floor[1].System != floorPacedName || c.Floor[1].MeetsP99Target || c.Floor[1].Others != 2 ||
		c.Floor[1].PaceOf != "redlimit sliding-log" || float64(c.Floor[1].OthersP99Max) != 4e6 || !math.IsNaN(float64(c.Floor[1].OthersBestPerSec)) {
		t.Errorf("half-peak floor verdicts %+v", c.Floor)
	}
	if len(c.Ratios) != 0 {
		t.Errorf("ratios at half of peak: %+v", c.Ratios)
	}
}
