package redisclient

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// Redirecting follows ASK (to the importing node, after ASKING) and MOVED
// (to the new owner) for a Cluster client that resends nothing itself, and
// gives up on TRYAGAIN within its budget.
func TestRedirectingFollowsAskAndMoved(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3, 0)
	cc := cluster.Client(t) // MaxRetries and MaxRedirects -1
	if err := Check(cc, "AllowRetries()"); err != nil {
		t.Fatal(err)
	}
	r := NewRedirecting(cc, nil)
	key, other := "{mig}a", "{mig}b"
	if err := r.Do(ctx, "set", key, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Do(ctx, "set", other, 1).Err(); err != nil {
		t.Fatal(err)
	}
	slot := cc.ClusterKeySlot(ctx, key).Val()
	var from, to *redis.Client
	var toAddr string
	var primaries []*redis.Client
	for _, n := range cluster.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		primaries = append(primaries, c)
		if c.Exists(ctx, key).Val() == 1 {
			from = c
		} else if to == nil {
			to, toAddr = c, n.Addr
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	fromID, toID := from.ClusterMyID(ctx).Val(), to.ClusterMyID(ctx).Val()
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	host, port, _ := strings.Cut(toAddr, ":")
	must(from.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", key).Err())

	// The plain client stops at ASK.
	if _, ok := redis.IsAskError(cc.Do(ctx, "incr", key).Err()); !ok {
		t.Fatalf("plain client on a migrated key: %v; want ASK", cc.Do(ctx, "get", key).Err())
	}
	if n, err := r.Do(ctx, "incr", key).Int64(); err != nil || n != 2 {
		t.Fatalf("incr through ASK = %d, %v; want 2", n, err)
	}
	// Keys split between the nodes: TRYAGAIN, given up on (the
	// command did not run).
	if err := r.Do(ctx, "mget", key, other).Err(); !redis.IsTryAgainError(err) {
		t.Fatalf("mget of split keys: %v; want TRYAGAIN", err)
	}
	must(from.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", other).Err())
	for _, c := range primaries {
		must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	}
	// The client's slot map still names the old owner: MOVED, followed.
	if n, err := r.Do(ctx, "incr", key).Int64(); err != nil || n != 3 {
		t.Fatalf("incr through MOVED = %d, %v; want 3", n, err)
	}
	if v, err := r.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{key}).Result(); !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("evalsha of an unknown script = %v, %v; want NOSCRIPT from the owner", v, err)
	}
	if v, err := r.Eval(ctx, "return redis.call('incr', KEYS[1])", []string{key}).Int64(); err != nil || v != 4 {
		t.Fatalf("eval = %d, %v; want 4", v, err)
	}
}
