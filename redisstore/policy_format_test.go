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

// TestKeyedStateFormat pins the string a key's state is kept in
// ("EPOCH VERSION|" then a letter and the numbers, all in base 36, see
// policy.lua): instances of a fleet being upgraded one by one share these
// strings, so each must read what the others write. A state written by
// hand in that form is read back as such.
func TestKeyedStateFormat(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0.Add(250 * time.Millisecond))
	s := newStore(t, rdb, redisstore.WithTimeSource(clk))
	b36 := func(x int64) string { return strconv.FormatInt(x, 36) }
	now := clk.Now().UnixMicro()

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
	head := func(name string) string {
		t.Helper()
		cfg, err := s.Policy(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return b36(cfg.Epoch) + " " + b36(cfg.Version) + "|"
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
	// A fixed window: "f" last, the expiry, the window's start (before
	// now: negative) as offsets from last, then its count.
	ws := now - now%1_000_000
	if got, want := get("fmt-fw"), head("fmt-fw")+"f"+b36(now)+" "+b36(ws+1_000_000-now)+" "+b36(ws-now)+" 1"; got != want {
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
