package redlimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
)

// countingHandler counts the records logged at each level, and keeps their
// attributes.
type countingHandler struct {
	mu    sync.Mutex
	warns int
	attrs []map[string]string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level == slog.LevelWarn {
		h.warns++
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		h.attrs = append(h.attrs, m)
	}
	return nil
}

// driftEnv stores cfg under each name and returns the store and clock.
func driftEnv(t *testing.T, cfg redlimit.Config, names ...string) (redlimit.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.WithTimeSource(clk))
	for _, name := range names {
		admin, err := redlimit.New(s, name, redlimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.SetRate(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	return s, clk
}

// A service that makes a Limiter per request, each with the request's
// logger, logs a drifted config once, not once per request.
func TestDriftLoggedOncePerProcess(t *testing.T) {
	ctx := context.Background()
	s, clk := driftEnv(t, redlimit.PerSecond(1000), "api")
	h := &countingHandler{}
	lg := slog.New(h)
	for i := range 100 {
		l, err := redlimit.New(s, "api", redlimit.WithConfig(redlimit.PerSecond(5000)), redlimit.WithLogger(lg.With("request", i)), redlimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		if st := l.Stats(); !st.Drifting || st.ConfigDrift != 1 {
			t.Fatalf("Stats = %+v; want drifting, 1", st)
		}
	}
	if h.warns != 1 {
		t.Errorf("100 Limiters under one drifted config logged %d Warn lines; want 1", h.warns)
	}
}

// Drift warnings are rate-limited per logger: many drifting limiters do
// not flood the log, and the next line says how many were left out.
func TestDriftLogRateLimited(t *testing.T) {
	ctx := context.Background()
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("tenant-%d", i))
	}
	s, clk := driftEnv(t, redlimit.PerSecond(1000), append(names, "late")...)
	h := &countingHandler{}
	lg := slog.New(h)
	for _, name := range names {
		l, _ := redlimit.New(s, name, redlimit.WithConfig(redlimit.PerSecond(5000)), redlimit.WithLogger(lg), redlimit.WithClock(clk))
		l.TryAcquire(ctx, 1)
	}
	if h.warns != 10 {
		t.Fatalf("30 drifting limiters logged %d Warn lines in a minute; want 10", h.warns)
	}
	clk.Advance(time.Minute)
	l, _ := redlimit.New(s, "late", redlimit.WithConfig(redlimit.PerSecond(5000)), redlimit.WithLogger(lg), redlimit.WithClock(clk))
	l.TryAcquire(ctx, 1)
	if h.warns != 11 || h.attrs[10]["suppressed"] != "20" || h.attrs[10]["limiter"] != "late" {
		t.Fatalf("a minute later: %d lines, last %v; want 11, naming late, suppressed 20", h.warns, h.attrs[len(h.attrs)-1])
	}
}

// SetRate to the config already stored ends the drift (the Limiter's own
// choice), and only acquire calls count as drift.
func TestDriftAfterOwnSetRate(t *testing.T) {
	ctx := context.Background()
	stored := redlimit.PerSecond(1000)
	for _, set := range []string{"SetRate", "TrySetRate"} {
		t.Run(set, func(t *testing.T) {
			s, clk := driftEnv(t, stored, "api")
			l, _ := redlimit.New(s, "api", redlimit.WithConfig(redlimit.PerSecond(5000)),
				redlimit.WithLogger(slog.New(&countingHandler{})), redlimit.WithClock(clk))
			l.TryAcquire(ctx, 1)
			if _, err := l.Config(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AvailablePermits(ctx); err != nil {
				t.Fatal(err)
			}
			if st := l.Stats(); st.ConfigDrift != 1 || !st.Drifting {
				t.Fatalf("after an acquire, Config and AvailablePermits: %+v; want 1 drifted call", st)
			}
			if set == "SetRate" {
				if err := l.SetRate(ctx, stored); err != nil {
					t.Fatal(err)
				}
				l.TryAcquire(ctx, 1)
				if st := l.Stats(); st.Drifting || st.ConfigDrift != 1 {
					t.Fatalf("after SetRate to the stored config: %+v; want no drift, 1 counted", st)
				}
				return
			}
			// TrySetRate finds the stored config: still drifting from
			// WithConfig's, and the check says so again.
			if _, err := l.TrySetRate(ctx, stored); err != nil {
				t.Fatal(err)
			}
			if st := l.Stats(); !st.Drifting || st.ConfigDrift != 1 {
				t.Fatalf("after TrySetRate: %+v; want drifting, 1 counted", st)
			}
		})
	}
}

// valueStore is a Store held by value whose type is comparable but whose
// field holds a value that is not: it must not be used as a map key.
type valueStore struct {
	redlimit.Store
	tags any
}

// A Store held by value, with an uncomparable field inside, is logged as
// any other, not a panic.
func TestDriftWithAValueStore(t *testing.T) {
	ctx := context.Background()
	s, clk := driftEnv(t, redlimit.PerSecond(1000), "api")
	h := &countingHandler{}
	l, err := redlimit.New(valueStore{Store: s, tags: map[string]int{}}, "api", redlimit.WithConfig(redlimit.PerSecond(5000)), redlimit.WithLogger(slog.New(h)), redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	if h.warns != 1 {
		t.Errorf("logged %d Warn lines; want 1", h.warns)
	}
}
