package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
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
// keyed calls on keys of different slots of one primary, made while others
// are in flight, go in one run: one pipeline, one round trip, however many
// keys (and slots) it holds; every call runs once and is decided as the
// limits say.
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
	warmPolicy(ctx, t, s, p, "trips", "warm")
	// The warm-up's last runs answer their callers before they are counted
	// over: a run still in flight would take calls counted on as queued.
	r := s.keyNodes.routes.Load()
	if r == nil {
		t.Fatal("keyed calls on a Cluster made no routes")
	}
	for _, b := range r.batchers {
		for b.InFlight() != 0 {
			time.Sleep(time.Millisecond) // polled: the run is ending
		}
	}

	// Every primary stopped: on each, maxKeyedInFlight calls go at once and
	// stall (each primary's keys have a batcher of their own), the others
	// wait; once the primaries go on, the waiting calls of each go in one
	// run.
	perNode := map[string]int{}
	for _, k := range keys {
		perNode[node[k]]++
	}
	stalled := 0
	for _, a := range addrs {
		if perNode[a] <= maxKeyedInFlight {
			t.Fatalf("primary %s holds %d of the keys; want more than %d", a, perNode[a], maxKeyedInFlight)
		}
		stalled += maxKeyedInFlight
	}
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
	for len(queued) != len(keys)-stalled {
		time.Sleep(time.Millisecond) // polled: the calls are on their way
		queued = queued[:0]
		for _, k := range keys {
			if s.keyBatcherFor(ctx, stateKey(k)).Queued(stateKey(k)) == 1 {
				queued = append(queued, k)
			}
		}
		if len(queued) > len(keys)-stalled {
			// Fewer calls in flight than the test assumed: waiting
			// would never end.
			t.Fatalf("%d calls queued; want %d", len(queued), len(keys)-stalled)
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
	if runs, calls := after.KeyRuns-before.KeyRuns, after.KeyRunCalls-before.KeyRunCalls; runs != int64(stalled+len(addrs)) || calls != int64(len(keys)) {
		t.Errorf("%d calls in %d runs carrying %d; want %d runs carrying %d", len(keys), runs, calls, stalled+len(addrs), len(keys))
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

// TestKeyedClusterPipelineRedoes: a pipelined run whose commands the
// Cluster turns down without running them (the library flushed from every
// primary; a key's slot moved to another primary, which the client's slot
// map does not know yet) makes them again alone, each call answered as
// the same call made alone: nothing lost, nothing run twice.
func TestKeyedClusterPipelineRedoes(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	rdb := cluster.Client(t)
	ctx := context.Background()
	s, clk := fakeClockStore(t, rdb, "redo:")
	limits := []redlimit.Config{redlimit.PerMinute(3).WithAlgorithm(redlimit.FixedWindow), redlimit.TokenBucketConfig(1, time.Minute, 4)}
	entry := map[string]*policyEntry{}
	for _, side := range []string{"a", "b"} {
		norm, err := redlimit.NormalizePolicy(limits)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.SetPolicy(ctx, side, redlimit.PolicyConfig{Limits: norm}, redlimit.SetResetState); err != nil {
			t.Fatal(err)
		}
		if entry[side], _, err = s.policyFor(ctx, side, &redlimit.PolicyConfig{}, false); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	// run makes, in one run, calls (1, 2 or 4) on every key of policy a,
	// then each alone on policy b, and compares their answers.
	run := func(what string) {
		t.Helper()
		type twin struct {
			keys []string
			args []any
			w    *keyWork
			j    int
		}
		var works []*keyWork
		var twins []twin
		for i, k := range keys {
			ka := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "a", Key: k}, len(limits))
			kb := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "b", Key: k}, len(limits))
			w := &keyWork{Key: ka[0]}
			for range []int{1, 2, 4}[i%3] {
				w.Calls = append(w.Calls, keyedCall{keys: ka, args: entry["a"].callArgs(keyAcquire, 1, 0, false, "", nil)})
				twins = append(twins, twin{keys: kb, args: entry["b"].callArgs(keyAcquire, 1, 0, false, "", nil), w: w, j: len(w.Calls) - 1})
			}
			w.Results = make([]string, len(w.Calls))
			works = append(works, w)
		}
		s.runKeyed(ctx, works)
		for _, tw := range twins {
			if tw.w.Err != nil {
				t.Fatalf("%s: %v", what, tw.w.Err)
			}
			want, err := s.runCall(ctx, keyedCall{keys: tw.keys, args: tw.args})
			if err != nil {
				t.Fatal(err)
			}
			if got := tw.w.Results[tw.j]; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %v: in a pipeline %q, alone %q", what, tw.keys[0], got, want)
			}
		}
	}
	run("warm")
	clk.Advance(time.Second)

	// The library gone from every primary: "Function not found".
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.FunctionFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	run("library flushed")
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		if err == nil && len(libs) == 0 {
			err = fmt.Errorf("%s: no library loaded again", c.Options().Addr)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)

	// The slot of policy a's k0 moved to another primary, keys and all,
	// behind the client's back: MOVED.
	key := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "a", Key: "k0"}, len(limits))[0]
	slot := redisSlot(t, rdb, key)
	var from, to *redis.Client
	var fromID, toID, toAddr string
	var all []*redis.Client
	for _, n := range cluster.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		defer c.Close()
		all = append(all, c)
		if c.ClusterCountKeysInSlot(ctx, int(slot)).Val() > 0 {
			from, fromID = c, c.ClusterMyID(ctx).Val()
		} else if to == nil {
			to, toID, toAddr = c, c.ClusterMyID(ctx).Val(), n.Addr
		}
	}
	if from == nil || to == nil {
		t.Fatalf("no owner of slot %d, or no other primary", slot)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	host, port, _ := strings.Cut(toAddr, ":")
	for {
		moving := from.ClusterGetKeysInSlot(ctx, int(slot), 100).Val()
		if len(moving) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range moving {
			args = append(args, k)
		}
		must(from.Do(ctx, args...).Err())
	}
	for _, c := range all {
		must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	}
	run("slot moved")
	if n := to.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("%s not on its new owner after the run", key)
	}
}

// TestKeySlot: keySlot is the slot the Cluster computes, hash tags and
// all.
func TestKeySlot(t *testing.T) {
	rdb := redistest.StartCluster(t, 3, 0).Client(t)
	keys := []string{"", "a", "{}", "{}x", "x{}", "{a}b", "b{a}", "{a", "a}", "}{a}", "{{a}}", "p{u%:k}1", "\xff\x00"}
	rng := rand.New(rand.NewPCG(7, 11))
	for range 200 {
		b := make([]byte, rng.IntN(16))
		for j := range b {
			b[j] = "ab{}%:\x00\xff"[rng.IntN(8)]
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		if want := redisSlot(t, rdb, k); int64(keySlot(k)) != want {
			t.Fatalf("keySlot(%q) = %d; the Cluster says %d", k, keySlot(k), want)
		}
	}
}

// TestKeyedClusterStalledPrimary: while one primary of a Cluster is
// stalled, with calls on its keys in flight and queued, calls on the keys
// of the others are answered: each primary's keys have runs of their own.
func TestKeyedClusterStalledPrimary(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	rdb := cluster.Client(t)
	ctx := context.Background()
	s, err := New(rdb, WithRefusalCache(0), WithPolicyMaxAge(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := redlimit.NewPolicy(s, "stall", []redlimit.Config{redlimit.PerMinute(100).WithAlgorithm(redlimit.FixedWindow)})
	if err != nil {
		t.Fatal(err)
	}
	stateKey := func(key string) string {
		return policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: "stall", Key: key}, 1)[0]
	}
	byNode := map[string][]string{}
	for i := 0; len(byNode) < 3 || len(byNode[cluster.Nodes[0].Addr]) < 2*maxKeyedInFlight; i++ {
		k := fmt.Sprint("s-", i)
		m, err := rdb.MasterForKey(ctx, stateKey(k))
		if err != nil {
			t.Fatal(err)
		}
		byNode[m.Options().Addr] = append(byNode[m.Options().Addr], k)
	}
	var firsts []string // the library on every primary
	for _, ks := range byNode {
		firsts = append(firsts, ks[0])
	}
	warmPolicy(ctx, t, s, p, "stall", firsts...)
	stalled := cluster.Nodes[0]
	stalled.Pause()
	resumed := false
	defer func() {
		if !resumed {
			stalled.Resume()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 2*maxKeyedInFlight)
	mine := byNode[stalled.Addr][:2*maxKeyedInFlight]
	for _, k := range mine {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Key(k).TryAcquire(ctx, 1)
			errs <- err
		}()
	}
	for { // maxKeyedInFlight in flight, the others queued
		n := 0
		for _, k := range mine {
			n += s.keyBatcherFor(ctx, stateKey(k)).Queued(stateKey(k))
		}
		if n == len(mine)-maxKeyedInFlight {
			break
		}
		if n > len(mine)-maxKeyedInFlight {
			t.Fatalf("%d calls queued; want %d", n, len(mine)-maxKeyedInFlight)
		}
		time.Sleep(time.Millisecond) // polled: the calls are on their way
	}
	for addr, ks := range byNode {
		if addr == stalled.Addr {
			continue
		}
		for _, k := range ks[:1] {
			// A deadline that only a call held up by the stalled
			// primary meets: a failure, not a hang.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			r, err := p.Key(k).TryAcquire(ctx, 1)
			cancel()
			if err != nil || !r.Allowed {
				t.Fatalf("key %s of primary %s while %s is stalled: %v, %v", k, addr, stalled.Addr, r, err)
			}
		}
	}
	stalled.Resume()
	resumed = true
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
