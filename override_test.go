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

// downStore is a store that cannot be reached, counting SetConfig calls.
type downStore struct {
	redlimit.Store
	setConfigs atomic.Int64
}

func (d *downStore) SetConfig(context.Context, string, redlimit.Config, redlimit.SetMode) (redlimit.Config, bool, error) {
	d.setConfigs.Add(1)
	return redlimit.Config{}, false, redlimit.ErrUnavailable
}

func (d *downStore) Acquire(context.Context, redlimit.Key, redlimit.Config, int64, time.Duration) (redlimit.Decision, error) {
	return redlimit.Decision{}, redlimit.ErrUnavailable
}

// During an outage WithConfigOverride does not ask the store once per
// call: after a failure it waits, doubling the wait.
func TestConfigOverrideBacksOffDuringOutage(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ds := &downStore{Store: memstore.New(memstore.WithTimeSource(clk))}
	l, err := redlimit.New(ds, "x", redlimit.WithConfig(redlimit.PerSecond(10)), redlimit.WithConfigOverride(),
		redlimit.WithFailurePolicy(redlimit.FailOpen), redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	calls := func(k int) {
		for range k {
			if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed || !r.Degraded {
				t.Fatalf("FailOpen call = %+v, %v", r, err)
			}
		}
	}
	calls(80)
	if n := ds.setConfigs.Load(); n != 1 {
		t.Fatalf("80 calls during an outage made %d SetConfig calls; want 1", n)
	}
	clk.Advance(100 * time.Millisecond)
	calls(10)
	if n := ds.setConfigs.Load(); n != 2 {
		t.Fatalf("after the first back-off: %d SetConfig calls; want 2", n)
	}
	clk.Advance(100 * time.Millisecond) // the second back-off is 200ms
	calls(10)
	if n := ds.setConfigs.Load(); n != 2 {
		t.Fatalf("100ms into the second back-off: %d SetConfig calls; want 2", n)
	}
	clk.Advance(100 * time.Millisecond)
	calls(10)
	if n := ds.setConfigs.Load(); n != 3 {
		t.Fatalf("after the second back-off: %d SetConfig calls; want 3", n)
	}
}

// blockingSetConfig holds SetConfig until released is closed.
type blockingSetConfig struct {
	redlimit.Store
	entered, released chan struct{}
}

func (b *blockingSetConfig) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	b.entered <- struct{}{}
	<-b.released
	return b.Store.SetConfig(ctx, name, cfg, how)
}

// While one call applies the override, the others do not queue behind it.
func TestConfigOverrideDoesNotSerialiseCalls(t *testing.T) {
	ctx := context.Background()
	bs := &blockingSetConfig{Store: memstore.New(), entered: make(chan struct{}, 1), released: make(chan struct{})}
	l, err := redlimit.New(bs, "x", redlimit.WithConfig(redlimit.PerSecond(100)), redlimit.WithConfigOverride())
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error)
	go func() { _, err := l.TryAcquire(ctx, 1); first <- err }()
	<-bs.entered
	for range 5 {
		if _, err := l.TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	close(bs.released)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.ConfigOverrides != 0 || st.Drifting {
		t.Fatalf("Stats = %+v", st)
	}
}
