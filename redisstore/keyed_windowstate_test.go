package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// TestKeyedWindowStates reads window states written by hand in the stored
// form (TestKeyedStateFormat) through a keyed acquire, the fast path of
// policy.lua where it applies and the general one where not (a
// reservation, a tail ahead): the result and the state written after are
// the algorithm's. Now is 250ms into a window of 1s.
func TestKeyedWindowStates(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0.Add(250 * time.Millisecond))
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	b36 := func(x int64) string { return strconv.FormatInt(x, 36) }
	now := clk.Now().UnixMicro()
	const sec = int64(1_000_000)
	ws := now - now%sec // the current window's start

	policies := map[string]*redlimit.Policy{}
	for name, alg := range map[string]redlimit.Algorithm{"fw": redlimit.FixedWindow, "sc": redlimit.SlidingCounter} {
		p, err := redlimit.NewPolicy(s, name, []redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(alg)})
		if err != nil {
			t.Fatal(err)
		}
		policies[name] = p
		// The first call writes the policy, whose epoch and version the
		// states' heads then name.
		if _, err := p.Key("first").TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	head := func(name string) string {
		t.Helper()
		cfg, err := s.Policy(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return b36(cfg.Epoch) + " " + b36(cfg.Version) + "|"
	}
	// st is a state of last, expiry, then the numbers of nums, all but the
	// counts offsets from last (counts: odd i, with windows).
	st := func(letter string, last, expiry int64, nums ...int64) string {
		out := letter + b36(last) + " " + b36(expiry-last)
		for _, x := range nums {
			out += " " + b36(x)
		}
		return out
	}
	cases := []struct {
		name, policy string
		state        string // after the head
		allowed      bool
		remaining    int64
		retryAfter   time.Duration
		after        string // the state after; "" unchanged
	}{
		{"fixed: this window", "fw", st("f", now-1000, ws+sec, ws-(now-1000), 4),
			true, 5, 0, st("f", now, ws+sec, ws-now, 5)},
		{"fixed: expired", "fw", st("f", now-3*sec, ws-sec, -sec/2, 10),
			true, 9, 0, st("f", now, ws+sec, ws-now, 1)},
		{"fixed: full", "fw", st("f", now-1000, ws+sec, ws-(now-1000), 10),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"fixed: a reservation", "fw", st("f", now-1000, ws+2*sec, ws+sec-(now-1000), 3),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"counter: two windows", "sc", st("c", now-1000, ws+2*sec, 0, ws-sec-(now-1000), 4, ws-(now-1000), 2),
			true, 4, 0, st("c", now, ws+2*sec, 0, ws-sec-now, 4, ws-now, 3)},
		{"counter: the window before", "sc", st("c", now-1000, ws+sec, 0, ws-sec-(now-1000), 4),
			true, 6, 0, st("c", now, ws+2*sec, 0, ws-sec-now, 4, ws-now, 1)},
		{"counter: an older window goes", "sc", st("c", now-sec, ws+sec, -sec/2, ws-2*sec-(now-sec), 7, ws-sec-(now-sec), 4),
			true, 6, 0, st("c", now, ws+2*sec, 0, ws-sec-now, 4, ws-now, 1)},
		{"counter: a tail behind", "sc", st("c", now-1000, ws+2*sec, -500, ws-(now-1000), 2),
			true, 7, 0, st("c", now, ws+2*sec, 0, ws-now, 3)},
		{"counter: expired", "sc", st("c", now-5*sec, ws-sec, 0, ws-3*sec-(now-5*sec), 10),
			true, 9, 0, st("c", now, ws+2*sec, 0, ws-now, 1)},
		{"counter: a tail ahead", "sc", st("c", now-1000, ws+3*sec, ws+sec-(now-1000), ws+sec-(now-1000), 1),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"counter: full", "sc", st("c", now-1000, ws+2*sec, 0, ws-(now-1000), 10),
			false, 0, time.Duration(ws+sec+sec/10-now) * time.Microsecond, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "k" + strconv.Itoa(i)
			stateKey := s.Prefix() + "{" + c.policy + "%:" + key + "}"
			h := head(c.policy)
			if err := rdb.Set(ctx, stateKey, h+c.state, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := policies[c.policy].Key(key).TryAcquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed != c.allowed || r.Remaining != c.remaining || r.RetryAfter != c.retryAfter {
				t.Errorf("from %q: %+v; want allowed %v, remaining %d, retry after %v", c.state, r, c.allowed, c.remaining, c.retryAfter)
			}
			want := c.after
			if want == "" {
				want = c.state
			}
			if got := rdb.Get(ctx, stateKey).Val(); got != h+want {
				t.Errorf("state after %q, want %q", got, h+want)
			}
		})
	}
}
