package redlimitprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	redlimitprom "github.com/redlimit/redlimit/prometheus"
)

// BenchmarkTryAcquire: a memstore Limiter's TryAcquire with the metrics
// observing it, with and without hot-key exemplars.
func BenchmarkTryAcquire(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts redlimitprom.Options
	}{{"metrics", redlimitprom.Options{}}, {"exemplars", redlimitprom.Options{HotKeys: 10}}} {
		m := redlimitprom.New(bc.opts)
		l, err := redlimit.New(memstore.New(), "bench", redlimit.WithConfig(redlimit.PerInterval(1<<40, time.Second)), redlimit.WithObserver(m))
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
