package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPolicySystems: the keyed policy systems, on one redis-server and on
// the Cluster the benchmark starts (with redis_rate there), decide right:
// at 5 per minute each of several keys is granted exactly 5 of 8 calls (the
// leaky bucket 1: its grants are spaced),
// keys do not share a state, and MEMORY USAGE finds each key's state where
// the benchmark looks for it. On the Cluster, each node's figures add up to
// the whole and the keys spread over every node.
func TestPolicySystems(t *testing.T) {
	ctx := context.Background()
	srv, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	cl, err := startCluster(ctx, clusterPrimaries)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.stop()
	e := &env{base: &redis.Options{Addr: srv.Addr}, own: true, prefix: "redlimit-bench:test:", cluster: cl}
	e.admin = redis.NewClient(e.base)
	defer e.admin.Close()

	const rate, calls = 5, 8
	names := []string{"a", "b", "user:42", "k99"}
	check := func(t *testing.T, s *system, onCl bool) {
		p := prep{l: limit{Rate: rate, Interval: time.Minute}, names: names, callers: 4, prefix: e.systemPrefix(s.Name), cluster: onCl}
		tg, err := s.prepare(ctx, e, p)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.close()
		if tg.n != len(names) {
			t.Fatalf("%d limiters, want %d", tg.n, len(names))
		}
		for i := range names {
			granted := 0
			for range calls {
				ok, err := tg.call(ctx, i)
				if err != nil {
					t.Fatalf("key %q: %v", names[i], err)
				}
				if ok {
					granted++
				}
			}
			// The leaky bucket spaces grants interval/rate apart, and
			// TryAcquire does not wait in its queue: one at once.
			want := rate
			if s.Algorithm == "leaky-bucket" {
				want = 1
			}
			if granted != want {
				t.Errorf("key %q: %d of %d granted at %d per minute, want %d", names[i], granted, calls, rate, want)
			}
		}
		admin := tg.admin
		if admin == nil {
			admin = e.admin
		}
		for i := range names {
			n, err := memoryUsage(ctx, admin, tg.redisKeys(i))
			if err != nil || n <= 0 {
				t.Errorf("key %q: MEMORY USAGE of %v: %d, %v", names[i], tg.redisKeys(i), n, err)
			}
		}
	}
	for _, s := range systems() {
		if strings.HasPrefix(s.Name, policyPrefix) {
			t.Run(s.Name, func(t *testing.T) { check(t, s, false) })
		}
	}
	for _, s := range systems() {
		if s.Name == "redis_rate" || s.Name == policyPrefix+"token-bucket" || s.Name == policyPrefix+"fixed-window" {
			t.Run("cluster/"+s.Name, func(t *testing.T) { check(t, s, true) })
		}
	}

	// The Cluster's per-node counters: a measurement's figures per node add
	// up to its totals, and 1,000 keys reach every node.
	t.Run("cluster/per-node", func(t *testing.T) {
		s := systems()[slices.IndexFunc(systems(), func(s *system) bool { return s.Name == policyPrefix+"token-bucket" })]
		many := make([]string, 1000)
		for i := range many {
			many[i] = "n" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()
		}
		p := prep{l: limit{Rate: 1000, Interval: time.Second}, names: many, callers: 8, prefix: e.systemPrefix("per-node"), cluster: true}
		tg, err := s.prepare(ctx, e, p)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.close()
		a := e.snap(ctx, onCluster)
		for i := range many {
			if ok, err := tg.call(ctx, i); err != nil || !ok {
				t.Fatalf("key %d: %v %v", i, ok, err)
			}
		}
		b := e.snap(ctx, onCluster)
		var l load
		l.granted, l.seconds, l.before, l.after = uint64(len(many)), 1, a, b
		m := newMeasurement()
		m.fill(&l, true, 0)
		if len(m.Nodes) != clusterPrimaries {
			t.Fatalf("%d nodes' figures, want %d", len(m.Nodes), clusterPrimaries)
		}
		var cmds, runs float64
		for _, n := range m.Nodes {
			if !(n.RedisRuns > 0) || !(n.RedisCmds >= n.RedisRuns) || !(n.RedisCPUUs >= 0) {
				t.Errorf("node %s: %+v", n.Addr, n)
			}
			cmds += float64(n.RedisCmds)
			runs += float64(n.RedisRuns)
		}
		const eps = 1e-9
		if d := cmds - float64(m.RedisCmds); d > eps || d < -eps {
			t.Errorf("nodes' commands add up to %v, the Cluster's are %v", cmds, m.RedisCmds)
		}
		if d := runs - float64(m.RedisRuns); d > eps || d < -eps || !(m.RedisRuns > 0) {
			t.Errorf("nodes' runs add up to %v, the Cluster's are %v", runs, m.RedisRuns)
		}
	})
}
