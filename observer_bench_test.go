package redlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

// BenchmarkUnobserved is the hot path with no Observer: what every call
// pays for the hook when nobody listens (compare BenchmarkObserved).
func BenchmarkUnobserved(b *testing.B) { benchObserver(b) }

func benchObserver(b *testing.B, opts ...redlimit.Option) {
	ctx := context.Background()
	cfg := redlimit.PerInterval(1<<40, time.Second)
	l, err := redlimit.New(memstore.New(), "bench", append([]redlimit.Option{redlimit.WithConfig(cfg)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	p, err := redlimit.NewPolicy(memstore.New(), "bench", []redlimit.Config{cfg}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("limiter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.TryAcquire(ctx, 1)
		}
	})
	b.Run("policy", func(b *testing.B) {
		b.ReportAllocs()
		k := p.Key("k")
		for b.Loop() {
			k.TryAcquire(ctx, 1)
		}
	})
}
