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

// TestContract runs the Limiter's contract cases (storetest.Contract) on
// Redisson's layouts; Redisson's limiter is a sliding log only.
func TestContract(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	bothLayouts(t, func(t *testing.T, layout Layout) {
		storetest.Contract(t, func(t *testing.T, clk *clock.Fake) redlimit.Store {
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			s, err := New(rdb, WithLayout(layout), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, redlimit.SlidingLog)
	})
}

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
