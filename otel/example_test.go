package redlimitotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	redlimitotel "github.com/redlimit/redlimit/otel"
)

// One Observer records every Limiter's and Policy's calls given it, with
// the providers of Options (the global ones by default).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	o, err := redlimitotel.New(redlimitotel.Options{MeterProvider: mp, NoSpans: true})
	if err != nil {
		panic(err)
	}

	l, _ := redlimit.New(memstore.New(), "api", redlimit.WithConfig(redlimit.PerSecond(1)), redlimit.WithObserver(o))
	ctx := context.Background()
	l.TryAcquire(ctx, 1)
	l.TryAcquire(ctx, 1)

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "redlimit.decisions" {
			fmt.Println(m.Name, len(m.Data.(metricdata.Sum[int64]).DataPoints), "series")
		}
	}
	// Output:
	// redlimit.decisions 2 series
}
