package redlimitprom_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	redlimitprom "github.com/redlimit/redlimit/prometheus"
	"github.com/redlimit/redlimit/redisstore"
)

// One Metrics, registered once, observes every Limiter and Policy given
// it; serve the registry as usual (promhttp.HandlerFor).
func Example() {
	m := redlimitprom.New(redlimitprom.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	l, _ := redlimit.New(memstore.New(), "api", redlimit.WithConfig(redlimit.PerSecond(1)), redlimit.WithObserver(m))
	ctx := context.Background()
	l.TryAcquire(ctx, 1)
	l.TryAcquire(ctx, 1)

	out, _ := testutil.CollectAndFormat(m, expfmt.TypeTextPlain, "redlimit_decisions_total")
	fmt.Print(string(out))
	// Output:
	// # HELP redlimit_decisions_total Acquire calls by limiter or policy, the limit that decided (the one that refused, or the closest to refusing), its algorithm, and result (granted, refused, error).
	// # TYPE redlimit_decisions_total counter
	// redlimit_decisions_total{algorithm="sliding-log",limit="1/1s",policy="api",result="error"} 0
	// redlimit_decisions_total{algorithm="sliding-log",limit="1/1s",policy="api",result="granted"} 1
	// redlimit_decisions_total{algorithm="sliding-log",limit="1/1s",policy="api",result="refused"} 1
}

// A Redis store's own counters (batching's run sizes, refusal-cache
// answers, hand-backs) are read at each scrape.
func ExampleMetrics_WatchStore() {
	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		panic(err)
	}
	m := redlimitprom.New(redlimitprom.Options{HotKeys: 10})
	m.WatchStore("main", store)
	prometheus.MustRegister(m)
}
