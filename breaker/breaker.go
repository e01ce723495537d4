// Package breaker puts a circuit breaker in front of a redlimit.Store, so
// that a store known to be down is not waited on.
//
// While the store answers, calls pass through. After Settings.Failures
// consecutive calls fail with redlimit.ErrUnavailable (a refused
// connection, a timeout, a stalled server), the circuit opens: every call
// then returns redlimit.ErrCircuitOpen at once, without touching the store,
// and a Limiter answers it with its fallback store or its failure policy
// (redlimit.WithFallback, redlimit.WithFailurePolicy). In the background a
// probe asks the store every Settings.CoolDown; the first answer closes the
// circuit again. Each switch is logged (log/slog) and counted (Stats).
//
// The state belongs to the Store value: make one per store and create every
// Limiter on it, so that all of them learn of an outage from the first
// calls that meet it.
//
// It is not on by default. It works over any Store, so it is a decorator
// rather than a part of one store; and only a deployment knows whether
// answering every call at once from a fallback for a cool-down after a few
// failures suits it (a limiter without a fallback, failing closed, then
// refuses for the whole cool-down). What is on by default is cheaper and
// always safe: with a fallback or FailOpen, the store gets only part of
// each call's deadline (redlimit.WithStoreShare), so the fallback always
// has time to answer.
//
//	rs, _ := redisstore.New(rdb)
//	store, _ := breaker.New(rs, breaker.Settings{})
//	defer store.Close()
//	l, _ := redlimit.New(store, "api", redlimit.WithConfig(cfg),
//		redlimit.WithFallback(memstore.New(), 1.0/instances))
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// State is the circuit's state.
type State int32

const (
	// Closed: calls go to the store.
	Closed State = iota
	// Open: calls fail at once with redlimit.ErrCircuitOpen while a probe
	// waits for the store to answer again.
	Open
)

func (s State) String() string {
	if s == Open {
		return "open"
	}
	return "closed"
}

// Settings tune a breaker; the zero value of each field takes its default.
type Settings struct {
	// Failures is how many calls in a row must fail with ErrUnavailable to
	// open the circuit. A call that ran out of time counts; one whose
	// caller cancelled it does not, nor does any answer of the store
	// (ErrCorrupt, ErrNotInitialized, a refusal). Default: 5.
	Failures int
	// CoolDown is how long the circuit stays open before the first probe,
	// and between probes that find the store still down. Default: 1s.
	CoolDown time.Duration
	// ProbeTimeout bounds one probe. Default: 1s.
	ProbeTimeout time.Duration
	// Probe asks the store whether it answers; nil means reading the config
	// of a limiter named ProbeName, where any answer of the store
	// (including ErrNotInitialized and ErrCorrupt) counts as reached.
	Probe func(ctx context.Context, store redlimit.Store) error
	// Clock times the cool-down (tests pass a *clock.Fake). Default:
	// clock.Real.
	Clock clock.Clock
	// Logger receives a line for each switch. Default: slog.Default().
	Logger *slog.Logger
	// OnChange, when set, is called after each switch with the new state,
	// outside the breaker's lock (tests synchronise on it).
	OnChange func(State)
}

// ProbeName is the limiter whose config the default probe reads: it need
// not exist.
const ProbeName = "redlimit-breaker-probe"

// Stats are a breaker's counters since New.
type Stats struct {
	// Opens and Closes count the switches.
	Opens, Closes int64
	// Failures counts the calls that failed with ErrUnavailable while the
	// circuit was closed.
	Failures int64
	// Rejected counts the calls answered ErrCircuitOpen without the store.
	Rejected int64
	// Probes counts the probes made, ProbesFailed those that found the
	// store still down.
	Probes, ProbesFailed int64
}

// Store is a redlimit.Store behind a circuit breaker. It is safe for
// concurrent use.
type Store struct {
	store redlimit.Store
	set   Settings

	state atomic.Int32
	// fails counts consecutive failures while closed.
	fails atomic.Int64

	mu       sync.Mutex // serialises switches
	openedAt time.Time
	closed   chan struct{} // closed by Close: stops the probe
	stopped  bool
	probing  sync.WaitGroup

	opens, closes, failures, rejected, probes, probesFailed atomic.Int64
}

var _ redlimit.Store = (*Store)(nil)

// New returns store behind a circuit breaker tuned by set. Call Close when
// done with it, to stop a probe that may be running.
func New(store redlimit.Store, set Settings) (*Store, error) {
	if store == nil {
		return nil, &redlimit.ArgumentError{Arg: "store", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	if set.Failures < 0 || set.CoolDown < 0 || set.ProbeTimeout < 0 {
		return nil, &redlimit.ArgumentError{Arg: "breaker settings", Value: fmt.Sprintf("%+v", set), Reason: "must not be negative", Kind: redlimit.ErrInvalidArgument}
	}
	if set.Failures == 0 {
		set.Failures = 5
	}
	if set.CoolDown == 0 {
		set.CoolDown = time.Second
	}
	if set.ProbeTimeout == 0 {
		set.ProbeTimeout = time.Second
	}
	if set.Probe == nil {
		set.Probe = configProbe
	}
	if set.Clock == nil {
		set.Clock = clock.Real
	}
	if set.Logger == nil {
		set.Logger = slog.Default()
	}
	return &Store{store: store, set: set, closed: make(chan struct{})}, nil
}

// configProbe reads a config: any answer means the store is reachable.
func configProbe(ctx context.Context, store redlimit.Store) error {
	_, err := store.Config(ctx, ProbeName)
	if errors.Is(err, redlimit.ErrUnavailable) {
		return err
	}
	return nil
}

// State returns the circuit's state.
func (s *Store) State() State { return State(s.state.Load()) }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Opens: s.opens.Load(), Closes: s.closes.Load(), Failures: s.failures.Load(),
		Rejected: s.rejected.Load(), Probes: s.probes.Load(), ProbesFailed: s.probesFailed.Load(),
	}
}

// Unwrap returns the store behind the breaker.
func (s *Store) Unwrap() redlimit.Store { return s.store }

// Close stops the probe, if one runs, and waits for it. The breaker keeps
// its state; an open circuit stays open.
func (s *Store) Close() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.closed)
	}
	s.mu.Unlock()
	s.probing.Wait()
}

// admit reports whether a call may go to the store.
func (s *Store) admit() bool {
	if s.state.Load() == int32(Open) {
		s.rejected.Add(1)
		return false
	}
	return true
}

// record notes a call's outcome.
func (s *Store) record(ctx context.Context, err error) {
	if err == nil || !errors.Is(err, redlimit.ErrUnavailable) {
		if s.fails.Load() != 0 {
			s.fails.Store(0)
		}
		return
	}
	if errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled {
		return // the caller gave up: says nothing about the store
	}
	s.failures.Add(1)
	if s.fails.Add(1) >= int64(s.set.Failures) {
		s.open(err)
	}
}

// open switches to Open and starts the probe.
func (s *Store) open(cause error) {
	s.mu.Lock()
	if s.state.Load() == int32(Open) || s.stopped {
		s.mu.Unlock()
		return
	}
	s.state.Store(int32(Open))
	s.openedAt = s.set.Clock.Now()
	s.opens.Add(1)
	s.probing.Add(1)
	s.mu.Unlock()
	s.set.Logger.Warn("redlimit: store unavailable, circuit breaker open",
		"failures", s.set.Failures, "cool_down", s.set.CoolDown, "err", cause)
	if s.set.OnChange != nil {
		s.set.OnChange(Open)
	}
	go s.probe()
}

// probe asks the store every cool-down until it answers, then closes the
// circuit.
func (s *Store) probe() {
	defer s.probing.Done()
	for {
		fired, stop := s.set.Clock.NewTimer(s.set.CoolDown)
		select {
		case <-fired:
		case <-s.closed:
			stop()
			return
		}
		s.probes.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), s.set.ProbeTimeout)
		err := s.set.Probe(ctx, s.store)
		cancel()
		if err != nil {
			s.probesFailed.Add(1)
			continue
		}
		s.mu.Lock()
		s.fails.Store(0)
		s.state.Store(int32(Closed))
		down := s.set.Clock.Now().Sub(s.openedAt)
		s.closes.Add(1)
		s.mu.Unlock()
		s.set.Logger.Info("redlimit: store reachable again, circuit breaker closed", "open_for", down)
		if s.set.OnChange != nil {
			s.set.OnChange(Closed)
		}
		return
	}
}

// SetConfig implements redlimit.Store.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if !s.admit() {
		return redlimit.Config{}, false, redlimit.ErrCircuitOpen
	}
	c, set, err := s.store.SetConfig(ctx, name, cfg, how)
	s.record(ctx, err)
	return c, set, err
}

// Config implements redlimit.Store.
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	if !s.admit() {
		return redlimit.Config{}, redlimit.ErrCircuitOpen
	}
	c, err := s.store.Config(ctx, name)
	s.record(ctx, err)
	return c, err
}

// Acquire implements redlimit.Store.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if !s.admit() {
		return redlimit.Decision{}, redlimit.ErrCircuitOpen
	}
	d, err := s.store.Acquire(ctx, key, known, n, maxWait)
	s.record(ctx, err)
	return d, err
}

// Cancel implements redlimit.Store.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	if !s.admit() {
		return 0, redlimit.ErrCircuitOpen
	}
	v, err := s.store.Cancel(ctx, key, known, at, n)
	s.record(ctx, err)
	return v, err
}

// Release implements redlimit.Store.
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if !s.admit() {
		return 0, redlimit.ErrCircuitOpen
	}
	v, err := s.store.Release(ctx, key, known, n, upTo)
	s.record(ctx, err)
	return v, err
}

// Available implements redlimit.Store.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	if !s.admit() {
		return 0, redlimit.Config{}, redlimit.ErrCircuitOpen
	}
	v, c, err := s.store.Available(ctx, key, known)
	s.record(ctx, err)
	return v, c, err
}

// Delete implements redlimit.Store.
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	if !s.admit() {
		return false, redlimit.ErrCircuitOpen
	}
	v, err := s.store.Delete(ctx, name)
	s.record(ctx, err)
	return v, err
}

// Expire implements redlimit.Store.
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if !s.admit() {
		return false, redlimit.ErrCircuitOpen
	}
	v, err := s.store.Expire(ctx, name, ttl)
	s.record(ctx, err)
	return v, err
}

// ClearExpire implements redlimit.Store.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	if !s.admit() {
		return false, redlimit.ErrCircuitOpen
	}
	v, err := s.store.ClearExpire(ctx, name)
	s.record(ctx, err)
	return v, err
}
