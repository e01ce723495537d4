// Package redlimitprom exports redlimit's decisions, store latencies and
// errors, degraded answers and refusal-cache answers as Prometheus
// metrics, through the redlimit.Observer hook, and a Redis store's
// counters (batching, refusal cache, hand-backs) read at each scrape.
//
//	m := redlimitprom.New(redlimitprom.Options{})
//	prometheus.MustRegister(m)
//	l, _ := redlimit.New(store, "api", redlimit.WithConfig(cfg), redlimit.WithObserver(m))
//
// Series are labelled by limiter or policy name, limit, algorithm, result,
// op and error kind: never by key or client, whose number has no bound.
// A service that makes a Limiter per user with the user in its name makes
// a series per user: use one Policy and its keys instead. The keys that
// are asked most often can be shown as exemplars (Options.HotKeys), which
// a scrape in the OpenMetrics format carries.
package redlimitprom

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit"
)

// Options tune the metrics; the zero value of each field takes its
// default.
type Options struct {
	// Namespace prefixes every metric name. Default: "redlimit".
	Namespace string
	// ConstLabels are added to every series (an instance, a region).
	ConstLabels prometheus.Labels
	// LatencyBuckets are the store latency histogram's upper bounds, in
	// seconds. Default: 100µs up to about 1.6s, doubling.
	LatencyBuckets []float64
	// HotKeys, when positive, attaches an exemplar naming the key (a
	// Policy's key, a Limiter's client ID) to the decisions of the keys
	// among the HotKeys asked most often, as counted by a bounded
	// summary (a few times HotKeys entries, whatever the number of keys),
	// updated every 16th call of such a key (a series keeps only its
	// last exemplar). The summary takes a lock per call.
	// Default (0): no exemplars, and no key is looked at.
	HotKeys int
}

// Metrics is a redlimit.Observer and a prometheus.Collector: register it,
// and give it to Limiters and Policies with redlimit.WithObserver. One
// Metrics may observe any number of them. It is safe for concurrent use.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	degraded  *prometheus.CounterVec
	cached    *prometheus.CounterVec

	// series caches the children of each (name, limit) met, so that an
	// observation costs no label hashing.
	series sync.Map // seriesKey -> *series
	hot    *hotKeys

	stores storeStats
}

var (
	_ redlimit.Observer    = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// New returns the metrics, registered nowhere yet.
func New(opts Options) *Metrics {
	ns := opts.Namespace
	if ns == "" {
		ns = "redlimit"
	}
	buckets := opts.LatencyBuckets
	if buckets == nil {
		buckets = prometheus.ExponentialBuckets(100e-6, 2, 15)
	}
	cl := opts.ConstLabels
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decisions_total", ConstLabels: cl,
			Help: "Acquire calls by limiter or policy, the limit that decided (the one that refused, or the closest to refusing), its algorithm, and result (granted, refused, error)."},
			[]string{"policy", "limit", "algorithm", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "store_latency_seconds", ConstLabels: cl, Buckets: buckets,
			Help: "Time calls spent asking the store (waits for one's turn excluded; refusal-cache answers not counted), by limiter or policy and op."},
			[]string{"policy", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "store_errors_total", ConstLabels: cl,
			Help: "Calls that returned an error, by limiter or policy, op and kind (redlimit.ErrorKind); bad arguments, which never reach the store, are not counted."},
			[]string{"policy", "op", "kind"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "degraded_total", ConstLabels: cl,
			Help: "Acquire calls answered by the failure policy or the fallback store while the store was unavailable, by limiter or policy and result."},
			[]string{"policy", "result"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "refusal_cache_answers_total", ConstLabels: cl,
			Help: "Refusals answered by the refusal cache without asking the store, by limiter or policy."},
			[]string{"policy"}),
		stores: newStoreStats(ns, cl),
	}
	if opts.HotKeys > 0 {
		m.hot = newHotKeys(opts.HotKeys)
	}
	return m
}

// seriesKey names the children of one (limiter or policy, limit): a
// Limiter's by its config (no name to format per call), a Policy's by its
// limit's name.
type seriesKey struct {
	name   string
	policy bool
	cfg    redlimit.Config
	limit  string
}

type series struct {
	result  [4]prometheus.Counter // by redlimit.Outcome
	latency prometheus.Observer   // of acquire calls
}

func (m *Metrics) decisionSeries(e *redlimit.Event) *series {
	k := seriesKey{name: e.Name, policy: e.Policy}
	if e.Policy {
		k.limit, k.cfg.Algorithm = e.Limit()
	} else {
		k.cfg = e.Config
		k.cfg.Epoch = 0
	}
	if s, ok := m.series.Load(k); ok {
		return s.(*series)
	}
	limit, alg := e.Limit()
	s := &series{}
	for _, o := range []redlimit.Outcome{redlimit.OutcomeGranted, redlimit.OutcomeRefused, redlimit.OutcomeError} {
		s.result[o] = m.decisions.WithLabelValues(e.Name, limit, string(alg), o.String())
	}
	s.latency = m.latency.WithLabelValues(e.Name, redlimit.OpAcquire.String())
	v, _ := m.series.LoadOrStore(k, s)
	return v.(*series)
}

// Observe implements redlimit.Observer.
func (m *Metrics) Observe(_ context.Context, e redlimit.Event) {
	// Bad arguments never reach the store: they are neither a latency
	// nor a store error (they are a decision's error, for an acquire).
	asked := !e.Cached && e.ErrKind != "invalid_argument"
	if e.Outcome == redlimit.OutcomeError && asked {
		m.errors.WithLabelValues(e.Name, e.Op.String(), e.ErrKind).Inc()
	}
	if e.Op != redlimit.OpAcquire {
		if asked {
			m.latency.WithLabelValues(e.Name, e.Op.String()).Observe(e.StoreLatency.Seconds())
		}
		return
	}
	s := m.decisionSeries(&e)
	if asked {
		s.latency.Observe(e.StoreLatency.Seconds())
	}
	if e.Cached {
		m.cached.WithLabelValues(e.Name).Inc()
	}
	if e.Degraded {
		m.degraded.WithLabelValues(e.Name, e.Outcome.String()).Inc()
	}
	c := s.result[e.Outcome]
	if c == nil {
		return
	}
	if m.hot != nil && m.hot.count(e.Name, e.Key) {
		c.(prometheus.ExemplarAdder).AddWithExemplar(1, prometheus.Labels{"key": exemplarValue(e.Key)})
		return
	}
	c.Inc()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.latency.Describe(ch)
	m.errors.Describe(ch)
	m.degraded.Describe(ch)
	m.cached.Describe(ch)
	m.stores.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.latency.Collect(ch)
	m.errors.Collect(ch)
	m.degraded.Collect(ch)
	m.cached.Collect(ch)
	m.stores.collect(ch)
}
