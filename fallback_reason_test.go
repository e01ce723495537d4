package redlimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// A refusal of the fallback store keeps its reason: a full leaky-bucket
// queue is ErrQueueFull there too, not a bare ErrRefused.
func TestFallbackRefusalKeepsItsReason(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fallback := memstore.New(memstore.WithTimeSource(clk))
	cfg := redlimit.PerInterval(2, time.Hour).WithAlgorithm(redlimit.LeakyBucket)
	// The fallback store holds this config (a stored config wins over
	// the share the degraded Limiter sends along).
	filler := mustLimiter(t, fallback, "q", cfg, redlimit.WithClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Fill the queue with waiters asleep on the fake clock.
	for asleep := 0; ; {
		done := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			_, err := filler.Acquire(ctx, 1)
			errc <- err
			close(done)
		}()
		if clk.WaitForTimers(asleep+1, done) {
			asleep++
			continue
		}
		err := <-errc
		if err == nil {
			continue // granted at once
		}
		if !errors.Is(err, redlimit.ErrQueueFull) {
			t.Fatalf("filling the queue, %d asleep: %v", asleep, err)
		}
		break
	}
	down := &downStore{Store: memstore.New(memstore.WithTimeSource(clk))}
	l := mustLimiter(t, down, "q", cfg, redlimit.WithClock(clk), redlimit.WithFallback(fallback, 0.5))
	r, err := l.Acquire(context.Background(), 1)
	if !errors.Is(err, redlimit.ErrQueueFull) || !errors.Is(err, redlimit.ErrRefused) || !r.Degraded {
		t.Fatalf("Acquire on the full fallback = %+v, %v; want ErrQueueFull, degraded", r, err)
	}
}
