package redissonstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
)

// checkKey validates a key as every store does.
func checkKey(key redlimit.Key) error {
	return key.Validate()
}

// checkPermits validates n, including Redisson's 4-byte limit per grant.
func checkPermits(n int64) error {
	if err := (redlimit.Config{}).ValidatePermits(n); err != nil {
		return err
	}
	if n > MaxPermits {
		return &redlimit.ArgumentError{Arg: "permits", Value: fmt.Sprint(n), Reason: fmt.Sprintf("exceed %d, the most one Redisson grant can record (a 4-byte unsigned int)", MaxPermits), Kind: redlimit.ErrInvalidArgument}
	}
	return nil
}

// Acquire implements redlimit.Store the way Redisson's tryAcquire does: one
// script run decides at the store clock's time; a refusal carries the delay
// Redisson would wait before trying again. With maxWait != 0 the store waits
// as Redisson's acquire and tryAcquire(timeout) do: it sleeps that delay on
// its clock and tries again, as long as the next try falls within maxWait
// (negative: no bound) and ctx lasts. A delay that would end past maxWait
// refuses at once. Nothing is reserved, so a grant is always made at the
// time of the try that won it: the Decision's Wait is 0 and At is Now.
func (s *Store) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if err := checkKey(key); err != nil {
		return redlimit.Decision{}, err
	}
	if err := checkPermits(n); err != nil {
		return redlimit.Decision{}, err
	}
	start := s.clock.Now()
	for {
		d, err := s.tryOnce(ctx, key, known, n)
		if err != nil {
			return redlimit.Decision{}, err
		}
		if s.hook != nil {
			s.hook(attempt{granted: d.Granted, delay: d.Wait, now: d.Now})
		}
		if d.Granted || maxWait == 0 {
			return d, nil
		}
		if maxWait > 0 && s.clock.Now().Sub(start)+d.Wait > maxWait {
			return d, nil
		}
		fired, stop := s.clock.NewTimer(d.Wait)
		select {
		case <-fired:
		case <-ctx.Done():
			stop()
			return redlimit.Decision{}, ctx.Err()
		}
	}
}

// tryOnce runs tryacquire.lua once (again, with fresh members, in the
// unlikely case that all four candidates are taken).
func (s *Store) tryOnce(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64) (redlimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		return redlimit.Decision{}, err
	}
	for try := 0; try < 8; try++ {
		now := s.nowMillis()
		args := append([]any{n, now}, s.randomParts()...)
		args = append(args, s.knownArgs(known)...)
		r, err := s.run(ctx, tryAcquireScript, key.Name, scriptKeys(key.Name, s.client(key)), args, 3)
		if err != nil {
			return redlimit.Decision{}, err
		}
		switch r.code {
		case -4:
			continue
		case -2:
			return redlimit.Decision{}, r.cfg.ValidatePermits(n)
		case 0, 1:
		default:
			return redlimit.Decision{}, fmt.Errorf("%w: script reply code %d", redlimit.ErrCorrupt, r.code)
		}
		t := time.UnixMilli(r.c)
		d := redlimit.Decision{Granted: r.code == 1, Remaining: max(r.a, 0), Now: t, Config: r.cfg}
		if d.Granted {
			d.At = t
		} else {
			d.Wait = max(time.Duration(r.b)*time.Millisecond, time.Millisecond)
		}
		return d, nil
	}
	return redlimit.Decision{}, fmt.Errorf("%w: Redisson rate limiter %q: eight rounds of random members all collided", redlimit.ErrCorrupt, key.Name)
}

// Cancel implements redlimit.Store: it hands back up to n permits of grants
// made at instant at (the store never reserves, so Limiter does not call it;
// it undoes grants of a given instant). Redisson reads the result as its own.
func (s *Store) Cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	return s.giveBack(ctx, key, known, n, fmt.Sprint(at.UnixMilli()))
}

// Release implements redlimit.Store: it hands back up to n permits granted
// in the current window and no later than upTo (newest first; Overall:
// whichever client made them; zero upTo: no bound) and returns how many.
// Each permit leaves the grant log and returns to the counter, so Redisson
// (whose own release() is recent, 2025-26) reads the state as if those
// grants had never been made.
func (s *Store) Release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if upTo.IsZero() {
		return s.giveBack(ctx, key, known, n, "")
	}
	return s.giveBack(ctx, key, known, n, fmt.Sprint("<=", max(upTo.UnixMilli(), 0)))
}

func (s *Store) giveBack(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, at string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	args := append([]any{n, s.nowMillis(), at}, s.knownArgs(known)...)
	r, err := s.run(ctx, giveBackScript, key.Name, scriptKeys(key.Name, s.client(key)), args, 1)
	if err != nil {
		return 0, err
	}
	return r.a, nil
}

// Available implements redlimit.Store with Redisson's availablePermits: the
// counter after the grants that aged out returned their permits.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	if err := checkKey(key); err != nil {
		return 0, redlimit.Config{}, err
	}
	args := append([]any{s.nowMillis()}, s.knownArgs(known)...)
	r, err := s.run(ctx, availableScript, key.Name, scriptKeys(key.Name, s.client(key)), args, 1)
	if err != nil {
		return 0, redlimit.Config{}, err
	}
	return max(r.a, 0), r.cfg, nil
}
