package redlimitotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	redlimitotel "github.com/redlimit/redlimit/otel"
)

// BenchmarkTryAcquire: a memstore Limiter's TryAcquire observed by the
// SDK's metrics, with and without (sampled-out) spans.
func BenchmarkTryAcquire(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	for _, bc := range []struct {
		name string
		opts redlimitotel.Options
	}{{"metrics", redlimitotel.Options{MeterProvider: mp, NoSpans: true}}, {"spans", redlimitotel.Options{MeterProvider: mp, TracerProvider: tp}}} {
		o, err := redlimitotel.New(bc.opts)
		if err != nil {
			b.Fatal(err)
		}
		l, err := redlimit.New(memstore.New(), "bench-"+bc.name, redlimit.WithConfig(redlimit.PerInterval(1<<40, time.Second)), redlimit.WithObserver(o))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.TryAcquire(context.Background(), 1)
			}
		})
	}
}
