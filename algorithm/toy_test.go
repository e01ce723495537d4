package algorithm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// concurrency is a toy sixth algorithm, registered by this test binary
// only: at most Rate permits held at once, until released. It shows that
// a new algorithm needs its package and its registration, nothing else,
// for the config's checks, ParseAlgorithm, the memory store and FuzzRules
// (which draws it too).
type concurrency struct{ Held, Last int64 }

func (s *concurrency) at(now int64) int64 { s.Last = algorithm.Later(now, s.Last); return s.Last }

func (s *concurrency) Acquire(now int64, lim algorithm.Limit, n, maxWait int64) algorithm.Decision {
	return s.AcquireAt(now, lim, n, maxWait, 0)
}

func (s *concurrency) AcquireAt(now int64, lim algorithm.Limit, n, maxWait, notBefore int64) algorithm.Decision {
	now = s.at(now)
	if s.Held+n > lim.Rate {
		// No instant can be promised: a refusal, whatever the wait.
		return algorithm.Decision{Wait: lim.Interval, Remaining: lim.Rate - s.Held, Now: now}
	}
	wait := max(0, notBefore-now)
	if maxWait != algorithm.Unlimited && wait > maxWait {
		return algorithm.Decision{Wait: wait, Remaining: lim.Rate - s.Held, Now: now}
	}
	s.Held += n // held from now on, whenever it is granted
	return algorithm.Decision{Granted: true, At: now + wait, Wait: wait, Remaining: lim.Rate - s.Held, Now: now}
}

func (s *concurrency) Cancel(now int64, _ algorithm.Limit, _, _ int64) int64 { s.at(now); return 0 }

func (s *concurrency) Release(now int64, _ algorithm.Limit, n int64) int64 {
	s.at(now)
	got := min(n, s.Held)
	s.Held -= got
	return got
}

func (s *concurrency) Available(now int64, lim algorithm.Limit) int64 {
	return max(0, lim.Rate-s.Held)
}

func (s *concurrency) Forgotten(int64, algorithm.Limit) bool { return s.Held == 0 }

func (s *concurrency) ExpiresAt() int64 { return 0 }

func (s *concurrency) Clone() algorithm.State { c := *s; return &c }

func init() {
	algorithm.Register(algorithm.Spec{
		Name:        "concurrency",
		Package:     "concurrency",
		Summary:     "at most rate permits held at once, until released",
		New:         func() algorithm.State { return new(concurrency) },
		Unit:        time.Millisecond,
		MinInterval: algorithm.MinInterval,
		MaxInterval: time.Hour,
		SetRate:     "keeps the permits held: a lower rate refuses until enough are released",
		Full: func(algorithm.State, int64, algorithm.Limit, int64) bool {
			return true // every refusal is one whatever the wait
		},
	})
}

// TestRegistryToy: the toy algorithm, registered above and nowhere else,
// is parsed, normalized with its own bounds, and run by the memory store.
func TestRegistryToy(t *testing.T) {
	all := algorithm.All()
	if len(all) != len(redlimit.Algorithms)+1 || all[len(all)-1].Name != "concurrency" {
		t.Fatalf("registry: %d algorithms, last %q; want the built-in ones then concurrency", len(all), all[len(all)-1].Name)
	}
	for i, a := range redlimit.Algorithms {
		if all[i].Name != string(a) {
			t.Fatalf("registry[%d] = %s, want %s (the order of redlimit.Algorithms)", i, all[i].Name, a)
		}
	}
	a, err := redlimit.ParseAlgorithm("Concurrency")
	if err != nil || a != "concurrency" {
		t.Fatalf("ParseAlgorithm = %q, %v", a, err)
	}
	cfg := redlimit.PerInterval(2, time.Second).WithAlgorithm(a)
	for _, bad := range []redlimit.Config{
		func() redlimit.Config { c := cfg; c.Interval = 2 * time.Hour; return c }(), // its own bound
		func() redlimit.Config { c := cfg; c.Burst = 3; return c }(),                // not its parameter
	} {
		if _, err := bad.Normalize(); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("Normalize(%v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if n, err := cfg.Normalize(); err != nil || n != cfg || n.MaxPermits() != 2 {
		t.Fatalf("Normalize(%v) = %v, %v (max %d)", cfg, n, err, n.MaxPermits())
	}

	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s := memstore.New(memstore.WithTimeSource(clk))
	if _, _, err := s.SetConfig(ctx, "db", cfg, redlimit.SetResetState); err != nil {
		t.Fatal(err)
	}
	key := redlimit.Key{Name: "db"}
	d, err := s.Acquire(ctx, key, redlimit.Config{}, 2, 0)
	if err != nil || !d.Granted || d.Remaining != 0 {
		t.Fatalf("Acquire 2 = %+v, %v", d, err)
	}
	clk.Advance(time.Hour) // time frees nothing: only a release does
	if d, err = s.Acquire(ctx, key, redlimit.Config{}, 1, time.Minute); err != nil || d.Granted || !d.Full {
		t.Fatalf("Acquire 1 while 2 held = %+v, %v; want refused, full", d, err)
	}
	if _, err := s.Acquire(ctx, key, redlimit.Config{}, 3, 0); !errors.Is(err, redlimit.ErrPermitsExceedRate) {
		t.Fatalf("Acquire 3 of at most 2: %v", err)
	}
	if got, err := s.Release(ctx, key, redlimit.Config{}, 1, time.Time{}); err != nil || got != 1 {
		t.Fatalf("Release 1 = %d, %v", got, err)
	}
	if got, _, err := s.Available(ctx, key, redlimit.Config{}); err != nil || got != 1 {
		t.Fatalf("Available after a release = %d, %v; want 1", got, err)
	}
}
