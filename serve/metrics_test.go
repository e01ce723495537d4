package serve_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// scrape is GET /metrics on addr, parsed.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return fams
}

// value sums the series of name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

func TestMetrics(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	c := rlsClient(t, ts.grpcAddr)
	for range 4 { // 3 per minute: OK, OK, OK, OVER_LIMIT
		call(t, c, edgeReq)
	}
	call(t, c, &rlsv3.RateLimitRequest{Domain: "nobody-knows", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"}); err == nil {
		t.Fatal("a request without descriptors was answered")
	}
	post(t, "http://"+ts.httpAddr+"/json", `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`)
	if err := ts.srv.Reload(context.Background()); err != nil { // the same content: nothing counted
		t.Fatal(err)
	}

	fams := scrape(t, ts.httpAddr)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"redlimit_serve_requests_total", map[string]string{"domain": "edge", "code": "OK"}, 3},
		{"redlimit_serve_requests_total", map[string]string{"domain": "edge", "code": "OVER_LIMIT"}, 2},
		{"redlimit_serve_requests_total", map[string]string{"domain": "(other)", "code": "OK"}, 1},
		{"redlimit_serve_requests_total", map[string]string{"domain": "edge", "code": "BAD_REQUEST"}, 1},
		{"redlimit_serve_reloads_total", map[string]string{"result": "ok"}, 0},
		{"redlimit_serve_rules", map[string]string{"source": "file"}, 5},
		{"redlimit_serve_rules", map[string]string{"source": "api"}, 0},
		{"redlimit_serve_instances", nil, 1},
		{"redlimit_serve_heartbeat_errors_total", nil, 0},
		// The policies' own, from redlimitprom.
		{"redlimit_decisions_total", map[string]string{"result": "granted"}, 3},
		{"redlimit_decisions_total", map[string]string{"result": "refused"}, 2},
	} {
		if got, found := value(fams, c.name, c.labels); !found || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, found, c.want)
		}
	}
	if _, found := value(fams, "go_goroutines", nil); !found {
		t.Error("no Go runtime metrics")
	}
}

func TestMetricsReloads(t *testing.T) {
	file := t.TempDir() + "/rules.yaml"
	replace(t, file, limitRules(3))
	evs := make(reloads, 16)
	ts := start(t, serve.Config{Rules: file, OnReload: func(r serve.Reload) { evs <- r }})
	<-ts.srv.Watching()
	replace(t, file, "domain: [")
	if ev := evs.next(t); ev.Err == nil {
		t.Fatal("a bad file was put in force")
	}
	replace(t, file, limitRules(5))
	if ev := evs.next(t); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	fams := scrape(t, ts.httpAddr)
	for result, want := range map[string]float64{"ok": 1, "refused": 1} {
		if got, _ := value(fams, "redlimit_serve_reloads_total", map[string]string{"result": result}); got != want {
			t.Errorf("reloads %s: %v, want %v", result, got, want)
		}
	}
}

func TestMetricsOff(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", NoMetrics: true})
	call(t, rlsClient(t, ts.grpcAddr), edgeReq)
	if code, _ := get(t, "http://"+ts.httpAddr+"/metrics"); code != http.StatusNotFound {
		t.Fatalf("GET /metrics with metrics off: %d", code)
	}
}

// BenchmarkDecideMetrics is BenchmarkDecide with the metrics on (the
// default: every decision observed) and off.
func BenchmarkDecideMetrics(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(map[bool]string{false: "metrics=on", true: "metrics=off"}[off], func(b *testing.B) {
			file := b.TempDir() + "/bench.yaml"
			replace(b, file, "domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")
			d := start(b, serve.Config{Rules: file, NoMetrics: off}).srv.Decider()
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				req := decide.Request{Domain: "bench", Descriptors: []decide.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0." + strconv.FormatInt(next.Add(1), 10)}}}}}
				for pb.Next() {
					if _, err := d.Decide(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
