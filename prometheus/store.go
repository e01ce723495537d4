package redlimitprom

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/redisstore"
)

// StatsSource is a store whose counters can be read: a *redisstore.Store.
type StatsSource interface {
	Stats() redisstore.Stats
}

// WatchStore exports s's counters, read at each scrape, labelled with
// store=name: the calls it made and the script runs that carried them
// (batching shares a run between callers: the run size histogram shows
// how many), the refusals its refusal cache answered, and the calls whose
// callers gave up and whose grants it handed back. Watching a name again
// replaces the store watched under it.
func (m *Metrics) WatchStore(name string, s StatsSource) {
	m.stores.mu.Lock()
	defer m.stores.mu.Unlock()
	if m.stores.watched == nil {
		m.stores.watched = map[string]StatsSource{}
	}
	m.stores.watched[name] = s
}

type storeStats struct {
	mu      sync.Mutex
	watched map[string]StatsSource

	calls, runs, local, abandoned, handedBack, handBackFailed, runSize *prometheus.Desc
}

func newStoreStats(ns string, cl prometheus.Labels) storeStats {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "store", name), help, []string{"store"}, cl)
	}
	return storeStats{
		calls:          d("calls_total", "Calls made on limiters (acquire, release, cancel, available), refusal-cache answers included."),
		runs:           d("script_runs_total", "Limiter scripts sent to Redis: fewer than the calls when batching shares runs."),
		local:          d("local_refusals_total", "Calls answered by the store's refusal cache without a round trip."),
		abandoned:      d("abandoned_total", "Calls whose callers gave up while they were in flight; the store saw them through."),
		handedBack:     d("handed_back_total", "Grants of abandoned calls the store handed back."),
		handBackFailed: d("hand_back_failed_total", "Grants of abandoned calls the store could not hand back (they expire on their own)."),
		runSize:        d("run_size", "Calls carried by each script run (batching)."),
	}
}

func (s *storeStats) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.calls, s.runs, s.local, s.abandoned, s.handedBack, s.handBackFailed, s.runSize} {
		ch <- d
	}
}

func (s *storeStats) collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, src := range s.watched {
		st := src.Stats()
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		counter(s.calls, st.Calls)
		counter(s.runs, st.ScriptRuns)
		counter(s.local, st.LocalRefusals)
		counter(s.abandoned, st.Abandoned)
		counter(s.handedBack, st.HandedBack)
		counter(s.handBackFailed, st.HandBackFailed)
		// RunSizes[i] counts runs of 2^i..2^(i+1)-1 calls: cumulative
		// buckets with upper bounds 2^(i+1)-1, the last one +Inf.
		buckets := make(map[float64]uint64, redisstore.RunSizeBuckets-1)
		var cum uint64
		for i, n := range st.RunSizes {
			cum += uint64(n)
			if i < redisstore.RunSizeBuckets-1 {
				buckets[math.Exp2(float64(i+1))-1] = cum
			}
		}
		ch <- prometheus.MustNewConstHistogram(s.runSize, cum, float64(st.RunCalls), buckets, name)
	}
}
