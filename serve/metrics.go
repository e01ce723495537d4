package serve

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlimit/redlimit"
	redlimitprom "github.com/redlimit/redlimit/prometheus"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// metrics are a Server's own Prometheus registry (not the global one, so
// that several Servers live in one process): the decisions of its
// policies (package redlimitprom), its store's counters when it has them,
// the Go runtime and process, and serve's own series.
type metrics struct {
	reg      *prometheus.Registry
	policies *redlimitprom.Metrics
	requests *prometheus.CounterVec
	reloads  *prometheus.CounterVec

	// The requests' series by domain, kept so that a request finds its
	// counter without hashing its labels.
	counters atomic.Pointer[requestCounters] // of the rules last seen
	mu       sync.Mutex                      // guards byDomain
	byDomain map[string]*domainCounters
}

// requestCodes are the codes of requests_total, by index.
var requestCodes = [...]string{"OK", "OVER_LIMIT", "UNKNOWN", "BAD_REQUEST", "UNAVAILABLE", "ERROR"}

// domainCounters are one domain's requests_total series, each made at
// its first request (a series appears when first counted).
type domainCounters [len(requestCodes)]atomic.Pointer[prometheus.Counter]

// requestCounters are the series of the domains of one rules set (and
// otherDomain).
type requestCounters struct {
	set     *rules.Set
	domains map[string]*domainCounters
}

// otherDomain labels the requests for a domain the rules do not know,
// whose names are the callers' and unbounded.
const otherDomain = "(other)"

func newMetrics(cfg *Config) *metrics {
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		policies: redlimitprom.New(redlimitprom.Options{}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "redlimit", Subsystem: "serve", Name: "requests_total",
			Help: "Rate-limit requests (gRPC and HTTP) by domain (" + otherDomain + " for one the rules do not know) and overall code: OK, OVER_LIMIT, or BAD_REQUEST, UNAVAILABLE, ERROR when not answered."},
			[]string{"domain", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "redlimit", Subsystem: "serve", Name: "reloads_total",
			Help: "Reloads of the rules that found new content, by result: ok (put in force) or refused (the rules in force stay)."},
			[]string{"result"}),
		byDomain: map[string]*domainCounters{},
	}
	if st, ok := cfg.Store.(redlimitprom.StatsSource); ok {
		m.policies.WatchStore("serve", st)
	}
	m.reg.MustRegister(m.policies, m.requests, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// register adds the series read from s at each scrape.
func (m *metrics) register(s *Server) {
	m.reg.MustRegister(
		rulesCollector{s},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "redlimit", Subsystem: "serve", Name: "instances",
			Help: "Instances in the registry (GET /v1/instances) at this one's last heartbeat; 1 without a shared Redis."},
			func() float64 {
				if s.reg.rdb == nil {
					return 1
				}
				return float64(s.reg.seen.Load())
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "redlimit", Subsystem: "serve", Name: "heartbeat_errors_total",
			Help: "Registry heartbeats that failed (Redis errors); the instance drops out of the registry if they last past its TTL."},
			func() float64 { return float64(s.reg.failures.Load()) }),
	)
	for _, c := range []string{"OK", "OVER_LIMIT"} {
		m.requests.WithLabelValues(otherDomain, c) // shown before the first request
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("refused")
}

var rulesDesc = prometheus.NewDesc("redlimit_serve_rules", "Rules in force by source: file (the rules files) or api (set through the API).", []string{"source"}, nil)

// rulesCollector counts the rules in force at each scrape.
type rulesCollector struct{ s *Server }

func (c rulesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rulesDesc }

func (c rulesCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"file": 0, "api": 0}
	if set := c.s.dec.Rules(); set != nil {
		for _, r := range set.Rules() {
			counts[ruleSource(r.File)]++
		}
	}
	for src, n := range counts {
		ch <- prometheus.MustNewConstMetric(rulesDesc, prometheus.GaugeValue, float64(n), src)
	}
}

// ruleSource is "file" for a rule read from a file, "api" for one set
// through the API (which has none).
func ruleSource(file string) string {
	if file == "" {
		return "api"
	}
	return "file"
}

// countRequest counts one answered (or failed) request.
func (s *Server) countRequest(domain string, overall decide.Code, err error) {
	if s.met == nil {
		return
	}
	byDomain := s.met.countersFor(s.dec.Rules()).domains
	dc := byDomain[domain]
	if dc == nil {
		domain, dc = otherDomain, byDomain[otherDomain]
	}
	code := 2 // UNKNOWN
	switch {
	case err == nil && overall == decide.OK:
		code = 0
	case err == nil && overall == decide.OverLimit:
		code = 1
	case err == nil:
	case errors.Is(err, redlimit.ErrInvalidArgument):
		code = 3
	case errors.Is(err, redlimit.ErrUnavailable), errors.Is(err, decide.ErrNoRules):
		code = 4
	default:
		code = 5
	}
	c := dc[code].Load()
	if c == nil {
		cv := s.met.requests.WithLabelValues(domain, requestCodes[code])
		c = &cv
		dc[code].Store(c) // a race stores the same series
	}
	(*c).Inc()
}

// countersFor returns the requests' series of set's domains.
func (m *metrics) countersFor(set *rules.Set) *requestCounters {
	if c := m.counters.Load(); c != nil && c.set == set {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &requestCounters{set: set, domains: map[string]*domainCounters{}}
	var names []string
	if set != nil {
		names = set.Domains()
	}
	for _, name := range append(names, otherDomain) {
		dc := m.byDomain[name]
		if dc == nil {
			dc = new(domainCounters)
			m.byDomain[name] = dc
		}
		c.domains[name] = dc
	}
	m.counters.Store(c)
	return c
}

// rulesChanged follows an attempt to change the rules: counted, and a
// new rules version announced in the registry at once.
func (s *Server) rulesChanged(err error) {
	if err == nil {
		s.reg.changed()
	}
	if s.met == nil {
		return
	}
	if err == nil {
		s.met.reloads.WithLabelValues("ok").Inc()
	} else {
		s.met.reloads.WithLabelValues("refused").Inc()
	}
}

// extraRoutes adds the registry's and the metrics' routes.
func (s *Server) extraRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/instances", s.handleInstances)
	if s.met != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}))
	}
}
