package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// slotMove moves one slot of a Cluster between two primaries in the steps
// of a resharding, each run when the test says.
type slotMove struct {
	t              *testing.T
	slot           int64
	from, to       *redis.Client
	fromID, toID   string
	toHost, toPort string
	primaries      []*redis.Client
}

// newSlotMove moves the slot of key, which must hold keys, from its owner.
func newSlotMove(t *testing.T, cluster *redistest.Cluster, admin *redis.ClusterClient, key string) *slotMove {
	t.Helper()
	ctx := context.Background()
	m := &slotMove{t: t, slot: admin.ClusterKeySlot(ctx, key).Val()}
	for _, n := range cluster.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		m.primaries = append(m.primaries, c)
		switch {
		case c.ClusterCountKeysInSlot(ctx, int(m.slot)).Val() > 0:
			m.from, m.fromID = c, c.ClusterMyID(ctx).Val()
		case m.to == nil:
			m.to, m.toID = c, c.ClusterMyID(ctx).Val()
			m.toHost, m.toPort, _ = strings.Cut(n.Addr, ":")
		}
	}
	if m.from == nil || m.to == nil {
		t.Fatalf("no owner of slot %d, or no other primary", m.slot)
	}
	return m
}

func (m *slotMove) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

// open marks the slot IMPORTING on the target and MIGRATING on the owner.
func (m *slotMove) open() {
	ctx := context.Background()
	m.must(m.to.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.fromID).Err())
	m.must(m.from.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID).Err())
}

// moveKeys moves every key of the slot to the target.
func (m *slotMove) moveKeys() int {
	ctx := context.Background()
	moved := 0
	for {
		keys := m.from.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Val()
		if len(keys) == 0 {
			return moved
		}
		args := []any{"MIGRATE", m.toHost, m.toPort, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		m.must(m.from.Do(ctx, args...).Err())
		moved += len(keys)
	}
}

// close gives the slot to the target on every primary.
func (m *slotMove) close() {
	ctx := context.Background()
	for _, c := range m.primaries {
		m.must(c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err())
	}
}

// A Cluster client that resends nothing (MaxRedirects -1, as New requires)
// keeps granting through a slot migration of the limiter's keys: the store
// follows MOVED itself, and no permit is granted twice or lost.
func TestClusterSlotMigrationRedirects(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3, 0)
	rdb := cluster.Client(t) // MaxRetries and MaxRedirects -1
	for _, alg := range []redlimit.Algorithm{redlimit.SlidingLog, redlimit.FixedWindow, redlimit.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			s, err := redisstore.New(rdb, redisstore.WithPrefix("mig-"+string(alg)+":"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := redlimit.PerInterval(10, time.Hour).WithAlgorithm(alg)
			l, err := redlimit.New(s, "hot", redlimit.WithConfig(cfg))
			if err != nil {
				t.Fatal(err)
			}
			granted := 0
			acquire := func(what string) {
				t.Helper()
				r, err := l.TryAcquire(ctx, 1)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if r.Allowed {
					granted++
				}
			}
			for range 4 {
				acquire("before the migration")
			}
			m := newSlotMove(t, cluster, rdb, "mig-"+string(alg)+":{hot}")
			m.open()
			if n := m.moveKeys(); n == 0 {
				t.Fatal("no key of the limiter to move")
			}
			// Midway (keys moved, slot still open) a multi-key script
			// gets ASK then TRYAGAIN: the store may give up, with
			// ErrUnavailable, but never runs it twice.
			r, err := l.TryAcquire(ctx, 1)
			switch {
			case err == nil && r.Allowed:
				granted++
			case err != nil && !errors.Is(err, redlimit.ErrUnavailable):
				t.Fatalf("midway: %v; want a grant or ErrUnavailable", err)
			}
			m.close()
			// The client's slot map still names the old owner: MOVED.
			for range 3 {
				acquire("after the migration")
			}
			for range 10 {
				acquire("until refused")
			}
			if granted != 10 {
				t.Fatalf("%d granted through the migration of a limit of 10", granted)
			}
			if n, err := l.AvailablePermits(ctx); err != nil || n != 0 {
				t.Fatalf("available after the migration = %d, %v; want 0", n, err)
			}
		})
	}
}
