package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestMillisecondStateIsANewEpoch: state written by a redlimit that counted
// milliseconds (no "u" mark) is read as gone, like the state of another
// epoch: a fresh limit, never an error or an answer from misread times. The
// state written now carries the mark, which such a redlimit cannot read as
// a number and so takes as gone in turn.
func TestMillisecondStateIsANewEpoch(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0)
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	ms := storetest.T0.UnixMilli()
	cases := []struct {
		cfg redlimit.Config
		old string // an ms state: last, expiry offset, then the algorithm's fields
	}{
		// A token bucket of 4 per hour with 3 tokens taken 1 ms ago.
		{redlimit.TokenBucketConfig(4, time.Hour, 4), fmt.Sprintf("%d 2700000 10800000 3600000", ms-1)},
		{redlimit.LeakyBucketConfig(4, time.Hour, 4), fmt.Sprintf("%d 2700000 10800000 3600000", ms-1)},
		// A window of an hour, its 4 permits taken.
		{redlimit.PerInterval(4, time.Hour).WithAlgorithm(redlimit.FixedWindow), fmt.Sprintf("%d 3600000 %d 4", ms-1, -(ms-1)%3_600_000)},
		{redlimit.PerInterval(4, time.Hour).WithAlgorithm(redlimit.SlidingCounter), fmt.Sprintf("%d 7200000 0 %d 4", ms-1, -(ms-1)%3_600_000)},
	}
	for _, tc := range cases {
		for _, mode := range []redlimit.Mode{redlimit.Overall, redlimit.PerClient} {
			cfg := tc.cfg.WithMode(mode)
			name := fmt.Sprintf("old-%s-%s", cfg.Algorithm, mode)
			l, err := redlimit.New(s, name, redlimit.WithClock(clk), redlimit.WithClientID("c"))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.SetRate(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			stored, err := l.Config(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hash := s.Prefix() + "{" + name + "}"
			if mode == redlimit.PerClient {
				key := hash + ":client:c"
				if err := rdb.Set(ctx, key, fmt.Sprint(stored.Epoch, " ", tc.old), time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			} else if err := rdb.HSet(ctx, hash, "s", tc.old).Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := l.AvailablePermits(ctx); err != nil || n != 4 {
				t.Fatalf("%s: available over an ms state = %d, %v; want 4 (a fresh limit)", name, n, err)
			}
			left := int64(3)
			if cfg.Algorithm == redlimit.LeakyBucket {
				left = 0 // its queue holds the grant for a while
			}
			r, err := l.TryAcquire(ctx, 1)
			if err != nil || !r.Allowed || r.Remaining != left {
				t.Fatalf("%s: TryAcquire over an ms state = %+v, %v; want granted, %d left", name, r, err, left)
			}
			var st string
			if mode == redlimit.PerClient {
				st = rdb.Get(ctx, hash+":client:c").Val()
				st = strings.TrimPrefix(st, fmt.Sprint(stored.Epoch, " "))
			} else {
				st = rdb.HGet(ctx, hash, "s").Val()
			}
			if !strings.HasPrefix(st, "u ") {
				t.Fatalf("%s: state %q written without the µs mark", name, st)
			}
		}
	}
}
