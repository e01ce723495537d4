package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// randomName mixes what a hostile or careless caller might send: braces,
// spaces, newlines, NUL, invalid UTF-8, Unicode.
func randomName(rng *rand.Rand) string {
	parts := []string{"{", "}", " ", "\n", "\x00", "\xff\xfe", "名", "é", ":", "%", "%7B", "a", "user", "{}", "}{"}
	var b strings.Builder
	for i := 0; i < 1+rng.IntN(12); i++ {
		b.WriteString(parts[rng.IntN(len(parts))])
	}
	return b.String()
}

// TestHostileNamesOnCluster: thousands of random names on a Redis Cluster;
// every call is one script on one slot (zero CROSSSLOT), every name keeps to
// its own keys, and names too long are refused before Redis.
func TestHostileNamesOnCluster(t *testing.T) {
	rdb := redistest.StartCluster(t, 3, 0).Client(t)
	s := newStore(t, rdb)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		name := randomName(rng)
		mode := redlimit.Mode(len(name) % 2) // the same name, the same mode
		l, err := redlimit.New(s, name, redlimit.WithClientID("c1"), redlimit.WithConfig(redlimit.PerInterval(1, time.Hour).WithMode(mode)))
		if err != nil {
			t.Fatalf("New(%q): %v", name, err)
		}
		r, err := l.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatalf("name %q: %v", name, err)
		}
		// A name seen before is the same limiter (its one permit is gone);
		// a new one must not see another name's grant.
		if r.Allowed == seen[name] {
			t.Fatalf("name %q (seen before: %v): %+v", name, seen[name], r)
		}
		seen[name] = true
	}
	t.Logf("%d distinct hostile names, no CROSSSLOT, no cross-talk", len(seen))
	if _, err := redlimit.New(s, strings.Repeat("x", 1<<20)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("1 MB name: %v", err)
	}
	if _, err := s.Acquire(ctx, redlimit.Key{Name: strings.Repeat("x", 1<<20), Client: "c"}, redlimit.Config{}, 1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("1 MB name straight to the store: %v", err)
	}
}

// TestSkewedClients: two clients whose clocks disagree by 10 s (+5 s and
// -5 s) share one limiter; no window holds more than the rate.
func TestSkewedClients(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	base := clock.NewFake(storetest.T0)
	ahead, behind := clock.NewFake(storetest.T0.Add(5*time.Second)), clock.NewFake(storetest.T0.Add(-5*time.Second))
	prefix := newStore(t, rdb).Prefix()
	cfg := redlimit.PerInterval(5, time.Second)
	var grants []storetest.Grant
	rng := rand.New(rand.NewPCG(3, 3))
	stores := []*clock.Fake{ahead, behind}
	limiters := make([]*redlimit.Limiter, 2)
	for i, c := range stores {
		s, _ := redisstore.New(rdb, redisstore.WithPrefix(prefix), redisstore.WithTimeSource(c))
		limiters[i], _ = redlimit.New(s, "skew", redlimit.WithConfig(cfg))
	}
	for step := 0; step < 2000; step++ {
		d := time.Duration(rng.IntN(40)) * time.Millisecond
		base.Advance(d)
		ahead.Advance(d)
		behind.Advance(d)
		i := rng.IntN(2)
		r, err := limiters[i].TryAcquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			grants = append(grants, storetest.Grant{At: r.At, Permits: 1})
		}
	}
	if worst := storetest.MaxInWindow(grants, cfg.Interval); worst > cfg.Rate {
		t.Fatalf("a window held %d grants with skewed clocks; the rate is %d", worst, cfg.Rate)
	}
	t.Logf("%d grants from clients 10 s apart; no window over the rate", len(grants))
}

// TestNoKeyWithoutTTL: after every algorithm in both modes has run, every
// key but the configs carries a TTL, and a PerClient client that goes away
// leaves nothing behind once its state has expired.
func TestNoKeyWithoutTTL(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	s := newStore(t, rdb)
	ctx := context.Background()
	for _, alg := range redlimit.Algorithms {
		for _, mode := range []redlimit.Mode{redlimit.Overall, redlimit.PerClient} {
			l, _ := redlimit.New(s, "ttl-"+string(alg)+mode.String(), redlimit.WithClientID("gone"))
			if err := l.SetRate(ctx, redlimit.PerInterval(3, 50*time.Millisecond).WithAlgorithm(alg).WithMode(mode)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				if _, err := l.TryAcquire(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	keys := rdb.Keys(ctx, s.Prefix()+"*").Val()
	for _, k := range keys {
		ttl := rdb.PTTL(ctx, k).Val()
		if ttl == -2 {
			// Gone since KEYS listed it: it expired, so it had a TTL
			// (-1 is Redis's answer for a key without one).
			continue
		}
		if strings.HasSuffix(k, "}") != (ttl < 0) {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}
	// The client "gone" makes no more calls: its state expires by itself.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, k := range rdb.Keys(ctx, s.Prefix()+"*").Val() {
			if !strings.HasSuffix(k, "}") {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d state keys still there 5 s after a 50 ms limit went idle", left)
		}
		time.Sleep(20 * time.Millisecond) // waiting for Redis's own expiry
	}
}
