package redlimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// newHeldEnv is a memory store and a fake clock shared by its Limiters.
func newHeldEnv(t *testing.T, start time.Time) (*clock.Fake, redlimit.Store) {
	t.Helper()
	clk := clock.NewFake(start)
	return clk, memstore.New(memstore.WithTimeSource(clk))
}

func mustLimiter(t *testing.T, s redlimit.Store, name string, cfg redlimit.Config, opts ...redlimit.Option) *redlimit.Limiter {
	t.Helper()
	l, err := redlimit.New(s, name, append([]redlimit.Option{redlimit.WithConfig(cfg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// blockFirstRelease holds the first Release in the store until released
// is closed, having said so on calls; later ones pass.
type blockFirstRelease struct {
	redlimit.Store
	n        atomic.Int64
	calls    chan struct{}
	released chan struct{}
}

func (b *blockFirstRelease) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if b.n.Add(1) == 1 {
		b.calls <- struct{}{}
		<-b.released
	}
	return b.Store.Release(ctx, key, known, n, upTo)
}

// Two Releases at once on a Limiter holding one permit hand back one, not
// two: the second must not count the permit the first is handing back.
func TestReleaseConcurrentNeverExceedsHeld(t *testing.T) {
	ctx := context.Background()
	clk, mem := newHeldEnv(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bs := &blockFirstRelease{Store: mem, calls: make(chan struct{}), released: make(chan struct{})}
	cfg := redlimit.PerMinute(10)
	a := mustLimiter(t, bs, "x", cfg, redlimit.WithClock(clk))
	b := mustLimiter(t, bs, "x", cfg, redlimit.WithClock(clk))
	if r, err := a.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("a: %+v, %v", r, err)
	}
	if r, err := b.TryAcquire(ctx, 9); err != nil || !r.Allowed {
		t.Fatalf("b: %+v, %v", r, err)
	}
	first := make(chan int64)
	go func() {
		n, _ := a.Release(ctx, 1)
		first <- n
	}()
	// Receiving here: the first Release is in the store call; the
	// second runs entirely while it is held there.
	<-bs.calls
	second, err := a.Release(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	close(bs.released)
	if sum := <-first + second; sum != 1 {
		t.Errorf("a, holding 1 permit, handed back %d in two concurrent Releases", sum)
	}
	granted := 0
	for range 3 {
		if r, _ := b.TryAcquire(ctx, 1); r.Allowed {
			granted++
		}
	}
	if granted != 1 {
		t.Errorf("after a's hand-back %d more granted in the minute of 10; want 1", granted)
	}
}

// oneAtATime is a store that hands back at most one permit per Release,
// as a store that counts fewer than the Limiter holds would.
type oneAtATime struct{ redlimit.Store }

func (o oneAtATime) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	return o.Store.Release(ctx, key, known, min(n, 1), upTo)
}

// A Release the store cannot honour puts the permits back in the record.
func TestReleaseKeepsWhatTheStoreDidNotHandBack(t *testing.T) {
	ctx := context.Background()
	clk, mem := newHeldEnv(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := redlimit.PerMinute(10)
	a := mustLimiter(t, oneAtATime{mem}, "x", cfg, redlimit.WithClock(clk))
	if r, err := a.TryAcquire(ctx, 2); err != nil || !r.Allowed {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	if n, err := a.Release(ctx, 2); n != 1 || err != nil {
		t.Fatalf("release = %d, %v; want 1 (the store hands back one)", n, err)
	}
	if n, err := a.Release(ctx, 2); n != 1 || err != nil {
		t.Fatalf("second release = %d, %v; want 1: the permit the store kept is still held", n, err)
	}
	if n, err := a.Release(ctx, 2); n != 0 || err != nil {
		t.Fatalf("third release = %d, %v; want 0: nothing is held", n, err)
	}
}

// A slot emptied by Release stays the one later grants are counted in.
func TestReleaseAfterEmptiedSlot(t *testing.T) {
	ctx := context.Background()
	clk, mem := newHeldEnv(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := mustLimiter(t, mem, "x", redlimit.PerInterval(10, time.Minute), redlimit.WithClock(clk))
	l.TryAcquire(ctx, 1)
	if n, _ := l.Release(ctx, 1); n != 1 {
		t.Fatalf("first release = %d; want 1", n)
	}
	if n, _ := l.Release(ctx, 1); n != 0 {
		t.Fatalf("release of nothing held = %d; want 0", n)
	}
	l.TryAcquire(ctx, 1)
	if n, err := l.Release(ctx, 1); n != 1 {
		t.Errorf("release of a held permit = %d, %v; want 1", n, err)
	}
}

// A window algorithm's grant is held only until its window ends: the store
// hands back permits of the current window, which were others'.
func TestReleaseAcrossWindowBoundary(t *testing.T) {
	for _, alg := range []redlimit.Algorithm{redlimit.FixedWindow, redlimit.SlidingCounter} {
		t.Run(string(alg), func(t *testing.T) {
			ctx := context.Background()
			clk, mem := newHeldEnv(t, time.Date(2026, 1, 1, 0, 0, 59, 0, time.UTC))
			cfg := redlimit.PerInterval(2, time.Minute).WithAlgorithm(alg)
			a := mustLimiter(t, mem, "w", cfg, redlimit.WithClock(clk))
			b := mustLimiter(t, mem, "w", cfg, redlimit.WithClock(clk))
			if r, _ := a.TryAcquire(ctx, 1); !r.Allowed {
				t.Fatal("a refused")
			}
			clk.Advance(2 * time.Second) // 0:01:01, the next window
			before := 0
			for range 2 {
				if r, _ := b.TryAcquire(ctx, 1); r.Allowed {
					before++
				}
			}
			if n, _ := a.Release(ctx, 1); n != 0 {
				t.Errorf("a released %d of the previous window's grant; want 0", n)
			}
			if r, _ := b.TryAcquire(ctx, 1); r.Allowed {
				t.Errorf("granted again after a's release (%d before it) in a window of 2", before)
			}
			// Within its own window a grant is handed back.
			clk.Advance(2 * time.Minute)
			c := mustLimiter(t, mem, "w", cfg, redlimit.WithClock(clk))
			c.TryAcquire(ctx, 1)
			clk.Advance(30 * time.Second)
			if n, _ := c.Release(ctx, 1); n != 1 {
				t.Errorf("release in the grant's own window = %d; want 1", n)
			}
		})
	}
}

// The hold is timed by the Limiter's clock from when the grant arrived, not
// by comparing it with the store's grant times.
func TestReleaseHeldByTheLimitersClock(t *testing.T) {
	ctx := context.Background()
	storeClk, mem := newHeldEnv(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// The Limiter's clock runs an hour ahead of the store's.
	own := clock.NewFake(storeClk.Now().Add(time.Hour))
	l := mustLimiter(t, mem, "x", redlimit.PerMinute(10), redlimit.WithClock(own))
	l.TryAcquire(ctx, 1)
	storeClk.Advance(10 * time.Second)
	own.Advance(10 * time.Second)
	if n, _ := l.Release(ctx, 1); n != 1 {
		t.Errorf("release 10s after the grant with the Limiter's clock an hour ahead = %d; want 1", n)
	}
	l.TryAcquire(ctx, 1)
	storeClk.Advance(time.Minute)
	own.Advance(time.Minute)
	if n, _ := l.Release(ctx, 1); n != 0 {
		t.Errorf("release a minute after the grant = %d; want 0", n)
	}
}
