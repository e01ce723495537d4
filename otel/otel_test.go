package redlimitotel_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	redlimitotel "github.com/redlimit/redlimit/otel"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/refusalcache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sdk is a meter provider read by hand and a tracer provider recording
// every span: the SDK's own parts.
type sdk struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *redlimitotel.Observer
}

func newSDK(t *testing.T, opts redlimitotel.Options) *sdk {
	t.Helper()
	s := &sdk{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() {
		mp.Shutdown(context.Background())
		s.tp.Shutdown(context.Background())
	})
	opts.MeterProvider, opts.TracerProvider = mp, s.tp
	var err error
	if s.obs, err = redlimitotel.New(opts); err != nil {
		t.Fatal(err)
	}
	return s
}

// metric returns the collected metric called name.
func (s *sdk) metric(t *testing.T, name string) metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != redlimitotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.Metrics{}
}

func point(v int64, kv ...attribute.KeyValue) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: attribute.NewSet(kv...), Value: v}
}

func sum(points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: points}
}

// TestMetrics: decisions, degraded answers, refusal-cache answers and
// store errors as the SDK collects them.
func TestMetrics(t *testing.T) {
	s := newSDK(t, redlimitotel.Options{})
	ctx := context.Background()
	clk := clock.NewFake(t0)
	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlimit.New(cache, "api", redlimit.WithConfig(redlimit.PerSecond(2)), redlimit.WithClock(clk), redlimit.WithObserver(s.obs))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // 2 grants, the store's refusal, the cache's
		l.TryAcquire(ctx, 1)
	}
	l.TryAcquire(ctx, 0) // bad input: a decision's error, not a store error
	p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), "users",
		[]redlimit.Config{redlimit.PerSecond(5), redlimit.PerInterval(1, time.Hour).WithAlgorithm(redlimit.FixedWindow)},
		redlimit.WithClock(clk), redlimit.WithObserver(s.obs))
	if err != nil {
		t.Fatal(err)
	}
	p.Key("alice").TryAcquire(ctx, 1)
	p.Key("alice").TryAcquire(ctx, 1)
	p.Key("bob").TryAcquire(ctx, 1)

	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	rs, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	down := []redlimit.Option{redlimit.WithConfig(redlimit.PerSecond(10)), redlimit.WithClock(clk), redlimit.WithObserver(s.obs),
		redlimit.WithLogger(slog.New(slog.DiscardHandler))}
	closed, _ := redlimit.New(rs, "down", down...)
	open, _ := redlimit.New(rs, "down", append(down, redlimit.WithFailurePolicy(redlimit.FailOpen))...)
	closed.TryAcquire(ctx, 1)
	open.TryAcquire(ctx, 1)
	open.TryAcquire(ctx, 1)

	pol, lim, alg, res := redlimitotel.AttrPolicy.String, redlimitotel.AttrLimit.String, redlimitotel.AttrAlgorithm.String, redlimitotel.AttrResult.String
	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name: "redlimit.decisions", Unit: "{call}",
		Description: "Acquire calls by limiter or policy, the limit that decided (the one that refused, or the closest to refusing), its algorithm, and result.",
		Data: sum(
			point(2, pol("api"), lim("2/1s"), alg("sliding-log"), res("granted")),
			point(2, pol("api"), lim("2/1s"), alg("sliding-log"), res("refused")),
			point(1, pol("api"), lim("2/1s"), alg("sliding-log"), res("error")),
			point(2, pol("users"), lim("1/1h,fixed-window"), alg("fixed-window"), res("granted")),
			point(1, pol("users"), lim("1/1h,fixed-window"), alg("fixed-window"), res("refused")),
			point(2, pol("down"), lim("10/1s"), alg("sliding-log"), res("granted")),
			point(1, pol("down"), lim("10/1s"), alg("sliding-log"), res("error")),
		),
	}, s.metric(t, "redlimit.decisions"), metricdatatest.IgnoreTimestamp())
	metricdatatest.AssertEqual(t, sum(point(2, pol("down"), res("granted")), point(1, pol("down"), res("error"))),
		s.metric(t, "redlimit.degraded").Data.(metricdata.Sum[int64]), metricdatatest.IgnoreTimestamp())
	metricdatatest.AssertEqual(t, sum(point(1, pol("api"))),
		s.metric(t, "redlimit.refusal_cache.answers").Data.(metricdata.Sum[int64]), metricdatatest.IgnoreTimestamp())
	metricdatatest.AssertEqual(t, sum(point(1, pol("down"), redlimitotel.AttrOp.String("acquire"), redlimitotel.AttrErrorType.String("unavailable"))),
		s.metric(t, "redlimit.store.errors").Data.(metricdata.Sum[int64]), metricdatatest.IgnoreTimestamp())

	h, ok := s.metric(t, "redlimit.store.duration").Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatal("redlimit.store.duration is not a histogram")
	}
	counts := map[string]uint64{}
	for _, dp := range h.DataPoints {
		name, _ := dp.Attributes.Value(redlimitotel.AttrPolicy)
		counts[name.AsString()] = dp.Count
		if dp.Sum != 0 {
			t.Errorf("%v: latency sum %v; want 0 (the fake clock stood still)", dp.Attributes, dp.Sum)
		}
	}
	if counts["api"] != 3 || counts["users"] != 3 || counts["down"] != 3 {
		t.Errorf("latencies recorded %v; want 3 each (not the cache's answer nor bad input)", counts)
	}
}

// TestSpans: a store call is a span, child of the caller's, from the
// call's start for its store latency, with an error status on failure.
func TestSpans(t *testing.T) {
	s := newSDK(t, redlimitotel.Options{KeyInSpans: true})
	clk := clock.NewFake(t0)
	p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), "users",
		[]redlimit.Config{redlimit.PerInterval(1, time.Hour)}, redlimit.WithClock(clk), redlimit.WithObserver(s.obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := s.tp.Tracer("test").Start(context.Background(), "request")
	p.Key("alice").TryAcquire(ctx, 1)
	p.Key("alice").TryAcquire(ctx, 1)
	parent.End()
	p.Key("alice").TryAcquire(context.Background(), 0) // bad input: the store was not asked

	ended := s.spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans; want the parent and two store calls", len(ended))
	}
	for i, want := range []string{"granted", "refused"} {
		sp := ended[i]
		attrs := attribute.NewSet(sp.Attributes()...)
		res, _ := attrs.Value(redlimitotel.AttrResult)
		key, _ := attrs.Value(redlimitotel.AttrKey)
		if sp.Name() != "redlimit.acquire" || sp.Parent().SpanID() != parent.SpanContext().SpanID() ||
			!sp.StartTime().Equal(t0) || !sp.EndTime().Equal(t0) || res.AsString() != want || key.AsString() != "alice" {
			t.Errorf("span %d: %s parent %v %v..%v %v; want redlimit.acquire, child of the request, at %v, %s for alice",
				i, sp.Name(), sp.Parent().SpanID(), sp.StartTime(), sp.EndTime(), sp.Attributes(), t0, want)
		}
	}

	// A store that went away: the span says so.
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	rs, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	l, _ := redlimit.New(rs, "down", redlimit.WithConfig(redlimit.PerSecond(1)), redlimit.WithObserver(s.obs), redlimit.WithLogger(slog.New(slog.DiscardHandler)))
	l.TryAcquire(context.Background(), 1)
	ended = s.spans.Ended()
	sp := ended[len(ended)-1]
	attrs := attribute.NewSet(sp.Attributes()...)
	kind, _ := attrs.Value(redlimitotel.AttrErrorType)
	if sp.Status().Code != codes.Error || kind.AsString() != "unavailable" || len(sp.Events()) != 1 || sp.Events()[0].Name != "exception" {
		t.Errorf("failed call's span: %v %v %v; want an error status, error.type unavailable and the exception", sp.Status(), sp.Attributes(), sp.Events())
	}
	if sp.EndTime().Before(sp.StartTime()) {
		t.Errorf("span ends %v before it starts %v", sp.EndTime(), sp.StartTime())
	}
}

// TestWatchStore: a Redis store's counters, batching's run sizes among
// them, as the SDK collects them.
func TestWatchStore(t *testing.T) {
	s := newSDK(t, redlimitotel.Options{NoSpans: true})
	rdb := redistest.Start(t).Client(t)
	rs, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := s.obs.WatchStore("main", rs)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	l, err := redlimit.New(rs, "stats", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { l.TryAcquire(context.Background(), 1) })
	}
	wg.Wait()
	st := rs.Stats()
	total := func(name string) (int64, int) {
		t.Helper()
		data, ok := s.metric(t, name).Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s is not an int64 sum", name)
		}
		var n int64
		for _, dp := range data.DataPoints {
			if v, _ := dp.Attributes.Value(redlimitotel.AttrStore); v.AsString() != "main" {
				t.Errorf("%s: %v; want store main", name, dp.Attributes)
			}
			n += dp.Value
		}
		return n, len(data.DataPoints)
	}
	if n, _ := total("redlimit.store.calls"); n != st.Calls || n != 32 {
		t.Errorf("calls %d; want %d (32)", n, st.Calls)
	}
	if n, _ := total("redlimit.store.local_refusals"); n != st.LocalRefusals {
		t.Errorf("local refusals %d; want %d", n, st.LocalRefusals)
	}
	if n, _ := total("redlimit.store.run_calls"); n != st.RunCalls || n+st.LocalRefusals != 32 {
		t.Errorf("run calls %d; want %d, with %d local refusals making 32", n, st.RunCalls, st.LocalRefusals)
	}
	if n, buckets := total("redlimit.store.script_runs"); n != st.ScriptRuns || buckets != redisstore.RunSizeBuckets {
		t.Errorf("script runs %d in %d buckets; want %d in %d", n, buckets, st.ScriptRuns, redisstore.RunSizeBuckets)
	}
}
