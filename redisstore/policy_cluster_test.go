package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// policyCluster starts a Cluster of three primaries (no replicas), stopped
// at the test's end.
func policyCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	return redistest.StartCluster(t, 3, 0).Client(t)
}

// allKeys returns every key with prefix on every primary of rdb (or rdb
// itself when it is not a Cluster).
func allKeys(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("client %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestPolicyCluster: 10,000 keys of one policy on a Cluster of three
// primaries spread over its slots (each primary holds some), and every key
// but the policy's config has a TTL no longer than its state lasts; 10,000
// keys of a policy of 20 ms limits, once idle past that, leave nothing but
// the config. Redis TIME is the clock here (Redis expires keys by its own).
func TestPolicyCluster(t *testing.T) {
	rdb := policyCluster(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	const keys = 10_000
	fill := func(name string, every time.Duration) {
		t.Helper()
		limits := []redlimit.Config{
			redlimit.TokenBucketConfig(10, every, 10),
			redlimit.PerInterval(5, every), // a sliding log: one entry, inline in the state
			redlimit.PerInterval(8, every/2).WithAlgorithm(redlimit.SlidingCounter),
		}
		p, err := redlimit.NewPolicy(s, name, limits)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := 0; w < 64; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < keys; i += 64 {
					if r, err := p.Key(fmt.Sprintf("user:%d", i)).TryAcquire(ctx, 1); err != nil || !r.Allowed {
						errs <- fmt.Errorf("key %d: %+v, %v", i, r, err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	configTTL := func(config string) {
		t.Helper()
		if ttl := rdb.PTTL(ctx, config).Val(); ttl != -1 {
			t.Fatalf("the policy's config has TTL %v; want none", ttl)
		}
	}

	fill("users", time.Hour)
	config := s.Prefix() + "{users}:policy"
	perNode := map[string]int{}
	var mu sync.Mutex
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		mu.Lock()
		perNode[c.Options().Addr] = int(n)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	all := allKeys(t, rdb, s.Prefix())
	lists := 0
	for _, k := range all {
		if k == config {
			configTTL(k)
			continue
		}
		if !strings.HasSuffix(k, "}") {
			lists++
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("key %q has TTL %v; want one of at most the longest limit's hour", k, ttl)
		}
	}
	if len(all) != 1+keys || lists != 0 {
		t.Fatalf("%d keys, %d lists; want %d (the config and a state per key, its log inline)", len(all), lists, 1+keys)
	}
	t.Logf("%d keys (%d states, %d sliding-log lists, 1 config), per primary %v", len(all), len(all)-1-lists, lists, perNode)
	for addr, n := range perNode {
		if n < keys/4 { // a third of them each, give or take
			t.Fatalf("primary %s holds %d keys of %d: the keys do not spread", addr, n, len(all))
		}
	}

	// Idle past their expiry, the keys are gone: Redis expires them by its
	// clock, so wait for that (a condition, polled) rather than guessing.
	fill("burst", 20*time.Millisecond)
	config = s.Prefix() + "{burst}:policy"
	deadline := time.Now().Add(20 * time.Second)
	for {
		var left []string
		for _, k := range allKeys(t, rdb, s.Prefix()) {
			if strings.HasPrefix(k, s.Prefix()+"{burst") {
				left = append(left, k)
			}
		}
		if len(left) == 1 && left[0] == config {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left 20s after 20ms limits: %q...", len(left), left[:min(3, len(left))])
		}
		time.Sleep(20 * time.Millisecond)
	}
	configTTL(config)
}

// TestPolicySetLimitsSpreads: a SetLimits made by one client is seen by
// another that cached the policy: through pub/sub, and through the key's
// state (stale version) on a key the first touched since. The latency
// (from the change to the first decision of the other client under it)
// is measured and logged, not asserted.
func TestPolicySetLimitsSpreads(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Server", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"Sentinel", func(t *testing.T) redis.UniversalClient { return redistest.StartSentinel(t, 1, 3).Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return policyCluster(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.rdb(t)
			ctx := context.Background()
			a := newStore(t, rdb)
			b, err := redisstore.New(rdb, redisstore.WithPrefix(a.Prefix()), redisstore.WithPolicyMaxAge(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			pa, _ := redlimit.NewPolicy(a, "api", []redlimit.Config{redlimit.PerInterval(2, time.Hour)})
			pb, _ := redlimit.NewPolicy(b, "api", nil)
			if err := pa.SetLimits(ctx, []redlimit.Config{redlimit.PerInterval(2, time.Hour)}); err != nil {
				t.Fatal(err)
			}
			// b caches the policy (its max age is an hour: only pub/sub or
			// a stale state can tell it of a change).
			if r, err := pb.Key("u0").Status(ctx); err != nil || r.Remaining != 2 {
				t.Fatalf("status %+v, %v", r, err)
			}
			// Through a key's state: a touches key u1 under the new
			// limits; b, on u1, is told its version is stale at once.
			if err := pa.SetLimits(ctx, []redlimit.Config{redlimit.PerInterval(5, time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if _, err := pa.Key("u1").TryAcquire(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if r, err := pb.Key("u1").TryAcquire(ctx, 1); err != nil || !r.Allowed || r.Remaining != 3 || r.Limits[0].Config.Rate != 5 {
				t.Fatalf("b on a key a changed under the new limits: %+v, %v; want 3 of 5 left", r, err)
			}
			// Through pub/sub: on a key nobody touched, b sees the change
			// once the message arrives.
			for round := 0; round < 5; round++ {
				rate := int64(10 + round)
				start := time.Now()
				if err := pa.SetLimits(ctx, []redlimit.Config{redlimit.PerInterval(rate, time.Hour)}); err != nil {
					t.Fatal(err)
				}
				calls := 0
				for {
					calls++
					r, err := pb.Key(fmt.Sprintf("fresh%d", round)).Status(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if r.Remaining == rate {
						break
					}
					if time.Since(start) > 10*time.Second {
						t.Fatalf("b still decides under %d per hour 10s after SetLimits", r.Remaining)
					}
				}
				t.Logf("SetLimits seen by the other client %v after it (%d status calls)", time.Since(start), calls)
			}
		})
	}
}

// TestPolicyBadInput: bad keys are refused before any Redis call; keys
// holding what redlimit did not write answer ErrCorrupt; never a raw Lua
// error.
func TestPolicyBadInput(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	limits := []redlimit.Config{redlimit.PerSecond(3), redlimit.TokenBucketConfig(5, time.Second, 5)}
	p, _ := redlimit.NewPolicy(s, "bad", limits)
	before := rdb.Info(ctx, "commandstats").Val()
	for _, key := range []string{"", strings.Repeat("x", 1025)} {
		if _, err := p.Key(key).TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Fatalf("key of %d bytes: %v; want ErrInvalidArgument", len(key), err)
		}
		if _, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "bad", Key: key}, redlimit.PolicyConfig{}, 1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Fatalf("store, key of %d bytes: %v; want ErrInvalidArgument", len(key), err)
		}
	}
	if _, err := s.AcquireKey(ctx, redlimit.PolicyKey{Policy: "", Key: "k"}, redlimit.PolicyConfig{}, 1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("empty policy name: %v", err)
	}
	if after := rdb.Info(ctx, "commandstats").Val(); countCalls(after, "fcall")+countCalls(after, "evalsha")+countCalls(after, "hmget") != countCalls(before, "fcall")+countCalls(before, "evalsha")+countCalls(before, "hmget") {
		t.Fatal("bad keys reached Redis")
	}
	if _, err := p.Key("k").TryAcquire(ctx, 6); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("6 permits of a policy granting at most 3 at once: %v", err)
	}
	if _, err := p.Key("k").TryAcquire(ctx, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("0 permits: %v", err)
	}
	// Foreign data at a key's state: a hash, garbage, a list at the log.
	state := s.Prefix() + "{bad%:k}"
	for _, write := range []func() error{
		func() error { return rdb.HSet(ctx, state, "x", "y").Err() },
		func() error { return rdb.Set(ctx, state, "garbage|||", time.Hour).Err() },
		func() error { return rdb.Set(ctx, state, "1 zz|t1 2 3", time.Hour).Err() },
	} {
		rdb.Del(ctx, state)
		if err := write(); err != nil {
			t.Fatal(err)
		}
		r, err := p.Key("k").TryAcquire(ctx, 1)
		if err != nil && !errors.Is(err, redlimit.ErrCorrupt) || err == nil && !r.Allowed {
			t.Fatalf("over %q: %+v, %v; want ErrCorrupt or a fresh grant", rdb.Type(ctx, state).Val(), r, err)
		}
		if err != nil && strings.Contains(err.Error(), "user_function") {
			t.Fatalf("raw Lua error: %v", err)
		}
	}
	rdb.Del(ctx, state)
	if _, err := p.Key("k").TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A log in its list (longer than its state string holds), the list a
	// string: the state as slidinglog.lua writes it, "LAST EXPIRY TOTAL"
	// after the letter "l", the expiry an offset (a minute, base 36).
	st := rdb.Get(ctx, state).Val()
	head, inline, ok := strings.Cut(st, "|i")
	if !ok {
		t.Fatalf("state %q; want a log inline", st)
	}
	if err := rdb.Set(ctx, state, head+"|l"+strings.Fields(inline)[0]+" 1aao 1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, s.Prefix()+"{bad%:k}1", "not a list", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Key("k").TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("a string at the sliding log's list: %v; want ErrCorrupt", err)
	}
	// A policy's config that is not one.
	if err := rdb.HSet(ctx, s.Prefix()+"{garbled}:policy", "l", "nonsense", "v", "1", "e", "1", "t", "0").Err(); err != nil {
		t.Fatal(err)
	}
	g, _ := redlimit.NewPolicy(s, "garbled", nil)
	if _, err := g.Key("k").TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("garbled config: %v; want ErrCorrupt", err)
	}
	if _, err := redlimit.NewPolicy(s, "none", nil); err != nil {
		t.Fatal(err)
	}
	none, _ := redlimit.NewPolicy(s, "none", nil)
	if _, err := none.Key("k").TryAcquire(ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("no policy stored or known: %v; want ErrNotInitialized", err)
	}
	if _, err := redisstore.New(rdb, redisstore.WithPolicyMaxAge(0)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("max age 0: %v", err)
	}
}

// countCalls reads a command's calls from INFO commandstats.
func countCalls(info, cmd string) int {
	i := strings.Index(info, "cmdstat_"+cmd+":calls=")
	if i < 0 {
		return 0
	}
	var n int
	_, _ = fmt.Sscanf(info[i+len("cmdstat_"+cmd+":calls="):], "%d", &n)
	return n
}
