package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestSlidingLogListTTL: on Redis's clock, a sliding log's list lives as
// long as its state, one interval past its newest entry: a grant in a
// later ms moves the list's TTL along (one in the same ms keeps it, as the
// expiry stays), so the list never expires under a state that counts it.
func TestSlidingLogListTTL(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	l, _ := redlimit.New(s, "log-ttl", redlimit.WithConfig(redlimit.PerInterval(1000, time.Hour).WithAlgorithm(redlimit.SlidingLog)))
	list := s.Prefix() + "{log-ttl}:log"
	acquire := func() time.Time {
		t.Helper()
		r, err := l.TryAcquire(ctx, 1)
		if err != nil || !r.Allowed {
			t.Fatalf("TryAcquire = %+v, %v", r, err)
		}
		return r.At
	}
	first := acquire()
	// Shorten the list's TTL, as if it had been set long ago.
	if err := rdb.PExpire(ctx, list, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	acquire() // most likely in the same ms: the TTL may stay
	// A bounded poll of Redis's clock until a later ms.
	deadline := time.Now().Add(5 * time.Second)
	for {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.Truncate(time.Millisecond).After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis's clock stood still for 5 s")
		}
	}
	acquire()
	if ttl := rdb.PTTL(ctx, list).Val(); ttl <= time.Minute || ttl > time.Hour {
		t.Fatalf("list TTL after a grant in a later ms = %v; want (1m, 1h]", ttl)
	}
}
