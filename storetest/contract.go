package storetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
)

// The cases of the Limiter's contract with its callers:
//
//   - Acquire returns a nil error if and only if it was granted; a grant
//     that could come only after the context's deadline is refused at once
//     with ErrWouldExceedDeadline, a full leaky-bucket queue with
//     ErrQueueFull, both ErrRefused and neither context.DeadlineExceeded;
//     TryAcquireWait reports the same refusals as Results.
//   - Release gives back only what the calling Limiter was granted and
//     still holds; on an Overall sliding log it never frees another
//     client's newer grant in place of its own.
//   - A config deployed with WithConfig that differs from the stored one
//     is counted and logged (drift), or stored once (WithConfigOverride).

// contractConfig is a limit of 2 permits an hour under algorithm a: once
// taken, the next grant is at least half an hour away (fixed window: until
// the hour ends), far beyond any deadline the cases set.
func (e *env) contractConfig(a redlimit.Algorithm) redlimit.Config {
	e.t.Helper()
	return e.algorithmCase(a).limit(2, time.Hour, 2)
}

// contractDeadline is the deadline of the cases' bounded calls: real time
// (contexts know no other), far shorter than the fake clock's waits and far
// longer than any call takes.
const contractDeadline = time.Minute

// exhaust takes single permits until one is refused and returns that
// refusal.
func (e *env) exhaust(l *redlimit.Limiter) redlimit.Result {
	e.t.Helper()
	for i := 0; i < 100; i++ {
		if r := e.try(l, 1); !r.Allowed {
			return r
		}
	}
	e.t.Fatal("100 permits granted at once")
	return redlimit.Result{}
}

// testAcquirePastDeadline: when the store can grant only after ctx's
// deadline, Acquire refuses at once with a typed error and the retry-after,
// sleeps on nothing and reserves nothing; TryAcquireWait answers the same
// refusal as a Result.
func testAcquirePastDeadline(e *env, a redlimit.Algorithm) {
	cfg := e.contractConfig(a)
	l := e.configured("deadline", cfg)
	refused := e.exhaust(l)
	if refused.RetryAfter <= contractDeadline {
		e.t.Fatalf("refusal %+v: want a retry-after beyond %v", refused, contractDeadline)
	}
	ctx, cancel := context.WithTimeout(e.ctx, contractDeadline)
	defer cancel()
	r, err := l.Acquire(ctx, 1)
	var re *redlimit.RefusalError
	switch {
	case err == nil:
		e.t.Fatalf("Acquire past the deadline = %+v with a nil error; want ErrWouldExceedDeadline", r)
	case !errors.Is(err, redlimit.ErrWouldExceedDeadline) || !errors.Is(err, redlimit.ErrRefused) || !errors.As(err, &re):
		e.t.Fatalf("Acquire past the deadline: %v; want a *RefusalError matching ErrWouldExceedDeadline and ErrRefused", err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redlimit.ErrQueueFull) || errors.Is(err, redlimit.ErrUnavailable):
		e.t.Fatalf("Acquire past the deadline: %v matches a timeout, a full queue or a store failure", err)
	}
	if r.Allowed || r.RetryAfter != refused.RetryAfter || re.RetryAfter != refused.RetryAfter {
		e.t.Fatalf("Acquire past the deadline = %+v, %v; want refused, retry after %v like TryAcquire", r, err, refused.RetryAfter)
	}
	if n := e.clock.Timers(); n != 0 {
		e.t.Fatalf("a refused Acquire left %d sleepers on the clock", n)
	}
	// Nothing was reserved: at the retry-after a permit is granted at once.
	w, err := l.TryAcquireWait(e.ctx, 1, contractDeadline)
	if err != nil || w.Allowed || w.RetryAfter != refused.RetryAfter {
		e.t.Fatalf("TryAcquireWait(%v) = %+v, %v; want a refusal as a Result, retry after %v", contractDeadline, w, err, refused.RetryAfter)
	}
	e.clock.Advance(refused.RetryAfter)
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("at the retry-after: %+v; a refused Acquire held a reservation", r)
	}
	// A grant is a nil error.
	e.clock.Advance(time.Hour)
	if r, err := l.Acquire(ctx, 1); err != nil || !r.Allowed {
		e.t.Fatalf("Acquire with permits free = %+v, %v", r, err)
	}
}

// testAcquireQueueFull: a leaky bucket whose queue has no room refuses
// Acquire at once with ErrQueueFull, with or without a deadline; the other
// algorithms have no queue and reserve instead.
func testAcquireQueueFull(e *env, a redlimit.Algorithm) {
	cfg := e.contractConfig(a)
	l := e.configured("full", cfg)
	e.exhaust(l)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	// One waiter fills the queue (capacity 2: one granted, one waiting).
	waiter := make(chan error, 2)
	go func() {
		_, err := e.limiter("full").Acquire(ctx, 1)
		waiter <- err
	}()
	e.waitTimers(1)
	if cfg.Algorithm != redlimit.LeakyBucket {
		// No queue to fill: the next caller waits its turn too.
		go func() {
			_, err := e.limiter("full").Acquire(ctx, 1)
			waiter <- err
		}()
		e.waitTimers(2)
		cancel()
		for i := 0; i < 2; i++ {
			if err := <-waiter; !errors.Is(err, context.Canceled) {
				e.t.Fatalf("cancelled waiter: %v", err)
			}
		}
		return
	}
	bounded, cancelBounded := context.WithTimeout(e.ctx, contractDeadline)
	defer cancelBounded()
	for _, c := range []context.Context{e.ctx, bounded} {
		r, err := l.Acquire(c, 1)
		var re *redlimit.RefusalError
		if err == nil || !errors.Is(err, redlimit.ErrQueueFull) || !errors.Is(err, redlimit.ErrRefused) || !errors.As(err, &re) {
			e.t.Fatalf("Acquire on a full queue = %+v, %v; want a *RefusalError matching ErrQueueFull", r, err)
		}
		if errors.Is(err, redlimit.ErrWouldExceedDeadline) || errors.Is(err, context.DeadlineExceeded) {
			e.t.Fatalf("Acquire on a full queue: %v also matches a deadline", err)
		}
		if r.Allowed || r.RetryAfter <= 0 || re.RetryAfter != r.RetryAfter {
			e.t.Fatalf("Acquire on a full queue = %+v, %v; want refused with a retry-after", r, err)
		}
	}
	if n := e.clock.Timers(); n != 1 {
		e.t.Fatalf("%d sleepers on the clock; want the one waiter", n)
	}
	if r, err := l.TryAcquireWait(e.ctx, 1, 24*time.Hour); err != nil || r.Allowed {
		e.t.Fatalf("TryAcquireWait on a full queue = %+v, %v; want a refusal as a Result", r, err)
	}
	cancel()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		e.t.Fatalf("cancelled waiter: %v", err)
	}
}

// testReleaseKeepsOthersGrants: on an Overall sliding log, a Release
// removes no entry newer than the grants it hands back, which may be
// another client's grant, used: no window of the interval then admits more
// than the rate, counted as users see it (the grants made and not handed
// back). Other algorithms hand back interchangeable permits.
func testReleaseKeepsOthersGrants(e *env) {
	try := func(who string, l *redlimit.Limiter, want bool) {
		e.t.Helper()
		if r := e.try(l, 1); r.Allowed != want {
			e.t.Fatalf("%s: allowed %v, want %v (%+v)", who, r.Allowed, want, r)
		}
	}
	// 2 a minute: a at 0:00, b at 0:30, a hands its grant back at 0:31, c
	// takes it. b's grant of 0:30 still counts at 1:00, when a's would have
	// left the window: d is refused, or [0:30, 1:30) holds b, c and d.
	a := e.configured("release-others", redlimit.PerInterval(2, time.Minute))
	b, c, d := e.limiter("release-others"), e.limiter("release-others"), e.limiter("release-others")
	try("a", a, true)
	e.clock.Advance(30 * time.Second)
	try("b", b, true)
	e.clock.Advance(time.Second)
	if got, err := a.Release(e.ctx, 1); err != nil || got != 1 {
		e.t.Fatalf("a.Release(1) = %d, %v; want 1", got, err)
	}
	try("c", c, true)
	try("c again", c, false)
	e.clock.Advance(29 * time.Second)
	try("d", d, false)
	e.clock.Advance(30 * time.Second)
	try("d after b's grant left", d, true)

	// 3 a minute: a at 0:00 and 0:40, b at 0:30; a hands back both at
	// 0:41, each in place of its own entry (a single bound, a's newest,
	// would free b's 0:30 and leave a's 0:00 to free another at 1:00):
	// [0:30, 1:30) holds b's grant and exactly the 2 handed back.
	start := e.clock.Now()
	a = e.configured("release-others-2", redlimit.PerInterval(3, time.Minute))
	b = e.limiter("release-others-2")
	try("a", a, true)
	e.clock.Advance(30 * time.Second)
	try("b", b, true)
	e.clock.Advance(10 * time.Second)
	try("a", a, true)
	e.clock.Advance(time.Second)
	if got, err := a.Release(e.ctx, 2); err != nil || got != 2 {
		e.t.Fatalf("a.Release(2) = %d, %v; want 2", got, err)
	}
	others := e.limiter("release-others-2")
	used := int64(1)                                     // b's
	for _, at := range []time.Duration{41, 60, 71, 89} { // seconds
		e.clock.Advance(start.Add(at * time.Second).Sub(e.clock.Now()))
		for i := 0; i < 10 && e.try(others, 1).Allowed; i++ {
			used++
		}
	}
	if used != 3 {
		e.t.Fatalf("[0:30, 1:30) holds %d grants used; want 3, the rate", used)
	}
}

// testReleaseOnlyOwn: Release gives back only what the calling Limiter was
// granted and still holds. Another client, or the same client ID after a
// restart (a new Limiter), releases nothing, so nobody takes more than the
// rate in an interval; a grant older than its hold span is no longer held.
func testReleaseOnlyOwn(e *env, alg redlimit.Algorithm) {
	cfg := e.algorithmCase(alg).limit(10, time.Minute, 10)
	a := e.configured("release-own", cfg)
	old := e.limiter("release-own")
	if r := e.try(old, 5); !r.Allowed {
		e.t.Fatalf("first grant refused: %+v", r)
	}
	e.clock.Advance(2 * cfg.Interval) // old's grant counts no longer, under every algorithm
	if r := e.try(a, 10); !r.Allowed {
		e.t.Fatalf("a: 10 refused: %+v", r)
	}
	release := func(who string, l *redlimit.Limiter, n, want int64) {
		e.t.Helper()
		if got, err := l.Release(e.ctx, n); err != nil || got != want {
			e.t.Fatalf("%s.Release(%d) = %d, %v; want %d", who, n, got, err, want)
		}
	}
	release("b (granted nothing)", e.limiter("release-own"), 10, 0)
	release("a after a restart", e.limiter("release-own", redlimit.WithClientID(a.ClientID())), 10, 0)
	release("a client whose grant aged out", old, 10, 0)
	if r := e.try(a, 1); r.Allowed {
		e.t.Fatalf("a took an 11th permit in a minute of 10 after others' releases: %+v", r)
	}
	// a's own release still works (a leaky bucket's permits have left the
	// queue: nothing to hand back).
	back := int64(4)
	if cfg.Algorithm == redlimit.LeakyBucket {
		back = 0
	}
	release("a", a, 4, back)
	if back > 0 {
		if r := e.try(a, back); !r.Allowed {
			e.t.Fatalf("a: the %d permits it released were not granted again: %+v", back, r)
		}
		if r := e.try(a, 1); r.Allowed {
			e.t.Fatalf("a took more than the rate: %+v", r)
		}
	}
	if back > 0 {
		release("a, holding 10 again", a, 20, 10)
	}
}

// records is a slog.Handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	text := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool { text += " " + a.String(); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, text)
	r.mu.Unlock()
	return nil
}

func (r *records) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// scaledConfig is cfg with its counts multiplied by k.
func scaledConfig(cfg redlimit.Config, k int64) redlimit.Config {
	cfg.Rate *= k
	cfg.Burst *= k
	cfg.Capacity *= k
	return cfg
}

// testConfigDrift: a service whose WithConfig differs from the stored
// config works under the stored one, but visibly: every such call counts in
// Stats().ConfigDrift, and each distinct stored config is logged once at
// Warn, naming both.
func testConfigDrift(e *env, a redlimit.Algorithm) {
	cfg := e.contractConfig(a)
	deployed := scaledConfig(cfg, 5)
	admin := e.configured("drift", cfg)
	logs := &records{}
	svc := e.limiter("drift", redlimit.WithConfig(deployed), redlimit.WithLogger(slog.New(logs)))
	for i := 0; i < 3; i++ {
		e.try(svc, 1)
	}
	if st := svc.Stats(); st.ConfigDrift != 3 || !st.Drifting || st.ConfigOverrides != 0 {
		t := st
		e.t.Fatalf("Stats after 3 calls under another stored config = %+v; want ConfigDrift 3, Drifting", t)
	}
	if got, err := admin.Config(e.ctx); err != nil || !got.SameLimit(cfg) {
		e.t.Fatalf("stored config %v, %v: a drifting client changed it", got, err)
	}
	msgs := logs.all()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "WARN") || !strings.Contains(msgs[0], cfg.String()) || !strings.Contains(msgs[0], deployed.String()) {
		e.t.Fatalf("logged %q; want one Warn naming %v and %v", msgs, cfg, deployed)
	}
	// Another stored config is logged again, once.
	other := scaledConfig(cfg, 2)
	if err := admin.SetRate(e.ctx, other); err != nil {
		e.t.Fatal(err)
	}
	e.try(svc, 1)
	e.try(svc, 1)
	if msgs := logs.all(); len(msgs) != 2 || !strings.Contains(msgs[1], other.String()) {
		e.t.Fatalf("logged %q; want a second Warn naming %v", msgs, other)
	}
	// The deployed config stored: no drift any more.
	if err := admin.SetRate(e.ctx, deployed); err != nil {
		e.t.Fatal(err)
	}
	e.try(svc, 1)
	before := svc.Stats().ConfigDrift
	e.try(svc, 1)
	if st := svc.Stats(); st.Drifting || st.ConfigDrift != before || before != 5 {
		e.t.Fatalf("Stats once the deployed config is stored = %+v (before the last call %d); want 5 calls counted, no longer drifting", st, before)
	}
	// A Limiter without WithConfig has nothing to drift from.
	plain := e.limiter("drift")
	e.try(plain, 1)
	if st := plain.Stats(); st != (redlimit.Stats{}) {
		e.t.Fatalf("Stats without WithConfig = %+v", st)
	}
}

// testConfigOverride: WithConfigOverride makes a deploy's config win: the
// first call stores it, keeping the permits already granted, once.
func testConfigOverride(e *env, a redlimit.Algorithm) {
	cfg := e.contractConfig(a)
	deployed := scaledConfig(cfg, 5)
	admin := e.configured("override", cfg)
	if cfg.Algorithm != redlimit.LeakyBucket { // a leaky bucket spaces its grants
		e.try(admin, 1)
	}
	logs := &records{}
	svc := e.limiter("override", redlimit.WithConfig(deployed), redlimit.WithConfigOverride(), redlimit.WithLogger(slog.New(logs)))
	if r := e.try(svc, 1); !r.Allowed {
		e.t.Fatalf("first call of the deploy refused: %+v", r)
	}
	if got, err := admin.Config(e.ctx); err != nil || !got.SameLimit(deployed) {
		e.t.Fatalf("stored config after the deploy's first call %v, %v; want %v", got, err, deployed)
	}
	if st := svc.Stats(); st.ConfigOverrides != 1 || st.ConfigDrift != 0 || st.Drifting {
		e.t.Fatalf("Stats = %+v; want one override, no drift", st)
	}
	if msgs := logs.all(); len(msgs) != 1 || !strings.HasPrefix(msgs[0], "INFO") {
		e.t.Fatalf("logged %q; want the override, once", msgs)
	}
	// The permits granted under the old config still count (SetRate's
	// default, keep state): 2 of the deployed limit's MaxPermits are gone.
	// A token bucket keeps its tokens instead (a bigger burst is room that
	// refills, as x/time/rate's SetBurstAt).
	if cfg.Algorithm != redlimit.LeakyBucket {
		want := deployed.MaxPermits() - 2
		if cfg.Algorithm == redlimit.TokenBucket {
			want = min(cfg.MaxPermits()-2, deployed.MaxPermits())
		}
		if n := e.available(admin); n != want {
			e.t.Fatalf("available after the override = %d; want %d (the grants kept)", n, want)
		}
	}
	// A second instance of the deploy finds its config stored: no write.
	twin := e.limiter("override", redlimit.WithConfig(deployed), redlimit.WithConfigOverride())
	e.try(twin, 1)
	if st := twin.Stats(); st.ConfigOverrides != 0 {
		t := st
		e.t.Fatalf("second instance Stats = %+v; want no override", t)
	}
	// Once applied, an operator's later change stands (and drifts).
	if err := admin.SetRate(e.ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
	e.try(svc, 1)
	if got, err := admin.Config(e.ctx); err != nil || !got.SameLimit(cfg) {
		e.t.Fatalf("stored config %v, %v; the override ran twice", got, err)
	}
	if st := svc.Stats(); st.ConfigOverrides != 1 || st.ConfigDrift != 1 {
		e.t.Fatalf("Stats after an operator's change = %+v; want 1 override, 1 drifted call", st)
	}
	// It needs WithConfig.
	if _, err := redlimit.New(e.store, "override", redlimit.WithConfigOverride()); !errors.Is(err, redlimit.ErrInvalidArgument) {
		e.t.Fatalf("WithConfigOverride without WithConfig: %v", err)
	}
}
