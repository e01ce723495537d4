package redissonstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestClientIDsDuringSlotMigration: while the limiter's slot moves between
// two primaries, its client keys are on both; ClientIDs scans every primary
// at once (ForEachMaster) and must find the clients of both without two
// scans writing one map together (the race detector's report, or a fatal
// "concurrent map writes", before the fix).
func TestClientIDsDuringSlotMigration(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	rdb := cluster.Client(t)
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s, err := New(rdb, WithTimeSource(clk))
	if err != nil {
		t.Fatal(err)
	}
	const name = "moving"
	cfg := redlimit.PerInterval(5, time.Minute).WithMode(redlimit.PerClient)
	var clients []string
	for i := range 6 {
		id := fmt.Sprintf("client-%d", i)
		clients = append(clients, id)
		l, err := redlimit.New(s, name, redlimit.WithClock(clk), redlimit.WithClientID(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetRate(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("%s: %+v, %v", id, r, err)
		}
	}

	// The client keys move to another primary, the rest stays: the slot
	// is MIGRATING on its owner and IMPORTING on the other, as midway
	// through a resharding.
	slot := rdb.ClusterKeySlot(ctx, KeysOf(name).Config).Val()
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var from, to *redis.Client
	var toAddr string
	for _, n := range cluster.Nodes {
		c := node(n.Addr)
		if len(c.ClusterGetKeysInSlot(ctx, int(slot), 1).Val()) > 0 {
			from = c
		} else if to == nil {
			to, toAddr = c, n.Addr
		}
	}
	if from == nil || to == nil {
		t.Fatal("no node holds the limiter's slot, or every node does")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ClusterMyID(ctx).Val()).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ClusterMyID(ctx).Val()).Err())
	var moving []any
	for _, k := range from.ClusterGetKeysInSlot(ctx, int(slot), 100).Val() {
		if strings.HasSuffix(k, ":client-0") || strings.HasSuffix(k, ":client-1") || strings.HasSuffix(k, ":client-2") {
			moving = append(moving, k)
		}
	}
	host, port, _ := strings.Cut(toAddr, ":")
	must(from.Do(ctx, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, moving...)...).Err())
	if from.DBSize(ctx).Val() == 0 || to.DBSize(ctx).Val() == 0 {
		t.Fatalf("keys on the two primaries: %d and %d; want some on each", from.DBSize(ctx).Val(), to.DBSize(ctx).Val())
	}

	ids, err := s.ClientIDs(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, clients) {
		t.Fatalf("ClientIDs = %q; want %q", ids, clients)
	}
}
