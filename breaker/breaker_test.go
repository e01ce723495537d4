package breaker_test

import (
	"context"
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
	"github.com/redlimit/redlimit/breaker"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/redisstore"
)

// deadlines is a store that notes the deadline of the last Acquire it was
// given.
type deadlines struct {
	redlimit.Store
	mu   sync.Mutex
	last time.Time
}

func (d *deadlines) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	d.mu.Lock()
	d.last, _ = ctx.Deadline()
	d.mu.Unlock()
	return d.Store.Acquire(ctx, key, known, n, maxWait)
}

func (d *deadlines) lastDeadline() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// answer is one TryAcquire of the load.
type answer struct {
	start    time.Time
	took     time.Duration
	deadline time.Time
	r        redlimit.Result
	err      error
}

// The load: as many goroutines as a busy service, each call with a deadline.
const (
	workers  = 8
	deadline = 300 * time.Millisecond
	coolDown = time.Second
)

// outageFaults are done to a Redis the limiter uses; heal undoes them.
var outageFaults = []struct {
	name string
	// early: the fault is there before the first call (nothing connected).
	early        bool
	inject, heal func(t *testing.T, s *redistest.Server)
}{
	{"stall (SIGSTOP)", false,
		func(t *testing.T, s *redistest.Server) { s.Pause() },
		func(t *testing.T, s *redistest.Server) { s.Resume() }},
	{"kill (SIGKILL), restart empty", false,
		func(t *testing.T, s *redistest.Server) { s.Kill() },
		func(t *testing.T, s *redistest.Server) { s.Restart(t) }},
	{"refused port (down from the start)", true,
		func(t *testing.T, s *redistest.Server) { s.Kill() },
		func(t *testing.T, s *redistest.Server) { s.Restart(t) }},
}

// TestOutage: a limiter with a fallback, on a Redis store behind a breaker,
// is answered by the fallback through each fault: within the store's share
// of the deadline until the breaker opens, then without asking Redis; the
// probe closes the breaker once Redis is back, and Redis answers again.
// Every step waits on the breaker's state, never on time.
func TestOutage(t *testing.T) {
	for _, f := range outageFaults {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			defer rdb.Close()
			redis, err := redisstore.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			rs := &deadlines{Store: redis}
			fake := clock.NewFake(time.Unix(1_000_000, 0))
			changes := make(chan breaker.State, 4)
			closed := make(chan struct{})
			var openedAt time.Time // written before changes is sent on
			var logs syncbuf.Buffer
			b, err := breaker.New(rs, breaker.Settings{
				CoolDown: coolDown, ProbeTimeout: 100 * time.Millisecond, Clock: fake, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				OnChange: func(s breaker.State) {
					if s == breaker.Open {
						openedAt = time.Now()
					}
					changes <- s
					if s == breaker.Closed {
						close(closed)
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// The fallback's half of 100 is 50 grants: more calls than that
			// are made during the outage, so its limit is seen to hold.
			cfg := redlimit.PerInterval(100, time.Hour)
			l, _ := redlimit.New(b, "outage", redlimit.WithConfig(cfg), redlimit.WithFallback(memstore.New(), 0.5))
			call := func() answer {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				r, err := l.TryAcquire(ctx, 1)
				dl, _ := ctx.Deadline()
				return answer{start, time.Since(start), dl, r, err}
			}
			// Where Redis is up and its answer is the one checked, the
			// call has no deadline: the store's share of one would be a
			// time limit that a loaded machine may miss, and the
			// fallback would answer instead.
			callRedis := func() (redlimit.Result, error) { return l.TryAcquire(context.Background(), 1) }
			if f.early {
				f.inject(t, srv)
			} else if r, err := callRedis(); err != nil || !r.Allowed || r.Degraded {
				t.Fatalf("Redis up: %+v, %v", r, err)
			}
			if !f.early {
				f.inject(t, srv)
			}
			// Until the breaker opens: every call is still answered, by
			// the fallback, once the store's share of its deadline is spent.
			first := call()
			if !rs.lastDeadline().Before(first.deadline) {
				t.Errorf("the store was given the caller's whole deadline: the fallback would come too late")
			}
			loaded := time.Now() // the switch over is timed from here: 8 callers
			var mu sync.Mutex
			before := []answer{first}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						a := call()
						mu.Lock()
						before = append(before, a)
						mu.Unlock()
					}
				}()
			}
			if s := <-changes; s != breaker.Open {
				t.Fatalf("first switch to %v; want open", s)
			}
			switchOver := openedAt.Sub(loaded)
			close(stop)
			wg.Wait()
			// Calls that began before the breaker opened asked the store;
			// those after it did not.
			var after []answer
			for _, a := range before {
				if !a.start.Before(openedAt) {
					after = append(after, a)
				}
			}
			before = slices.DeleteFunc(before, func(a answer) bool { return !a.start.Before(openedAt) })

			// Open: the store is not asked; the fallback answers at once.
			rejected := b.Stats().Rejected
			for i := 0; i < 100; i++ {
				after = append(after, call())
			}
			if got := b.Stats().Rejected - rejected; got != 100 {
				t.Errorf("with the breaker open, %d of 100 calls were kept from the store", got)
			}
			grants := 0
			for _, a := range append(slices.Clone(before), after...) {
				if a.err != nil || !a.r.Degraded {
					t.Fatalf("during the outage: %+v, %v; want an answer of the fallback", a.r, a.err)
				}
				if a.r.Allowed {
					grants++
				}
			}
			if grants != 50 {
				t.Errorf("the fallback granted %d; want its share of the limit, 50", grants)
			}

			// FailOpen without a fallback gives the store only its share
			// of the deadline too, on the store without a breaker.
			rec := &deadlines{Store: rs}
			open, _ := redlimit.New(rec, "outage-open", redlimit.WithConfig(cfg), redlimit.WithFailurePolicy(redlimit.FailOpen))
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			r, err := open.TryAcquire(ctx, 1)
			callerDeadline, _ := ctx.Deadline()
			if err != nil || !r.Allowed || !r.Degraded || !rec.lastDeadline().Before(callerDeadline) {
				t.Errorf("FailOpen: %+v, %v, store's deadline %v before the caller's; want a degraded grant, the store given less than the caller's time",
					r, err, callerDeadline.Sub(rec.lastDeadline()))
			}
			cancel()

			// Still down: a probe finds nothing, the breaker stays open and
			// probes again after another cool-down.
			fake.WaitForTimers(1, nil)
			fake.Advance(coolDown)
			fake.WaitForTimers(1, nil)
			if st := b.Stats(); st.Probes != 1 || st.ProbesFailed != 1 || b.State() != breaker.Open {
				t.Errorf("a probe of the store still down: %+v, state %v; want one failed probe, open", st, b.State())
			}

			// Healed: the probe, every cool-down, finds Redis back.
			f.heal(t, srv)
			healed := time.Now()
			for fake.WaitForTimers(1, closed) {
				fake.Advance(coolDown)
			}
			switchBack := time.Since(healed)
			if r, err := callRedis(); err != nil || !r.Allowed || r.Degraded {
				t.Errorf("after the breaker closed: %+v, %v; want Redis's grant", r, err)
			}
			st := b.Stats()
			if st.Opens != 1 || st.Closes != 1 || b.State() != breaker.Closed {
				t.Errorf("stats %+v, state %v; want one open, one close", st, b.State())
			}
			if log := logs.String(); !strings.Contains(log, "circuit breaker open") || !strings.Contains(log, "circuit breaker closed") {
				t.Errorf("switches not logged: %q", log)
			}
			t.Logf("FIGURES | %s | before open: %d calls by the fallback, latency %s | open: %d calls by the fallback, latency %s | switch over %v (%d callers) | switch back %v after the cool-down (%d probes in all) | fallback granted %d",
				f.name, len(before), latencies(before), len(after), latencies(after),
				round(switchOver), workers, round(switchBack), st.Probes, grants)
		})
	}
}

// latencies is "max X, p50 Y" of the answers.
func latencies(as []answer) string {
	if len(as) == 0 {
		return "-"
	}
	d := make([]time.Duration, len(as))
	for i, a := range as {
		d[i] = a.took
	}
	slices.Sort(d)
	return fmt.Sprintf("max %v, p50 %v", round(d[len(d)-1]), round(d[len(d)/2]))
}

// round keeps a figure's meaningful digits (never below zero).
func round(x time.Duration) time.Duration {
	if x > time.Millisecond {
		return x.Round(time.Millisecond)
	}
	return max(0, x.Round(time.Microsecond))
}

// TestErrCircuitOpen: the breaker's error is an ErrUnavailable, so that
// every failure policy answers it as an outage.
func TestErrCircuitOpen(t *testing.T) {
	if !errors.Is(redlimit.ErrCircuitOpen, redlimit.ErrUnavailable) {
		t.Fatal("ErrCircuitOpen is not an ErrUnavailable")
	}
	if errors.Is(redlimit.ErrUnavailable, redlimit.ErrCircuitOpen) {
		t.Fatal("every ErrUnavailable is an ErrCircuitOpen")
	}
	for _, share := range []float64{0, -0.5, 1.5} {
		if _, err := redlimit.New(memstore.New(), "x", redlimit.WithStoreShare(share)); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("WithStoreShare(%v): %v; want ErrInvalidArgument", share, err)
		}
	}
}

// TestCountingRules: only failures in a row open the breaker; a caller's
// own cancellation is no failure, and any answer of the store starts the
// count again.
func TestCountingRules(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	rs, _ := redisstore.New(rdb)
	b, err := breaker.New(rs, breaker.Settings{Failures: 3, Clock: clock.NewFake(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	key, cfg := redlimit.Key{Name: "count", Client: "c"}, redlimit.PerSecond(10)
	timedOut := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := b.Acquire(ctx, key, cfg, 1, 0); !errors.Is(err, redlimit.ErrUnavailable) {
			t.Fatalf("stalled: %v; want ErrUnavailable", err)
		}
	}
	srv.Pause()
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Acquire(ctx, key, cfg, 1, 0); err == nil {
			t.Fatal("a cancelled call succeeded")
		}
	}
	if st := b.Stats(); st.Failures != 0 || b.State() != breaker.Closed {
		t.Fatalf("after the callers' own cancellations: %+v, %v; want no failure counted", st, b.State())
	}
	timedOut()
	timedOut()
	srv.Resume()
	if _, err := b.Acquire(context.Background(), key, cfg, 1, 0); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	timedOut()
	timedOut()
	if st := b.Stats(); st.Failures != 4 || b.State() != breaker.Closed {
		t.Fatalf("two failures, an answer, two failures: %+v, %v; want 4 counted, closed", st, b.State())
	}
	timedOut()
	if b.State() != breaker.Open {
		t.Fatalf("three failures in a row: %v; want open", b.State())
	}
	if _, err := b.Acquire(context.Background(), key, cfg, 1, 0); !errors.Is(err, redlimit.ErrCircuitOpen) || !errors.Is(err, redlimit.ErrUnavailable) {
		t.Fatalf("open: %v; want ErrCircuitOpen, an ErrUnavailable", err)
	}
	srv.Resume()
	if _, err := breaker.New(rs, breaker.Settings{Failures: -1}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("negative failures: %v", err)
	}
}
