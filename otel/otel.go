// Package redlimitotel exports redlimit's decisions, store latencies and
// errors, degraded answers and refusal-cache answers as OpenTelemetry
// metrics, and a span per store call, through the redlimit.Observer
// hook; and a Redis store's counters (batching, refusal cache) as
// observable counters.
//
//	o, err := redlimitotel.New(redlimitotel.Options{}) // the global providers
//	l, _ := redlimit.New(store, "api", redlimit.WithConfig(cfg), redlimit.WithObserver(o))
//
// Attributes name the limiter or policy, the limit, the algorithm, the
// result, the op and the error kind: never the key, whose number has no
// bound. Spans may carry the key (Options.KeyInSpans): a span is one
// call's record, not a series.
package redlimitotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/redlimit/redlimit/otel"

// Attribute keys.
const (
	AttrPolicy    = attribute.Key("redlimit.policy") // the Limiter's or the Policy's name
	AttrLimit     = attribute.Key("redlimit.limit")  // the limit that decided (redlimit.LimitName)
	AttrAlgorithm = attribute.Key("redlimit.algorithm")
	AttrResult    = attribute.Key("redlimit.result") // granted, refused, error
	AttrOp        = attribute.Key("redlimit.op")     // acquire, release, status, set
	AttrErrorType = attribute.Key("error.type")      // redlimit.ErrorKind
	AttrKey       = attribute.Key("redlimit.key")    // spans only, with KeyInSpans
	AttrPermits   = attribute.Key("redlimit.permits")
	AttrDegraded  = attribute.Key("redlimit.degraded")
	AttrCached    = attribute.Key("redlimit.cached")
	AttrStore     = attribute.Key("redlimit.store")    // WatchStore's name
	AttrRunSize   = attribute.Key("redlimit.run_size") // a run size bucket: "1", "2-3", ..., "128+"
)

// Options choose the providers; the zero value of each field takes its
// default.
type Options struct {
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// NoSpans turns the spans off (metrics only).
	NoSpans bool
	// KeyInSpans adds the key (a Policy's key, a Limiter's client ID) to
	// each span. Off by default: keys are often personal data (a user,
	// an IP address).
	KeyInSpans bool
}

// Observer is a redlimit.Observer recording OpenTelemetry metrics and
// spans. One Observer may observe any number of Limiters and Policies. It
// is safe for concurrent use.
type Observer struct {
	meter  metric.Meter
	tracer trace.Tracer // nil: NoSpans
	keys   bool

	decisions metric.Int64Counter
	latency   metric.Float64Histogram
	errors    metric.Int64Counter
	degraded  metric.Int64Counter
	cached    metric.Int64Counter

	// sets caches the attribute sets of each (name, limit, result) and
	// (name, op) met: building one per call would cost more than the rest.
	sets sync.Map // setKey -> *attrs
}

// attrs is one attribute set as the instruments take it: kept in slices,
// so that passing it costs no allocation per call.
type attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

var _ redlimit.Observer = (*Observer)(nil)

// New makes the instruments.
func New(opts Options) (*Observer, error) {
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	o := &Observer{meter: mp.Meter(ScopeName), keys: opts.KeyInSpans}
	if !opts.NoSpans {
		tp := opts.TracerProvider
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		o.tracer = tp.Tracer(ScopeName)
	}
	var err error
	if o.decisions, err = o.meter.Int64Counter("redlimit.decisions", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls by limiter or policy, the limit that decided (the one that refused, or the closest to refusing), its algorithm, and result.")); err != nil {
		return nil, err
	}
	if o.latency, err = o.meter.Float64Histogram("redlimit.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Time calls spent asking the store (waits for one's turn excluded; refusal-cache answers not counted), by limiter or policy and op.")); err != nil {
		return nil, err
	}
	if o.errors, err = o.meter.Int64Counter("redlimit.store.errors", metric.WithUnit("{call}"),
		metric.WithDescription("Calls that returned an error, by limiter or policy, op and kind (redlimit.ErrorKind); bad arguments are not counted.")); err != nil {
		return nil, err
	}
	if o.degraded, err = o.meter.Int64Counter("redlimit.degraded", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls answered by the failure policy or the fallback store while the store was unavailable.")); err != nil {
		return nil, err
	}
	if o.cached, err = o.meter.Int64Counter("redlimit.refusal_cache.answers", metric.WithUnit("{call}"),
		metric.WithDescription("Refusals answered by the refusal cache without asking the store.")); err != nil {
		return nil, err
	}
	return o, nil
}

// setKey names a cached attribute set: a decision's (kind 0, by limit
// and result), a latency's or a degraded answer's (kind 1 and 2, by op or
// result), a cache answer's (3), an error's (4, by op and kind).
type setKey struct {
	kind         uint8
	name         string
	policy       bool
	cfg          redlimit.Config
	limit, extra string
	outcome      redlimit.Outcome
}

func (o *Observer) set(k setKey, kvs func() []attribute.KeyValue) *attrs {
	if v, ok := o.sets.Load(k); ok {
		return v.(*attrs)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs()...))
	v, _ := o.sets.LoadOrStore(k, &attrs{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}})
	return v.(*attrs)
}

// decisionSet is the attributes of a decision of e.
func (o *Observer) decisionSet(e *redlimit.Event) *attrs {
	k := setKey{name: e.Name, policy: e.Policy, outcome: e.Outcome}
	if e.Policy {
		var alg redlimit.Algorithm
		k.limit, alg = e.Limit()
		k.cfg.Algorithm = alg
	} else {
		k.cfg = e.Config
		k.cfg.Epoch = 0
	}
	return o.set(k, func() []attribute.KeyValue {
		limit, alg := e.Limit()
		return []attribute.KeyValue{AttrPolicy.String(e.Name), AttrLimit.String(limit), AttrAlgorithm.String(string(alg)), AttrResult.String(e.Outcome.String())}
	})
}

// Observe implements redlimit.Observer.
func (o *Observer) Observe(ctx context.Context, e redlimit.Event) {
	// Bad arguments never reach the store: no latency, no store error,
	// no span.
	asked := !e.Cached && e.ErrKind != "invalid_argument"
	op := e.Op.String()
	if asked {
		o.latency.Record(ctx, e.StoreLatency.Seconds(), o.set(setKey{kind: 1, name: e.Name, extra: op}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrPolicy.String(e.Name), AttrOp.String(op)}
		}).rec...)
		if o.tracer != nil {
			o.span(ctx, &e)
		}
	}
	if e.Outcome == redlimit.OutcomeError && asked {
		o.errors.Add(ctx, 1, o.set(setKey{kind: 4, name: e.Name, extra: op, limit: e.ErrKind}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrPolicy.String(e.Name), AttrOp.String(op), AttrErrorType.String(e.ErrKind)}
		}).add...)
	}
	if e.Op != redlimit.OpAcquire {
		return
	}
	if e.Cached {
		o.cached.Add(ctx, 1, o.set(setKey{kind: 3, name: e.Name}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrPolicy.String(e.Name)}
		}).add...)
	}
	if e.Degraded {
		o.degraded.Add(ctx, 1, o.set(setKey{kind: 2, name: e.Name, outcome: e.Outcome}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrPolicy.String(e.Name), AttrResult.String(e.Outcome.String())}
		}).add...)
	}
	o.decisions.Add(ctx, 1, o.decisionSet(&e).add...)
}

// span records the call's store round trip as a span, child of ctx's,
// from the call's start for its store latency. Its attributes are set
// only on a span that records: a sampler sees none of them.
func (o *Observer) span(ctx context.Context, e *redlimit.Event) {
	_, sp := o.tracer.Start(ctx, spanNames[e.Op], trace.WithTimestamp(e.Start), trace.WithSpanKind(trace.SpanKindClient))
	end := trace.WithTimestamp(e.Start.Add(e.StoreLatency))
	if !sp.IsRecording() {
		sp.End(end)
		return
	}
	limit, alg := e.Limit()
	kvs := []attribute.KeyValue{
		AttrPolicy.String(e.Name), AttrOp.String(e.Op.String()), AttrResult.String(e.Outcome.String()),
		AttrLimit.String(limit), AttrAlgorithm.String(string(alg)), AttrPermits.Int64(e.Permits),
	}
	if e.Degraded {
		kvs = append(kvs, AttrDegraded.Bool(true))
	}
	if o.keys {
		kvs = append(kvs, AttrKey.String(e.Key))
	}
	sp.SetAttributes(kvs...)
	if e.Outcome == redlimit.OutcomeError {
		sp.SetAttributes(AttrErrorType.String(e.ErrKind))
		sp.RecordError(e.Err)
		sp.SetStatus(codes.Error, e.ErrKind)
	}
	sp.End(end)
}

// spanNames names a span by its call's op.
var spanNames = func() map[redlimit.Op]string {
	m := map[redlimit.Op]string{}
	for _, op := range []redlimit.Op{redlimit.OpAcquire, redlimit.OpRelease, redlimit.OpStatus, redlimit.OpSet} {
		m[op] = "redlimit." + op.String()
	}
	return m
}()
