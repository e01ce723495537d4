package redlimitprom_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	redlimitprom "github.com/redlimit/redlimit/prometheus"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/refusalcache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// serve registers m in a registry of its own and serves it on loopback.
func serve(t *testing.T, m *redlimitprom.Metrics) (*prometheus.Registry, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return reg, srv.URL
}

// scrape fetches url and parses the exposition with Prometheus' parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// TestScrape: decisions, degraded answers, refusal-cache answers, store
// errors and latencies, as a scrape over HTTP shows them.
func TestScrape(t *testing.T) {
	m := redlimitprom.New(redlimitprom.Options{LatencyBuckets: []float64{0.001, 1}})
	_, url := serve(t, m)
	ctx := context.Background()
	clk := clock.NewFake(t0) // stands still: every latency is 0

	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlimit.New(cache, "api", redlimit.WithConfig(redlimit.PerSecond(2)), redlimit.WithClock(clk), redlimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // 2 grants, the store's refusal, the cache's
		l.TryAcquire(ctx, 1)
	}
	l.TryAcquire(ctx, 0) // bad input: a decision's error, not a store error

	p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), "users",
		[]redlimit.Config{redlimit.PerSecond(5), redlimit.PerInterval(1, time.Hour).WithAlgorithm(redlimit.FixedWindow)},
		redlimit.WithClock(clk), redlimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	p.Key("alice").TryAcquire(ctx, 1)
	p.Key("alice").TryAcquire(ctx, 1)
	p.Key("bob").TryAcquire(ctx, 1)

	// A Redis that went away.
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	rs, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	down := []redlimit.Option{redlimit.WithConfig(redlimit.PerSecond(10)), redlimit.WithClock(clk), redlimit.WithObserver(m), redlimit.WithLogger(discard)}
	closed, _ := redlimit.New(rs, "down", down...)
	open, _ := redlimit.New(rs, "down", append(down, redlimit.WithFailurePolicy(redlimit.FailOpen))...)
	closed.TryAcquire(ctx, 1)
	open.TryAcquire(ctx, 1)
	open.TryAcquire(ctx, 1)

	const want = `
# HELP redlimit_decisions_total Acquire calls by limiter or policy, the limit that decided (the one that refused, or the closest to refusing), its algorithm, and result (granted, refused, error).
# TYPE redlimit_decisions_total counter
redlimit_decisions_total{algorithm="fixed-window",limit="1/1h,fixed-window",policy="users",result="granted"} 2
redlimit_decisions_total{algorithm="fixed-window",limit="1/1h,fixed-window",policy="users",result="refused"} 1
redlimit_decisions_total{algorithm="fixed-window",limit="1/1h,fixed-window",policy="users",result="error"} 0
redlimit_decisions_total{algorithm="sliding-log",limit="10/1s",policy="down",result="error"} 1
redlimit_decisions_total{algorithm="sliding-log",limit="10/1s",policy="down",result="granted"} 2
redlimit_decisions_total{algorithm="sliding-log",limit="10/1s",policy="down",result="refused"} 0
redlimit_decisions_total{algorithm="sliding-log",limit="2/1s",policy="api",result="error"} 1
redlimit_decisions_total{algorithm="sliding-log",limit="2/1s",policy="api",result="granted"} 2
redlimit_decisions_total{algorithm="sliding-log",limit="2/1s",policy="api",result="refused"} 2
# HELP redlimit_degraded_total Acquire calls answered by the failure policy or the fallback store while the store was unavailable, by limiter or policy and result.
# TYPE redlimit_degraded_total counter
redlimit_degraded_total{policy="down",result="error"} 1
redlimit_degraded_total{policy="down",result="granted"} 2
# HELP redlimit_refusal_cache_answers_total Refusals answered by the refusal cache without asking the store, by limiter or policy.
# TYPE redlimit_refusal_cache_answers_total counter
redlimit_refusal_cache_answers_total{policy="api"} 1
# HELP redlimit_store_errors_total Calls that returned an error, by limiter or policy, op and kind (redlimit.ErrorKind); bad arguments, which never reach the store, are not counted.
# TYPE redlimit_store_errors_total counter
redlimit_store_errors_total{kind="unavailable",op="acquire",policy="down"} 1
# HELP redlimit_store_latency_seconds Time calls spent asking the store (waits for one's turn excluded; refusal-cache answers not counted), by limiter or policy and op.
# TYPE redlimit_store_latency_seconds histogram
redlimit_store_latency_seconds_bucket{op="acquire",policy="api",le="0.001"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="api",le="1"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="api",le="+Inf"} 3
redlimit_store_latency_seconds_sum{op="acquire",policy="api"} 0
redlimit_store_latency_seconds_count{op="acquire",policy="api"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="down",le="0.001"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="down",le="1"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="down",le="+Inf"} 3
redlimit_store_latency_seconds_sum{op="acquire",policy="down"} 0
redlimit_store_latency_seconds_count{op="acquire",policy="down"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="users",le="0.001"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="users",le="1"} 3
redlimit_store_latency_seconds_bucket{op="acquire",policy="users",le="+Inf"} 3
redlimit_store_latency_seconds_sum{op="acquire",policy="users"} 0
redlimit_store_latency_seconds_count{op="acquire",policy="users"} 3
`
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(want),
		"redlimit_decisions_total", "redlimit_degraded_total", "redlimit_refusal_cache_answers_total",
		"redlimit_store_errors_total", "redlimit_store_latency_seconds"); err != nil {
		t.Error(err)
	}
}

var discard = slog.New(slog.DiscardHandler)

// TestStoreStats: a watched Redis store's counters, batching's run sizes
// among them, as a scrape shows them.
func TestStoreStats(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	m := redlimitprom.New(redlimitprom.Options{})
	m.WatchStore("main", s)
	_, url := serve(t, m)
	ctx := context.Background()
	l, err := redlimit.New(s, "stats", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { l.TryAcquire(ctx, 1) })
	}
	wg.Wait()
	st := s.Stats()
	mf := scrape(t, url)
	value := func(name string) float64 {
		t.Helper()
		f := mf[name]
		if f == nil || len(f.Metric) != 1 || f.Metric[0].GetLabel()[0].GetValue() != "main" {
			t.Fatalf("%s: %v; want one series of store main", name, f)
		}
		return f.Metric[0].GetCounter().GetValue()
	}
	if got := value("redlimit_store_calls_total"); got != float64(st.Calls) || got != 32 {
		t.Errorf("calls %v; want %d (32)", got, st.Calls)
	}
	if got := value("redlimit_store_script_runs_total"); got != float64(st.ScriptRuns) {
		t.Errorf("runs %v; want %d", got, st.ScriptRuns)
	}
	if got := value("redlimit_store_local_refusals_total"); got != float64(st.LocalRefusals) {
		t.Errorf("local refusals %v; want %d", got, st.LocalRefusals)
	}
	h := mf["redlimit_store_run_size"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != uint64(st.ScriptRuns) || h.GetSampleSum() != float64(st.RunCalls) || st.RunCalls+st.LocalRefusals != 32 {
		t.Errorf("run size: %v; want %d runs of %d calls in all, with %d local refusals making 32", h, st.ScriptRuns, st.RunCalls, st.LocalRefusals)
	}
	var prev uint64
	for i, b := range h.GetBucket() {
		want := prev + uint64(st.RunSizes[i])
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d; want %d (%v)", b.GetUpperBound(), b.GetCumulativeCount(), want, st.RunSizes)
		}
		prev = want
	}
}

// TestHotKeyExemplars: with HotKeys, the decisions of the keys asked most
// often carry an exemplar naming the key, valid whatever the key's bytes;
// the others none.
func TestHotKeyExemplars(t *testing.T) {
	m := redlimitprom.New(redlimitprom.Options{HotKeys: 1})
	reg, _ := serve(t, m)
	ctx := context.Background()
	p, err := redlimit.NewPolicy(memstore.New(), "keys", []redlimit.Config{redlimit.PerInterval(1, time.Hour)}, redlimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	hot := strings.Repeat("\xff", 300) // not UTF-8, and longer than an exemplar holds
	for range 300 {
		p.Key(hot).TryAcquire(ctx, 1)
	}
	exemplar := func() string {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range mfs {
			if f.GetName() != "redlimit_decisions_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				for _, lp := range mt.GetLabel() {
					if lp.GetName() == "result" && lp.GetValue() == "refused" {
						ex := mt.GetCounter().GetExemplar()
						if ex == nil {
							return ""
						}
						return ex.GetLabel()[0].GetValue()
					}
				}
			}
		}
		t.Fatal("no refused series")
		return ""
	}
	got := exemplar()
	if !utf8.ValidString(got) || !strings.HasPrefix(got, `"\xff\xff`) || utf8.RuneCountInString(got) > prometheus.ExemplarMaxRunes-len("key") {
		t.Fatalf("hot key's exemplar %q; want the key as valid UTF-8 within the exemplar's bound", got)
	}
	p.Key("cold").TryAcquire(ctx, 1) // granted: its first
	p.Key("cold").TryAcquire(ctx, 1) // refused, but not hot
	if after := exemplar(); after != got {
		t.Errorf("after a cold key's refusal the exemplar is %q; want the hot key's still", after)
	}
}
