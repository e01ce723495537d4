package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// FuzzPolicyKeys: on a Redis Cluster, any bytes are a key (a bad one
// refused with ErrInvalidArgument before Redis sees it), no call ends in a
// CROSSSLOT or any other error, and a key's grants never count for
// another key.
func FuzzPolicyKeys(f *testing.F) {
	f.Add("user:1", "user:2")
	f.Add("{", "}")
	f.Add("{a}", "%7Ba%7D")
	f.Add("a:b", "a%3Ab")
	f.Add("", "x")
	f.Add(strings.Repeat("k", 1025), "\x00\xff{}")
	rdb := redistest.StartCluster(f, 3, 0).Client(f)
	s, err := redisstore.New(rdb, redisstore.WithPrefix("fuzz:"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	// Hours-long limits: a key's grants last the whole fuzzing.
	limits := []redlimit.Config{redlimit.PerInterval(1_000_000, time.Hour), redlimit.TokenBucketConfig(1_000_000, time.Hour, 1_000_000)}
	p, err := redlimit.NewPolicy(s, "fuzz{}", limits)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, erra := p.Key(a).TryAcquire(ctx, 1)
		if bad := a == "" || len(a) > 1024; bad {
			if !errors.Is(erra, redlimit.ErrInvalidArgument) {
				t.Fatalf("key of %d bytes: %v; want ErrInvalidArgument", len(a), erra)
			}
			return
		}
		if erra != nil || !ra.Allowed {
			t.Fatalf("key %q: %+v, %v", a, ra, erra)
		}
		if b == a || b == "" || len(b) > 1024 {
			return
		}
		before, err := p.Key(b).Status(ctx)
		if err != nil {
			t.Fatalf("key %q: %v", b, err)
		}
		if _, err := p.Key(a).TryAcquire(ctx, 1); err != nil {
			t.Fatalf("key %q: %v", a, err)
		}
		after, err := p.Key(b).Status(ctx)
		if err != nil {
			t.Fatalf("key %q: %v", b, err)
		}
		if after.Remaining != before.Remaining {
			t.Fatalf("a grant to %q changed %q: %d left, then %d", a, b, before.Remaining, after.Remaining)
		}
	})
}
