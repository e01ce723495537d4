// Package memstore is the in-process Store: no server, the embedded default.
// It runs the algorithms' Go rules directly, under one mutex per limiter.
//
// Limiters in one memory store are shared by every Limiter opened on it in
// this process; PerClient limits are told apart by client ID as in Redis.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
	"github.com/redlimit/redlimit/clock"
)

// Store is an in-memory redlimit.Store. The zero value is not usable; call New.
type Store struct {
	clock clock.Clock
	// limiters maps a name to its *limiter: read without a lock on the hot
	// path, each limiter under its own mutex.
	limiters sync.Map
}

var _ redlimit.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read time from c (tests pass a *clock.Fake).
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns an empty memory store.
func New(opts ...Option) *Store {
	s := &Store{clock: clock.Real}
	for _, o := range opts {
		o(s)
	}
	return s
}

// limiter is one name's config and logs.
type limiter struct {
	mu        sync.Mutex
	cfg       redlimit.Config // Rate 0: none stored
	expiresAt int64           // ms; 0: the config does not expire
	logs      map[string]*log // "" holds the Overall log, else a client's
	swept     int64           // ms of the last sweep of idle logs
}

// log is one limit's state under the algorithm of its epoch.
type log struct {
	algorithm.State
	epoch int64
}

// newState returns a fresh state of algorithm a.
func newState(a redlimit.Algorithm) algorithm.State {
	switch a {
	case redlimit.FixedWindow:
		return new(fixedwindow.State)
	case redlimit.SlidingCounter:
		return new(slidingcounter.State)
	case redlimit.TokenBucket:
		return new(tokenbucket.State)
	case redlimit.LeakyBucket:
		return new(leakybucket.State)
	}
	return new(slidinglog.State)
}

func (s *Store) nowMS() int64 { return s.clock.Now().UnixMilli() }

// get returns the limiter for name, creating an empty one when create is set.
func (s *Store) get(name string, create bool) *limiter {
	if v, ok := s.limiters.Load(name); ok {
		return v.(*limiter)
	}
	if !create {
		return nil
	}
	v, _ := s.limiters.LoadOrStore(name, &limiter{logs: make(map[string]*log)})
	return v.(*limiter)
}

// drop forgets name if l is still its limiter.
func (s *Store) drop(name string, l *limiter) {
	s.limiters.CompareAndDelete(name, l)
}

// expireConfig forgets a config whose TTL has passed. l.mu is held.
func (l *limiter) expireConfig(now int64) {
	if l.expiresAt != 0 && now >= l.expiresAt {
		l.cfg, l.expiresAt = redlimit.Config{}, 0
	}
}

// config returns the stored config, restoring it from known when it was
// lost. l.mu is held.
func (l *limiter) config(now int64, known redlimit.Config) (redlimit.Config, error) {
	l.expireConfig(now)
	if l.cfg.Rate == 0 {
		if known.Rate == 0 {
			return redlimit.Config{}, redlimit.ErrNotInitialized
		}
		l.cfg = known
	}
	return l.cfg, nil
}

// log returns the log that key uses under cfg, emptied if it belongs to
// another epoch. l.mu is held.
func (l *limiter) log(cfg redlimit.Config, client string, now int64) *log {
	l.sweep(cfg, now)
	if cfg.Mode != redlimit.PerClient {
		client = ""
	}
	lg := l.logs[client]
	if lg == nil || lg.epoch != cfg.Epoch {
		lg = &log{State: newState(cfg.Algorithm), epoch: cfg.Epoch}
		l.logs[client] = lg
	}
	return lg
}

// sweep forgets logs that hold nothing that can change an answer (such as the
// log of a PerClient client that went away), at most once per interval. A log
// of another epoch is kept until then, as Redis keeps its keys: a client that
// restores that epoch after a data loss finds it as Redis would.
func (l *limiter) sweep(cfg redlimit.Config, now int64) {
	lim := limitOf(cfg)
	if now-l.swept < lim.Interval {
		return
	}
	l.swept = now
	for id, lg := range l.logs {
		if lg.Forgotten(now) {
			delete(l.logs, id)
		}
	}
}

func limitOf(c redlimit.Config) algorithm.Limit {
	return algorithm.Limit{Rate: c.Rate, Interval: c.Interval.Milliseconds(), Burst: c.Burst, Capacity: c.Capacity}
}

func ms(t int64) time.Time { return time.UnixMilli(t) }

// SetConfig implements redlimit.Store.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if err := redlimit.ValidateName(name); err != nil {
		return redlimit.Config{}, false, err
	}
	c, err := cfg.Normalize()
	if err != nil {
		return redlimit.Config{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.Config{}, false, err
	}
	l := s.get(name, true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireConfig(s.nowMS())
	switch {
	case l.cfg.Rate != 0 && how == redlimit.SetIfAbsent:
		return l.cfg, false, nil
	case l.cfg.Rate != 0 && how == redlimit.SetKeepState && l.cfg.Algorithm == c.Algorithm:
		c.Epoch = l.cfg.Epoch // another algorithm's state means nothing: a new epoch
	default:
		c.Epoch = redlimit.NewEpoch()
	}
	l.cfg = c
	return c, true, nil
}

// Config implements redlimit.Store.
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	if err := redlimit.ValidateName(name); err != nil {
		return redlimit.Config{}, err
	}
	if err := ctx.Err(); err != nil {
		return redlimit.Config{}, err
	}
	l := s.get(name, false)
	if l == nil {
		return redlimit.Config{}, redlimit.ErrNotInitialized
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.config(s.nowMS(), redlimit.Config{})
}

// with runs f on key's log under the limiter's lock, after the checks every
// call shares.
func (s *Store) with(ctx context.Context, key redlimit.Key, known redlimit.Config, f func(lg *log, cfg redlimit.Config, now int64) error) (redlimit.Config, error) {
	if err := redlimit.ValidateName(key.Name); err != nil {
		return redlimit.Config{}, err
	}
	if known.Rate != 0 {
		var err error
		if known, err = known.Normalize(); err != nil {
			return redlimit.Config{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return redlimit.Config{}, err
	}
	l := s.get(key.Name, known.Rate != 0)
	if l == nil {
		return redlimit.Config{}, redlimit.ErrNotInitialized
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.nowMS()
	cfg, err := l.config(now, known)
	if err != nil {
		return redlimit.Config{}, err
	}
	return cfg, f(l.log(cfg, key.Client, now), cfg, now)
}

// Acquire implements redlimit.Store.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if err := redlimit.ValidatePermits(n); err != nil {
		return redlimit.Decision{}, err
	}
	var d algorithm.Decision
	cfg, err := s.with(ctx, key, known, func(lg *log, cfg redlimit.Config, now int64) error {
		if n > cfg.MaxPermits() {
			return redlimit.PermitsExceedRate(n, cfg.MaxPermits())
		}
		d = lg.Acquire(now, limitOf(cfg), n, waitMS(maxWait))
		return nil
	})
	if err != nil {
		return redlimit.Decision{}, err
	}
	out := redlimit.Decision{Granted: d.Granted, Remaining: d.Remaining, Wait: time.Duration(d.Wait) * time.Millisecond, Now: ms(d.Now), Config: cfg}
	if d.Granted {
		out.At = ms(d.At)
	}
	return out, nil
}

// waitMS turns a maximum wait into whole milliseconds (rounded down: a
// reservation never ends later than the caller allowed); negative is unlimited.
func waitMS(d time.Duration) int64 {
	if d < 0 {
		return algorithm.Unlimited
	}
	return d.Milliseconds()
}

// Cancel implements redlimit.Store.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	if n <= 0 {
		return 0, redlimit.ValidatePermits(n)
	}
	var got int64
	_, err := s.with(ctx, key, known, func(lg *log, cfg redlimit.Config, now int64) error {
		got = lg.Cancel(now, limitOf(cfg), at.UnixMilli(), n)
		return nil
	})
	return got, err
}

// Release implements redlimit.Store.
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64) (int64, error) {
	if n <= 0 {
		return 0, redlimit.ValidatePermits(n)
	}
	var got int64
	_, err := s.with(ctx, key, known, func(lg *log, cfg redlimit.Config, now int64) error {
		got = lg.Release(now, limitOf(cfg), n)
		return nil
	})
	return got, err
}

// Available implements redlimit.Store.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	var got int64
	cfg, err := s.with(ctx, key, known, func(lg *log, cfg redlimit.Config, now int64) error {
		got = lg.Available(now, limitOf(cfg))
		return nil
	})
	return got, cfg, err
}

// admin runs f on name's limiter under its lock, after the checks that
// Delete, Expire and ClearExpire share; a name never used reports false.
func (s *Store) admin(ctx context.Context, name string, f func(l *limiter, now int64) bool) (bool, error) {
	if err := redlimit.ValidateName(name); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l := s.get(name, false)
	if l == nil {
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.nowMS()
	l.expireConfig(now)
	return f(l, now), nil
}

// Delete implements redlimit.Store. As in Redis, the PerClient logs of other
// clients are left to expire on their own: they belong to the deleted
// config's epoch, which a new config never has.
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	return s.admin(ctx, name, func(l *limiter, now int64) bool {
		existed := l.cfg.Rate != 0
		l.cfg, l.expiresAt = redlimit.Config{}, 0
		delete(l.logs, "")
		if len(l.logs) == 0 {
			s.drop(name, l)
		}
		return existed
	})
}

// Expire implements redlimit.Store.
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if err := redlimit.ValidateTTL(ttl); err != nil {
		return false, err
	}
	return s.admin(ctx, name, func(l *limiter, now int64) bool {
		if l.cfg.Rate == 0 {
			return false
		}
		l.expiresAt = now + ttl.Milliseconds()
		return true
	})
}

// ClearExpire implements redlimit.Store.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	return s.admin(ctx, name, func(l *limiter, now int64) bool {
		had := l.expiresAt != 0
		l.expiresAt = 0
		return had
	})
}
