package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// TestBoundLimiter: a Limiter binds itself to its name's limiter in the
// store, and its calls see what other Limiters of the name and the store's
// own calls do, across a Delete (the limiter leaves the store) and an
// eviction (a sweep drops it), after each of which the name is made anew.
func TestBoundLimiter(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	cfg := redlimit.PerInterval(3, time.Second).WithAlgorithm(redlimit.FixedWindow)
	a, err := redlimit.New(s, "bound", redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("before any config: %v; want ErrNotInitialized", err)
	}
	b, err := redlimit.New(s, "bound", redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetRate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// a, b and the store itself share the window of 3.
	grants := func() (n int) {
		for range 4 {
			if r, err := a.TryAcquire(ctx, 1); err != nil {
				t.Fatal(err)
			} else if r.Allowed {
				n++
			}
		}
		return n
	}
	if _, err := s.Acquire(ctx, redlimit.Key{Name: "bound"}, redlimit.Config{}, 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := grants(); got != 2 {
		t.Fatalf("granted %d after the store's own grant; want 2", got)
	}
	// Deleted: the limiter leaves the store; a's handle finds it gone,
	// and a, which still knows the config, restores it with a fresh
	// state, as after a data loss.
	if _, err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if got := grants(); got != 3 {
		t.Fatalf("granted %d after Delete; want 3 (config restored)", got)
	}
	// Evicted: with its config expired and its state forgotten, a sweep
	// drops the name; a call made after it restores a's known config in
	// a new limiter.
	if _, err := b.Expire(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	clk.Advance(sweepEvery)
	s.sweepDue(s.shard("bound"), clk.Now().UnixMicro())
	if names, _ := s.census(); names != 0 {
		t.Fatalf("%d names left after the sweep; want 0", names)
	}
	if got := grants(); got != 3 {
		t.Fatalf("granted %d after the eviction; want 3 (config restored)", got)
	}
	if c, err := b.Config(ctx); err != nil || !c.SameLimit(cfg) {
		t.Fatalf("config after the eviction: %v, %v", c, err)
	}
}

// counting embeds the store and counts its Acquire calls: a Limiter on it
// must go through that Acquire, though the embedded store's Bind shows.
type counting struct {
	*Store
	calls int
}

func (c *counting) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	c.calls++
	return c.Store.Acquire(ctx, key, known, n, maxWait)
}

// TestEmbeddingStoreNotBound: a store type embedding the memory store is
// not bound past: its own Acquire answers.
func TestEmbeddingStoreNotBound(t *testing.T) {
	ctx := context.Background()
	c := &counting{Store: New()}
	l, err := redlimit.New(c, "wrapped", redlimit.WithConfig(redlimit.PerSecond(10)))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if c.calls != 3 {
		t.Fatalf("the wrapper's Acquire ran %d times for 3 calls; want 3", c.calls)
	}
}
