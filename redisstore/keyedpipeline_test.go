package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// scriptTrips counts, per primary, the round trips that carried keyed
// calls (FCALL or EVALSHA) and those calls: a hook on every node client
// of a Cluster client.
type scriptTrips struct {
	mu    sync.Mutex
	trips map[string]int
	cmds  map[string]int
}

func isScript(c redis.Cmder) bool {
	n := c.Name()
	return n == "fcall" || n == "evalsha"
}

func (h *scriptTrips) hook(addr string) redis.Hook { return &nodeTrips{h: h, addr: addr} }

func (h *scriptTrips) add(addr string, cmds []redis.Cmder) {
	n := 0
	for _, c := range cmds {
		if isScript(c) {
			n++
		}
	}
	if n == 0 {
		return
	}
	h.mu.Lock()
	h.trips[addr]++
	h.cmds[addr] += n
	h.mu.Unlock()
}

func (h *scriptTrips) snapshot() (map[string]int, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, c := map[string]int{}, map[string]int{}
	for k, v := range h.trips {
		t[k] = v
	}
	for k, v := range h.cmds {
		c[k] = v
	}
	return t, c
}

type nodeTrips struct {
	h    *scriptTrips
	addr string
}

func (n *nodeTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (n *nodeTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n.h.add(n.addr, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (n *nodeTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n.h.add(n.addr, cmds)
		return next(ctx, cmds)
	}
}

// TestKeyedClusterCallsShareRoundTrips: on a Cluster of three primaries,
// keyed calls on keys of different slots, made while others are in flight,
// go in one run: one pipeline, one round trip to each primary holding some
// of them, however many keys (and slots) it holds; every call runs once
// and is decided as the limits say.
func TestKeyedClusterCallsShareRoundTrips(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	var addrs []string
	for _, n := range cluster.Nodes {
		addrs = append(addrs, n.Addr)
	}
	trips := &scriptTrips{trips: map[string]int{}, cmds: map[string]int{}}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1})
	rdb.OnNewNode(func(c *redis.Client) { c.AddHook(trips.hook(c.Options().Addr)) })
	defer rdb.Close()
	ctx := context.Background()
	s, err := New(rdb, WithRefusalCache(0), WithPolicyMaxAge(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.keyPipeline() == nil {
		t.Fatal("keyed runs of a Cluster store do not go as pipelines")
	}
	p, err := redlimit.NewPolicy(s, "trips", []redlimit.Config{redlimit.PerMinute(5).WithAlgorithm(redlimit.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	// Keys spread over slots and primaries; a call on each warms the
	// library on every primary, until the policy is cached for good (read
	// after the subscription emptied the cache, as in
	// TestKeyedCallsShareRuns).
	keys := make([]string, 30)
	node := map[string]string{}
	slots := map[int64]bool{}
	stateKey := func(key string) string {
		return policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "trips", Key: key}, 1)[0]
	}
	for i := range keys {
		keys[i] = fmt.Sprint("trip-", i)
		m, err := rdb.MasterForKey(ctx, stateKey(keys[i]))
		if err != nil {
			t.Fatal(err)
		}
		node[keys[i]] = m.Options().Addr
		slots[int64(redisSlot(t, rdb, stateKey(keys[i])))] = true
	}
	if len(slots) != len(keys) {
		t.Fatalf("%d keys in %d slots; want one slot each", len(keys), len(slots))
	}
	for _, a := range addrs {
		if _, err := p.Key("warm-"+a).TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if _, err := p.Key(k).TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	for cached := false; !cached; {
		if _, err := p.Key("warm").TryAcquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		s.pol.mu.Lock()
		cached = s.pol.gen >= 1 && s.pol.m["trips"] != nil
		s.pol.mu.Unlock()
	}

	// Every primary stopped: maxInFlight calls go at once and stall, the
	// others wait; once the primaries go on, the waiting calls go in one
	// run.
	for _, n := range cluster.Nodes {
		n.Pause()
	}
	tripsBefore, cmdsBefore := trips.snapshot()
	before := s.Stats()
	rs := make([]redlimit.Result, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i], errs[i] = p.Key(k).TryAcquire(ctx, 1)
		}()
	}
	// queued waits until every call but the stalled ones is in line, and
	// returns the keys of those queued.
	var queued []string
	for len(queued) != len(keys)-maxInFlight {
		time.Sleep(time.Millisecond) // polled: the calls are on their way
		queued = queued[:0]
		for _, k := range keys {
			if s.keyBatch.Queued(stateKey(k)) == 1 {
				queued = append(queued, k)
			}
		}
	}
	for _, n := range cluster.Nodes {
		n.Resume()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if !rs[i].Allowed {
			t.Errorf("key %s: second call refused by a limit of 5", keys[i])
		}
	}
	after := s.Stats()
	if runs, calls := after.KeyRuns-before.KeyRuns, after.KeyRunCalls-before.KeyRunCalls; runs != maxInFlight+1 || calls != int64(len(keys)) {
		t.Errorf("%d calls in %d runs carrying %d; want %d runs carrying %d", len(keys), runs, calls, maxInFlight+1, len(keys))
	}
	// Per primary: a round trip per stalled call, and one for all the
	// waiting calls it holds; each call sent once.
	wantTrips, wantCmds := map[string]int{}, map[string]int{}
	for _, k := range keys {
		wantCmds[node[k]]++
	}
	for _, k := range queued {
		wantTrips[node[k]] = 1
	}
	for _, k := range keys {
		if !slices.Contains(queued, k) {
			wantTrips[node[k]]++ // a stalled call
		}
	}
	tripsAfter, cmdsAfter := trips.snapshot()
	for _, a := range addrs {
		gotTrips, gotCmds := tripsAfter[a]-tripsBefore[a], cmdsAfter[a]-cmdsBefore[a]
		if gotTrips != wantTrips[a] || gotCmds != wantCmds[a] {
			t.Errorf("primary %s: %d calls in %d round trips; want %d in %d", a, gotCmds, gotTrips, wantCmds[a], wantTrips[a])
		}
		t.Logf("primary %s: %d calls in %d round trips", a, gotCmds, gotTrips)
	}
}

// redisSlot is key's Cluster hash slot, as the Cluster computes it.
func redisSlot(t *testing.T, rdb *redis.ClusterClient, key string) int64 {
	t.Helper()
	n, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
