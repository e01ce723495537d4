package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// stateStore is a store on a fresh Redis whose clock stands 250ms into a
// second, for tests that write keys' states by hand in the stored form.
type stateStore struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
	s   *redisstore.Store
	now int64 // the clock's instant in µs
}

func newStateStore(t *testing.T) *stateStore {
	rdb := redistest.Start(t).Client(t)
	clk := clock.NewFake(storetest.T0.Add(250 * time.Millisecond))
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	return &stateStore{t: t, ctx: context.Background(), rdb: rdb, s: s, now: clk.Now().UnixMicro()}
}

// head is how the states of policy name begin: "EPOCH VERSION|".
func (f *stateStore) head(name string) string {
	f.t.Helper()
	cfg, err := f.s.Policy(f.ctx, name)
	if err != nil {
		f.t.Fatal(err)
	}
	return b36(cfg.Epoch) + " " + b36(cfg.Version) + "|"
}

// b36 is x in base 36, as states hold their numbers.
func b36(x int64) string { return strconv.FormatInt(x, 36) }

// TestKeyedStateFormat pins the string a key's state is kept in
// ("EPOCH VERSION|" then a letter and the numbers, all in base 36, see
// policy.lua): instances of a fleet being upgraded one by one share these
// strings, so each must read what the others write. A state written by
// hand in that form is read back as such.
func TestKeyedStateFormat(t *testing.T) {
	f := newStateStore(t)
	ctx, rdb, s, now, head := f.ctx, f.rdb, f.s, f.now, f.head

	bucket, err := redlimit.NewPolicy(s, "fmt-tb", []redlimit.Config{redlimit.TokenBucketConfig(10, time.Second, 10)})
	if err != nil {
		t.Fatal(err)
	}
	window, err := redlimit.NewPolicy(s, "fmt-fw", []redlimit.Config{redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*redlimit.Policy{bucket, window} {
		if r, err := p.Key("k").TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
	}
	get := func(name string) string {
		t.Helper()
		return rdb.Get(ctx, s.Prefix()+"{"+name+"%:k}").Val()
	}
	// A token bucket: "t" last owed, the deficit in µs x rate (one permit
	// of 10 per second: 1,000,000).
	if got, want := get("fmt-tb"), head("fmt-tb")+"t"+b36(now)+" "+b36(1_000_000); got != want {
		t.Errorf("token bucket state %q, want %q", got, want)
	}
	// A fixed window: "f" last, then the count of the window holding last
	// (the short form; TestKeyedWindowStates has the long one).
	if got, want := get("fmt-fw"), head("fmt-fw")+"f"+b36(now)+" 1"; got != want {
		t.Errorf("fixed window state %q, want %q", got, want)
	}

	// Written by another instance: 6 permits owed as of now.
	if err := rdb.Set(ctx, s.Prefix()+"{fmt-tb%:k}", head("fmt-tb")+"t"+b36(now)+" "+b36(6_000_000), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := bucket.Key("k").TryAcquire(ctx, 1)
	if err != nil || !r.Allowed || r.Remaining != 3 {
		t.Fatalf("after a state of 6 owed: %+v, %v; want granted, 3 left", r, err)
	}
}

// TestKeyedWindowStates reads window states written by hand in the stored
// form (TestKeyedStateFormat) through a keyed acquire, the fast path of
// policy.lua where it applies and the general one where not (a
// reservation, a tail ahead): the result and the state written after are
// the algorithm's. Now is 250ms into a window of 1s.
func TestKeyedWindowStates(t *testing.T) {
	f := newStateStore(t)
	ctx, rdb, s, now, head := f.ctx, f.rdb, f.s, f.now, f.head
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
	// st is a state in the long form: last, expiry, then the numbers of
	// nums, all but the counts offsets from last (counts: odd i, with
	// windows). short is one in the short form: last, then the count of
	// the window holding last (and, a counter's, of the window before):
	// the form written wherever it says the state.
	st := func(letter string, last, expiry int64, nums ...int64) string {
		out := letter + b36(last) + " " + b36(expiry-last)
		for _, x := range nums {
			out += " " + b36(x)
		}
		return out
	}
	short := func(letter string, last int64, counts ...int64) string {
		out := letter + b36(last)
		for _, x := range counts {
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
			true, 5, 0, short("f", now, 5)},
		{"fixed: expired", "fw", st("f", now-3*sec, ws-sec, -sec/2, 10),
			true, 9, 0, short("f", now, 1)},
		{"fixed: full", "fw", st("f", now-1000, ws+sec, ws-(now-1000), 10),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"fixed: a reservation", "fw", st("f", now-1000, ws+2*sec, ws+sec-(now-1000), 3),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"fixed: short", "fw", short("f", now-1000, 4),
			true, 5, 0, short("f", now, 5)},
		{"fixed: short, full", "fw", short("f", now-1000, 10),
			false, 0, time.Duration(ws+sec-now) * time.Microsecond, ""},
		{"fixed: short, the window before", "fw", short("f", now-sec, 10),
			true, 9, 0, short("f", now, 1)},
		{"counter: two windows", "sc", st("c", now-1000, ws+2*sec, 0, ws-sec-(now-1000), 4, ws-(now-1000), 2),
			true, 4, 0, short("c", now, 3, 4)},
		{"counter: the window before", "sc", st("c", now-1000, ws+sec, 0, ws-sec-(now-1000), 4),
			true, 6, 0, short("c", now, 1, 4)},
		{"counter: an older window goes", "sc", st("c", now-sec, ws+sec, -sec/2, ws-2*sec-(now-sec), 7, ws-sec-(now-sec), 4),
			true, 6, 0, short("c", now, 1, 4)},
		{"counter: a tail behind", "sc", st("c", now-1000, ws+2*sec, -500, ws-(now-1000), 2),
			true, 7, 0, short("c", now, 3)},
		{"counter: expired", "sc", st("c", now-5*sec, ws-sec, 0, ws-3*sec-(now-5*sec), 10),
			true, 9, 0, short("c", now, 1)},
		{"counter: short, two windows", "sc", short("c", now-1000, 2, 4),
			true, 4, 0, short("c", now, 3, 4)},
		{"counter: short, one window", "sc", short("c", now-1000, 2),
			true, 7, 0, short("c", now, 3)},
		{"counter: short, the window before", "sc", short("c", now-sec, 4),
			true, 6, 0, short("c", now, 1, 4)},
		{"counter: short, full", "sc", short("c", now-1000, 10),
			false, 0, time.Duration(ws+sec+sec/10-now) * time.Microsecond, ""},
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

// TestKeyedWindowTTL: on Redis's clock, a window's key expires when its
// state stops counting (a fixed window at its window's end, a sliding
// counter one window later), whether a call starts the window's state or
// adds to it (the fast path then keeps the TTL the first call set).
func TestKeyedWindowTTL(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	for _, tc := range []struct {
		alg   redlimit.Algorithm
		after time.Duration // from the window's start to the key's expiry
	}{{redlimit.FixedWindow, time.Hour}, {redlimit.SlidingCounter, 2 * time.Hour}} {
		p, err := redlimit.NewPolicy(s, string(tc.alg), []redlimit.Config{redlimit.PerInterval(100, time.Hour).WithAlgorithm(tc.alg)})
		if err != nil {
			t.Fatal(err)
		}
		key := s.Prefix() + "{" + string(tc.alg) + "%:k}"
		// At most twice: the calls and the reads fall in one window but
		// for those around an hour's turn.
		for try := 0; ; try++ {
			t1 := rdb.Time(ctx).Val()
			for i := range 3 {
				r, err := p.Key("k").TryAcquire(ctx, 1)
				if err != nil || !r.Allowed {
					t.Fatalf("%s: call %d = %+v, %v", tc.alg, i, r, err)
				}
			}
			ttl := rdb.PTTL(ctx, key).Val()
			t2 := rdb.Time(ctx).Val()
			if w := t1.Truncate(time.Hour); !t2.Truncate(time.Hour).Equal(w) && try == 0 {
				continue
			}
			end := t2.Truncate(time.Hour).Add(tc.after)
			if lo, hi := end.Sub(t2), end.Sub(t1)+time.Millisecond; ttl < lo || ttl > hi {
				t.Errorf("%s: TTL %v; want [%v, %v]", tc.alg, ttl, lo, hi)
			}
			break
		}
	}
}

// TestKeyedLogStates reads sliding-log states written by hand in the
// stored form through a keyed acquire: a log of up to four entries
// inline ("i" last, then per entry its offset back from last and its
// permits, the newest at last as its permits alone), a longer one in its
// list ("l" last, expiry offset, total). The result, the state and the
// list after are the algorithm's; a state that is not one is ErrCorrupt,
// and left as it was. Numbers are in ms, now 250ms into a second, the
// limit 10 per second.
func TestKeyedLogStates(t *testing.T) {
	f := newStateStore(t)
	ctx, rdb, s, head := f.ctx, f.rdb, f.s, f.head
	now := f.now / 1000
	p, err := redlimit.NewPolicy(s, "sl", []redlimit.Config{redlimit.PerSecond(10)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Key("first").TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// inline is a log's inline state from last and its entries (instant,
	// permits), oldest first.
	inline := func(last int64, entries ...int64) string {
		out := "i" + b36(last)
		for i := 0; i < len(entries); i += 2 {
			if i+2 < len(entries) || entries[i] != last {
				out += " " + b36(last-entries[i])
			}
			out += " " + b36(entries[i+1])
		}
		return out
	}
	list := func(entries ...int64) []string {
		var out []string
		for _, x := range entries {
			out = append(out, strconv.FormatInt(x, 10))
		}
		return out
	}
	cases := []struct {
		name       string
		state      string   // after the head
		list       []string // the list beside it
		allowed    bool
		remaining  int64
		retryAfter time.Duration
		after      string   // the state after; "" unchanged
		afterList  []string // the list after
		corrupt    bool
	}{
		{"one entry", inline(now-100, now-100, 3), nil,
			true, 6, 0, inline(now, now-100, 3, now, 1), nil, false},
		{"at the newest's instant", inline(now, now-100, 3, now, 2), nil,
			true, 4, 0, inline(now, now-100, 3, now, 3), nil, false},
		{"the oldest left the window", inline(now-10, now-1000, 5, now-10, 1), nil,
			true, 8, 0, inline(now, now-10, 1, now, 1), nil, false},
		{"the newest before last", inline(now-10, now-500, 2), nil,
			true, 7, 0, inline(now, now-500, 2, now, 1), nil, false},
		{"expired", inline(now-2000, now-2000, 10), nil,
			true, 9, 0, inline(now, now, 1), nil, false},
		{"full", inline(now-100, now-900, 6, now-100, 4), nil,
			false, 0, 100 * time.Millisecond, "", nil, false}, // when the 6 leave
		{"outgrows the string", inline(now-1, now-40, 1, now-30, 1, now-20, 1, now-1, 1), nil,
			true, 5, 0, "l" + b36(now) + " " + b36(1000) + " 5 1 " + b36(40), list(now-40, 1, now-30, 1, now-20, 1, now-1, 1, now, 1), false},
		{"a list that fits the string", "l" + b36(now-1) + " " + b36(999) + " 5", list(now-1500, 2, now-40, 1, now-1, 2),
			true, 6, 0, inline(now, now-40, 1, now-1, 2, now, 1), nil, false},
		{"more inline than written", inline(now-1, now-50, 1, now-40, 1, now-30, 1, now-20, 1, now-1, 1), nil,
			true, 4, 0, "l" + b36(now) + " " + b36(1000) + " 6 1 " + b36(50), list(now-50, 1, now-40, 1, now-30, 1, now-20, 1, now-1, 1, now, 1), false},
		// A long log's state says its tail's permits and how long before
		// last its head is: with no entry left the window, the list is
		// only pushed to.
		{"a long log, none left", "l" + b36(now-1) + " " + b36(999) + " 5 1 " + b36(39), list(now-40, 1, now-30, 1, now-20, 1, now-10, 1, now-1, 1),
			true, 4, 0, "l" + b36(now) + " " + b36(1000) + " 6 1 " + b36(40), list(now-40, 1, now-30, 1, now-20, 1, now-10, 1, now-1, 1, now, 1), false},
		{"a long log, its head left", "l" + b36(now-1) + " " + b36(999) + " 7 2 " + b36(1100), list(now-1101, 1, now-40, 1, now-30, 1, now-20, 1, now-10, 1, now-1, 2),
			true, 3, 0, "l" + b36(now) + " " + b36(1000) + " 7 1 " + b36(40), list(now-40, 1, now-30, 1, now-20, 1, now-10, 1, now-1, 2, now, 1), false},
		{"a long log, full", "l" + b36(now-1) + " " + b36(999) + " a 1 " + b36(39), list(now-40, 6, now-30, 1, now-20, 1, now-10, 1, now-1, 1),
			false, 0, 960 * time.Millisecond, "", nil, false}, // when the 6 leave
		// A long log whose list is gone (evicted without its state): the
		// call is answered by the state's total, and the log starts anew
		// from the one entry it pushes.
		{"a long log whose list is gone", "l" + b36(now-1) + " " + b36(999) + " 5 1 " + b36(39), nil,
			true, 4, 0, inline(now, now, 1), nil, false},
		{"a long log whose list is gone, at its tail's instant", "l" + b36(now) + " " + b36(1000) + " 5 1 " + b36(40), nil,
			true, 4, 0, inline(now, now, 1), nil, false},
		{"a long log's tail, no head", "l" + b36(now-1) + " " + b36(999) + " 5 1", list(now-40, 1, now-30, 1, now-20, 1, now-10, 1, now-1, 1),
			false, 0, 0, "", nil, true},
		{"entries out of order", inline(now-1, now-20, 1) + " z 1", nil, false, 0, 0, "", nil, true},
		{"no permits", "i" + b36(now-1) + " 0", nil, false, 0, 0, "", nil, true},
		{"no entry", "i" + b36(now-1), nil, false, 0, 0, "", nil, true},
		{"not numbers", "i" + b36(now-1) + " 1 x-y", nil, false, 0, 0, "", nil, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "k" + strconv.Itoa(i)
			stateKey := s.Prefix() + "{sl%:" + key + "}"
			h := head("sl")
			if err := rdb.Set(ctx, stateKey, h+c.state, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if c.list != nil {
				if err := rdb.RPush(ctx, stateKey+"1", c.list).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r, err := p.Key(key).TryAcquire(ctx, 1)
			if c.corrupt {
				if !errors.Is(err, redlimit.ErrCorrupt) {
					t.Fatalf("from %q: %+v, %v; want ErrCorrupt", c.state, r, err)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if r.Allowed != c.allowed || r.Remaining != c.remaining || r.RetryAfter != c.retryAfter {
				t.Errorf("from %q: %+v; want allowed %v, remaining %d, retry after %v", c.state, r, c.allowed, c.remaining, c.retryAfter)
			}
			want, wantList := c.after, c.afterList
			if want == "" {
				want, wantList = c.state, c.list
			}
			if got := rdb.Get(ctx, stateKey).Val(); got != h+want {
				t.Errorf("state after %q, want %q", got, h+want)
			}
			if got := rdb.LRange(ctx, stateKey+"1", 0, -1).Val(); !slices.Equal(got, wantList) {
				t.Errorf("list after %q, want %q", got, wantList)
			}
		})
	}
}

// TestKeyedWindowLeftEmpty: a window's state whose windows have all
// passed counts nothing, and is written so when the key is written for
// another reason (here: a refusal by another limit, after a change of
// the policy's limits, converts the key's state to the new version). Its
// long form holds too few numbers to be told from a short one: written,
// it read back as a count of its expiry's offset (found by the policy
// differential).
func TestKeyedWindowLeftEmpty(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0.Add(250 * time.Millisecond))
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	for _, alg := range []redlimit.Algorithm{redlimit.FixedWindow, redlimit.SlidingCounter} {
		t.Run(string(alg), func(t *testing.T) {
			// The queue takes one request an hour: the second waits.
			queue := redlimit.LeakyBucketConfig(1, time.Hour, 1)
			p, err := redlimit.NewPolicy(s, string(alg), []redlimit.Config{redlimit.PerInterval(5, 10*time.Millisecond).WithAlgorithm(alg), queue})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := p.Key("k").TryAcquire(ctx, 1); err != nil || !r.Allowed {
				t.Fatalf("first call: %+v, %v", r, err)
			}
			clk.Advance(50 * time.Millisecond) // the window's count has passed
			// Windows of an hour: the first call's instant in the window of now.
			if err := p.SetLimits(ctx, []redlimit.Config{redlimit.PerInterval(5, time.Hour).WithAlgorithm(alg), queue}); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				r, err := p.Key("k").TryAcquire(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed || !r.Limits[1].Refused || r.Limits[0].Refused || r.Limits[0].Remaining != 5 {
					t.Fatalf("call %d after the change: %+v; want refused by the queue, the window's 5 left", i, r)
				}
			}
		})
	}
}
