package redissonstore

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestConformance runs the conformance suite (storetest.Run) on both of
// Redisson's layouts: every case that applies to Redisson's limiter (go
// test -v names the others and what they need). It lacks, by its design
// (the package doc says why):
//
//   - every algorithm but the sliding log;
//   - Reservations: waiters poll, as Redisson's do;
//   - ExactRetryAfter: a refusal's delay is Redisson's, the nearest
//     grant's age-out whatever the permits asked (legacy) or 3 ms more
//     than the exact wait (current);
//   - MonotonicTime: time is each caller's clock, as Redisson's;
//   - ConfigEpochs: Redisson's config hash holds no epoch;
//   - ResetsEveryClient: a reset reaches the Overall state and the
//     caller's own PER_CLIENT keys, as Redisson's setRate does;
//   - DistinctNames: the keys are Redisson's, {NAME}:value for NAME and
//     NAME:value for a name holding braces, so "a" and "{a}" share a state.
func TestConformance(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	bothLayouts(t, func(t *testing.T, layout Layout) {
		storetest.Run(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := New(rdb, WithLayout(layout), WithTimeSource(clk))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, redissonCapabilities)
	})
}

// redissonCapabilities is what Redisson's limiter does of the suite's
// capabilities (TestConformance's doc says what it lacks).
var redissonCapabilities = storetest.Capabilities{Algorithms: []redlimit.Algorithm{redlimit.SlidingLog}}

// TestUnsafeClient: like redisstore.New, New refuses a client that retries
// commands unless AllowRetries is given.
func TestUnsafeClient(t *testing.T) {
	retrying := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer retrying.Close()
	if _, err := New(retrying); !errors.Is(err, redisstore.ErrUnsafeClient) || !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("New(default client) = %v; want ErrUnsafeClient", err)
	}
	if _, err := New(retrying, AllowRetries()); err != nil {
		t.Fatalf("New with AllowRetries: %v", err)
	}
	safe := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer safe.Close()
	if _, err := New(safe); err != nil {
		t.Fatalf("New(MaxRetries -1): %v", err)
	}
}
