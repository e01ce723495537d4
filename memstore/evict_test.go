package memstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

var t0 = time.Unix(1_700_000_000, 0)

// census counts the store's names and the logs they hold.
func (s *Store) census() (names, logs int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.m.Range(func(_, v any) bool {
			l := v.(*limiter)
			if l.dead.Load() {
				return true
			}
			names++
			l.mu.Lock()
			if l.overall.State != nil {
				logs++
			}
			logs += len(l.clients)
			l.mu.Unlock()
			return true
		})
		sh.mu.Unlock()
	}
	return names, logs
}

// TestIdleEviction: once idle, state goes and a name with no config goes
// entirely, while every config, set or restored, reads back unchanged.
func TestIdleEviction(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	known := redlimit.TokenBucketConfig(10, time.Second, 10)
	const n = 1000
	for i := range n {
		if _, err := s.Acquire(ctx, redlimit.Key{Name: "known-" + strconv.Itoa(i), Client: "c"}, known, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	set, _, err := s.SetConfig(ctx, "set", redlimit.PerSecond(5).WithMode(redlimit.PerClient), redlimit.SetResetState)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"a", "b"} {
		if _, err := s.Acquire(ctx, redlimit.Key{Name: "set", Client: c}, set, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A deleted PerClient limiter whose clients' logs outlive its config.
	gone, _, _ := s.SetConfig(ctx, "gone", redlimit.PerSecond(5).WithMode(redlimit.PerClient), redlimit.SetResetState)
	s.Acquire(ctx, redlimit.Key{Name: "gone", Client: "a"}, gone, 1, 0)
	s.Delete(ctx, "gone")
	if names, logs := s.census(); names != n+2 || logs != n+3 {
		t.Fatalf("before: %d names, %d logs; want %d, %d", names, logs, n+2, n+3)
	}

	clk.Advance(sweepEvery)
	for i := range n { // any call sweeps its shard once it is due
		if _, err := s.Config(ctx, "known-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Config(ctx, "set")
	s.Config(ctx, "gone")
	if names, logs := s.census(); names != n+1 || logs != 0 {
		t.Fatalf("after: %d names, %d logs; want %d, 0", names, logs, n+1)
	}
	for i := range n {
		if c, err := s.Config(ctx, "known-"+strconv.Itoa(i)); err != nil || c != known.WithAlgorithm(redlimit.TokenBucket) {
			t.Fatalf("restored config after the sweep: %v, %v", c, err)
		}
	}
	if c, err := s.Config(ctx, "set"); err != nil || c != set {
		t.Fatalf("set config after the sweep: %v, %v; want %v", c, err, set)
	}
	if _, err := s.Config(ctx, "gone"); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("deleted config after the sweep: %v", err)
	}
	// The evicted state was empty anyway: a full bucket again.
	if got, _, err := s.Available(ctx, redlimit.Key{Name: "known-0", Client: "c"}, known); err != nil || got != 10 {
		t.Fatalf("available after the sweep = %d, %v; want 10", got, err)
	}
}

// TestGrowthSweep: names added in bulk sweep the idle state before them, so
// idle logs never outnumber live ones by much, whatever the clock does.
func TestGrowthSweep(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	cfg := redlimit.PerInterval(1, time.Millisecond) // forgotten 1 ms after its grant
	const n = 50_000
	for i := range n {
		if i%1000 == 0 {
			clk.Advance(time.Millisecond)
		}
		s.Acquire(ctx, redlimit.Key{Name: strconv.Itoa(i)}, cfg, 1, 0)
	}
	// Only the last batch is live. The shards sweep on doubling, so up to
	// about twice what a sweep kept may be waiting for the next one.
	if _, logs := s.census(); logs > n/2 {
		t.Fatalf("%d logs held for %d names, most of them forgotten", logs, n)
	}
	t.Logf("%d names, at most 1000 live: %d logs held", n, func() int { _, l := s.census(); return l }())
}

// TestEvictionRace: calls racing deletes and sweeps never act on a limiter
// that left the store (run with -race).
func TestEvictionRace(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	cfg := redlimit.PerInterval(1000, time.Second)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				name := strconv.Itoa(i % 7)
				switch (g + i) % 5 {
				case 0:
					s.Delete(ctx, name)
				case 1:
					clk.Advance(sweepEvery)
				default:
					if _, err := s.Acquire(ctx, redlimit.Key{Name: name}, cfg, 1, 0); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestSweepSchedule: each shard is swept once it has gone sweepEvery
// without a sweep, by the first call on it, never earlier, whatever the
// other shards' schedules (the store's due time only lets calls skip the
// look at their shard while no shard is due).
func TestSweepSchedule(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := New(WithTimeSource(clk))
	cfg := redlimit.TokenBucketConfig(10, time.Second, 10)
	// One name per shard; the last shard's is first called 5 s later.
	names := make([]string, 0, shardCount)
	seen := map[*shard]bool{}
	for i := 0; len(names) < shardCount; i++ {
		if name := "n-" + strconv.Itoa(i); !seen[s.shard(name)] {
			seen[s.shard(name)] = true
			names = append(names, name)
		}
	}
	late := names[shardCount-1]
	acquire := func(name string) {
		t.Helper()
		if _, err := s.Acquire(ctx, redlimit.Key{Name: name}, cfg, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names[:shardCount-1] {
		acquire(name)
	}
	clk.Advance(5 * time.Second)
	acquire(late)
	logs := func(want int) {
		t.Helper()
		if _, got := s.census(); got != want {
			t.Fatalf("at %v: %d logs; want %d", clk.Now().Sub(t0), got, want)
		}
	}
	logs(shardCount)
	clk.Advance(5 * time.Second) // 10 s: every shard but the late one is due
	s.Config(ctx, late)
	logs(shardCount)
	for _, name := range names[:shardCount-1] {
		s.Config(ctx, name)
	}
	logs(1) // the late name's bucket, full long ago, is not swept yet
	clk.Advance(4 * time.Second)
	s.Config(ctx, late)
	logs(1)
	clk.Advance(time.Second) // 15 s: the late shard is due
	s.Config(ctx, late)
	logs(0)
}
