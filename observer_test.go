package redlimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/refusalcache"
)

// recorder keeps every Event it is told about.
type recorder struct {
	mu     sync.Mutex
	events []redlimit.Event
}

func (r *recorder) Observe(_ context.Context, e redlimit.Event) {
	e.Limits = slices.Clone(e.Limits) // the caller's Result owns them
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// cached takes the events, and returns whether each was Cached.
func (r *recorder) cached() []bool {
	var c []bool
	for _, e := range r.take() {
		c = append(c, e.Cached)
	}
	return c
}

// take returns the events since the last take.
func (r *recorder) take() []redlimit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events = nil
	return ev
}

func (r *recorder) one(t *testing.T) redlimit.Event {
	t.Helper()
	ev := r.take()
	if len(ev) != 1 {
		t.Fatalf("%d events; want 1: %+v", len(ev), ev)
	}
	return ev[0]
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestObserverLimiter: each call of a Limiter is one Event saying what
// was asked, how it ended, under which limit, and how long the store and
// the wait took.
func TestObserverLimiter(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	rec := &recorder{}
	cfg := redlimit.PerInterval(2, time.Hour).WithAlgorithm(redlimit.TokenBucket)
	l, err := redlimit.New(memstore.New(memstore.WithTimeSource(clk)), "api", redlimit.WithConfig(cfg),
		redlimit.WithClock(clk), redlimit.WithClientID("c1"), redlimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, e redlimit.Event, op redlimit.Op, out redlimit.Outcome, n int64) {
		t.Helper()
		if e.Op != op || e.Outcome != out || e.Permits != n || e.Name != "api" || e.Policy || e.Key != "c1" || !e.Start.Equal(clk.Now()) {
			t.Errorf("%s: %+v; want %v %v of %d permits by api/c1 at %v", what, e, op, out, n, clk.Now())
		}
		if name, alg := e.Limit(); name != "2/1h,token-bucket" || alg != redlimit.TokenBucket {
			t.Errorf("%s: limit %q %q; want 2/1h,token-bucket", what, name, alg)
		}
	}
	if _, err := l.TryAcquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	check("grant", rec.one(t), redlimit.OpAcquire, redlimit.OutcomeGranted, 2)
	if r, _ := l.TryAcquire(ctx, 1); r.Allowed {
		t.Fatal("granted a third permit")
	}
	check("refusal", rec.one(t), redlimit.OpAcquire, redlimit.OutcomeRefused, 1)

	// Acquire's refusal is a refusal, not an error.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := l.Acquire(wctx, 2); !errors.Is(err, redlimit.ErrWouldExceedDeadline) {
		t.Fatalf("Acquire: %v; want ErrWouldExceedDeadline", err)
	}
	e := rec.one(t)
	check("Acquire's refusal", e, redlimit.OpAcquire, redlimit.OutcomeRefused, 2)
	if e.Err != nil {
		t.Errorf("Acquire's refusal: Err %v; want none", e.Err)
	}

	// A wait for one's turn is Waited, not StoreLatency.
	done := make(chan redlimit.Result)
	go func() {
		r, _ := l.TryAcquireWait(ctx, 1, time.Hour)
		done <- r
	}()
	clk.WaitForTimers(1, nil)
	start := clk.Now()
	clk.Advance(30 * time.Minute)
	if r := <-done; !r.Allowed || r.Waited != 30*time.Minute {
		t.Fatalf("TryAcquireWait: %+v; want a grant after 30m", r)
	}
	e = rec.one(t)
	if e.Outcome != redlimit.OutcomeGranted || e.Waited != 30*time.Minute || e.StoreLatency != 0 || !e.Start.Equal(start) {
		t.Errorf("wait: %+v; want a grant at %v, Waited 30m, StoreLatency 0 (the fake clock stood still in the store)", e, start)
	}

	if _, err := l.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	check("release", rec.one(t), redlimit.OpRelease, redlimit.OutcomeGranted, 1)
	if _, err := l.AvailablePermits(ctx); err != nil {
		t.Fatal(err)
	}
	check("status", rec.one(t), redlimit.OpStatus, redlimit.OutcomeGranted, 0)
	if err := l.SetRate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("set", rec.one(t), redlimit.OpSet, redlimit.OutcomeGranted, 0)

	// Bad input is an error of its kind.
	if _, err := l.TryAcquire(ctx, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatal(err)
	}
	if e := rec.one(t); e.Outcome != redlimit.OutcomeError || e.ErrKind != "invalid_argument" || !errors.Is(e.Err, redlimit.ErrInvalidArgument) {
		t.Errorf("bad input: %+v; want an invalid_argument error", e)
	}
}

// TestObserverRefusalCache: a refusal the refusal cache answered is
// marked Cached; the store's own is not.
func TestObserverRefusalCache(t *testing.T) {
	ctx := context.Background()
	cache, err := refusalcache.New(memstore.New(), refusalcache.Settings{MaxStale: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l, err := redlimit.New(cache, "cached", redlimit.WithConfig(redlimit.PerInterval(1, time.Hour)), redlimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if cached, want := rec.cached(), []bool{false, false, true}; !slices.Equal(cached, want) {
		t.Errorf("Cached: %v; want %v (a grant, the store's refusal, the cache's)", cached, want)
	}
	if got := cache.Stats().LocalRefusals; got != 1 {
		t.Errorf("LocalRefusals %d; want 1", got)
	}
}

// TestObserverPolicyRefusalCache: a Policy's keyed refusal answered by
// the refusal cache is marked Cached, in its decision and in its Event;
// the store's own refusal is not.
func TestObserverPolicyRefusalCache(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	cache, err := refusalcache.New(memstore.New(memstore.WithTimeSource(clk)), refusalcache.Settings{MaxStale: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p, err := redlimit.NewPolicy(cache, "cached", []redlimit.Config{redlimit.PerInterval(1, time.Hour), redlimit.PerSecond(5)},
		redlimit.WithClock(clk), redlimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	k := p.Key("alice")
	for range 3 {
		if _, err := k.TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if cached, want := rec.cached(), []bool{false, false, true}; !slices.Equal(cached, want) {
		t.Errorf("Cached: %v; want %v (a grant, the store's refusal, the cache's)", cached, want)
	}
	d, err := cache.AcquireKey(ctx, redlimit.PolicyKey{Policy: "cached", Key: "alice"}, redlimit.PolicyConfig{}, 1, 0)
	if err != nil || d.Granted || !d.Cached {
		t.Errorf("AcquireKey: %+v, %v; want a cached refusal", d, err)
	}
	if got := cache.Stats().LocalKeyRefusals; got != 2 {
		t.Errorf("LocalKeyRefusals %d; want 2", got)
	}
}

// TestObserverPolicy: a Policy's events name the policy, the key, and the
// limit that decided: the one that refused, or the closest to refusing.
func TestObserverPolicy(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	rec, rec2 := &recorder{}, &recorder{}
	p, err := redlimit.NewPolicy(memstore.New(memstore.WithTimeSource(clk)), "per-user",
		[]redlimit.Config{redlimit.PerSecond(3), redlimit.PerInterval(2, time.Minute).WithAlgorithm(redlimit.FixedWindow)},
		redlimit.WithClock(clk), redlimit.WithObserver(rec), redlimit.WithObserver(rec2))
	if err != nil {
		t.Fatal(err)
	}
	k := p.Key("alice")
	for i, want := range []struct {
		out   redlimit.Outcome
		limit string
		alg   redlimit.Algorithm
	}{
		{redlimit.OutcomeGranted, "2/1m,fixed-window", redlimit.FixedWindow}, // 2 left of 3, 1 of 2
		{redlimit.OutcomeGranted, "2/1m,fixed-window", redlimit.FixedWindow},
		{redlimit.OutcomeRefused, "2/1m,fixed-window", redlimit.FixedWindow},
	} {
		if _, err := k.TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		e := rec.one(t)
		name, alg := e.Limit()
		if e.Outcome != want.out || !e.Policy || e.Name != "per-user" || e.Key != "alice" || len(e.Limits) != 2 || name != want.limit || alg != want.alg {
			t.Errorf("call %d: %+v, limit %q %q; want %v by %s %s", i, e, name, alg, want.out, want.limit, want.alg)
		}
	}
	if got := len(rec2.take()); got != 3 {
		t.Errorf("the second observer saw %d events; want 3", got)
	}
	if _, err := k.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if e := rec.one(t); e.Op != redlimit.OpStatus || e.Outcome != redlimit.OutcomeGranted || len(e.Limits) != 2 {
		t.Errorf("status: %+v", e)
	}
	if _, err := k.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if e := rec.one(t); e.Op != redlimit.OpRelease || e.Permits != 1 {
		t.Errorf("release: %+v", e)
	}
	if err := p.SetLimits(ctx, []redlimit.Config{redlimit.PerSecond(5)}); err != nil {
		t.Fatal(err)
	}
	if e := rec.one(t); e.Op != redlimit.OpSet || e.Outcome != redlimit.OutcomeGranted || e.Name != "per-user" {
		t.Errorf("set: %+v", e)
	}
	if _, err := redlimit.New(memstore.New(), "x", redlimit.WithObserver(nil)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("WithObserver(nil): %v; want ErrInvalidArgument", err)
	}
}

// logLines decodes a JSON handler's lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		lines = append(lines, m)
	}
	buf.Reset()
	return lines
}

// TestStoreDown: with Redis stopped, an observer sees degraded answers
// and store errors by kind, and the log says so once a minute per kind,
// counting the lines it held back.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	var buf bytes.Buffer
	lg := slog.New(slog.NewJSONHandler(&buf, nil))
	rec := &recorder{}
	cfg := redlimit.PerSecond(5)
	opts := []redlimit.Option{redlimit.WithConfig(cfg), redlimit.WithClock(clk), redlimit.WithLogger(lg), redlimit.WithObserver(rec)}
	closed, _ := redlimit.New(s, "down", opts...)
	open, _ := redlimit.New(s, "down", append(opts, redlimit.WithFailurePolicy(redlimit.FailOpen))...)

	for range 3 {
		if _, err := closed.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrUnavailable) {
			t.Fatalf("fail closed: %v; want ErrUnavailable", err)
		}
		if r, err := open.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("fail open: %+v %v; want a grant", r, err)
		}
	}
	for i, e := range rec.take() {
		if i%2 == 0 && (e.Outcome != redlimit.OutcomeError || e.ErrKind != "unavailable" || !e.Degraded) {
			t.Errorf("fail closed: %+v; want an unavailable error", e)
		}
		if i%2 == 1 && (e.Outcome != redlimit.OutcomeGranted || !e.Degraded || e.Err != nil) {
			t.Errorf("fail open: %+v; want a degraded grant", e)
		}
	}
	lines := logLines(t, &buf)
	if len(lines) != 2 || lines[0]["level"] != "WARN" || lines[0]["kind"] != "unavailable" || lines[0]["limiter"] != "down" ||
		lines[1]["level"] != "WARN" || !strings.Contains(lines[1]["msg"].(string), "FailOpen answered") {
		t.Fatalf("log: %v; want one store error and one degraded answer", lines)
	}

	clk.Advance(time.Minute)
	closed.TryAcquire(ctx, 1)
	lines = logLines(t, &buf)
	if len(lines) != 1 || lines[0]["suppressed"] != 2.0 {
		t.Errorf("a minute later: %v; want one line, 2 suppressed", lines)
	}
}

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{redlimit.ErrCircuitOpen, "circuit_open"},
		{fmt.Errorf("x: %w", redlimit.ErrUnavailable), "unavailable"},
		{redlimit.ErrCorrupt, "corrupt"},
		{redlimit.ErrDenied, "denied"},
		{redlimit.ErrNotInitialized, "not_initialized"},
		{&redlimit.MismatchError{}, "config_mismatch"},
		{&redlimit.ArgumentError{Kind: redlimit.ErrPermitsExceedRate}, "invalid_argument"},
		{&redlimit.RefusalError{Reason: redlimit.ErrQueueFull}, "refused"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{errors.New("?"), "other"},
	} {
		if got := redlimit.ErrorKind(c.err); got != c.want {
			t.Errorf("ErrorKind(%v) = %q; want %q", c.err, got, c.want)
		}
	}
}

// BenchmarkObserved is BenchmarkUnobserved with an Observer that does
// nothing: the hook's own cost.
func BenchmarkObserved(b *testing.B) {
	benchObserver(b, redlimit.WithObserver(redlimit.ObserverFunc(func(context.Context, redlimit.Event) {})))
}

// TestStoreCorrupt: data redlimit did not write under a limiter's keys is
// an error the caller gets, the observer sees as "corrupt", and the log
// shows at Error: an operator must act, the store is not just away.
func TestStoreCorrupt(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var buf bytes.Buffer
	rec := &recorder{}
	l, err := redlimit.New(s, "bad", redlimit.WithConfig(redlimit.PerSecond(5)), redlimit.WithObserver(rec),
		redlimit.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rec.take()
	logKey := s.Prefix() + "{bad}:log"
	rdb.Del(ctx, logKey)
	rdb.HSet(ctx, logKey, "x", "1") // a hash where the sliding log's sorted set belongs
	if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("%v; want ErrCorrupt", err)
	}
	if e := rec.one(t); e.Outcome != redlimit.OutcomeError || e.ErrKind != "corrupt" || e.Degraded {
		t.Errorf("%+v; want a corrupt error, not degraded", e)
	}
	if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["level"] != "ERROR" || lines[0]["kind"] != "corrupt" {
		t.Errorf("log: %v; want one Error line of kind corrupt", lines)
	}
}

// TestPolicyStoreDown: a Policy on a stopped Redis answers by its failure
// policy as a Limiter does, and its observer and log say so.
func TestPolicyStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Stop()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	var buf bytes.Buffer
	lg := slog.New(slog.NewJSONHandler(&buf, nil))
	rec := &recorder{}
	limits := []redlimit.Config{redlimit.PerSecond(5), redlimit.PerMinute(100)}
	opts := []redlimit.Option{redlimit.WithClock(clk), redlimit.WithLogger(lg), redlimit.WithObserver(rec)}
	closed, err := redlimit.NewPolicy(s, "down", limits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	open, err := redlimit.NewPolicy(s, "down", limits, append(opts, redlimit.WithFailurePolicy(redlimit.FailOpen))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Key("alice").TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrUnavailable) {
		t.Fatalf("fail closed: %v; want ErrUnavailable", err)
	}
	if r, err := open.Key("alice").TryAcquire(ctx, 1); err != nil || !r.Allowed || !r.Degraded {
		t.Fatalf("fail open: %+v %v; want a degraded grant", r, err)
	}
	es := rec.take()
	if len(es) != 2 || es[0].Outcome != redlimit.OutcomeError || es[0].ErrKind != "unavailable" ||
		es[1].Outcome != redlimit.OutcomeGranted || !es[1].Degraded {
		t.Errorf("events: %+v; want an unavailable error, then a degraded grant", es)
	}
	lines := logLines(t, &buf)
	if len(lines) != 2 || lines[0]["kind"] != "unavailable" || !strings.Contains(lines[1]["msg"].(string), "FailOpen answered") {
		t.Errorf("log: %v; want one store error and one degraded answer", lines)
	}
}
