package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/batch"
	"github.com/redlimit/redlimit/internal/redisclient"
)

// Batching of keyed calls: calls on keys of policies made while others are
// in flight go together in one run of policy_batch (policy.lua), as the
// limiters' calls do (batch.go): on one server the calls of any keys share
// a run (the run declares every key it touches). On a Cluster a script
// touches one slot only, so a run of several keys is one pipeline of one
// command per key (policy_main, or policy_batch for a key's several
// calls): go-redis sends each primary its commands in one round trip.
// Each primary's keys have a batcher of their own (keyNodes), sized as one
// server's. A lone call still goes at once, as one run of policy_main.

var (
	// policyBatchFunction is policy_batch's name in the limiter library.
	policyBatchFunction any = limiterFunction + "_b"
	policyBatchScript       = redis.NewScript(limiterLua + "\nreturn policy_batch(KEYS, ARGV)\n")
)

// keyedCall is one call of policy.lua: its KEYS, and its ARGV with
// args[0] left for the run's now; lone is the same ARGV in policy_lone's
// shorter form, sent instead when the call goes alone (nil: it has none).
type keyedCall struct {
	keys []string
	args []any
	lone []any
	// cmd, where not nil, is the command of the call alone (runCall):
	// its ARGV as alone gives them, after room for FCALL's name, the
	// function, the number of KEYS and the KEYS; sending it then
	// allocates no slice.
	cmd []any
}

// alone is c's ARGV for a run of its own at now: the shorter form where
// it has one.
func (c keyedCall) alone(now string) []any {
	args := c.args
	if c.lone != nil {
		args = c.lone
	}
	args[0] = now
	return args
}

// keyBatcher batches keyed calls, by the key's state key; a call's result
// is its reply's text (policy_main's).
type keyBatcher = batch.Batcher[string, keyedCall, string]

type keyWork = batch.Work[string, keyedCall, string]

// newKeyBatcher returns the store's batcher of keyed calls, sized as the
// limiters' (newBatcher) but for the runs in flight (maxKeyedInFlight).
func (s *Store) newKeyBatcher() *keyBatcher {
	cfg := batch.Config[string, keyedCall, string]{
		Run: s.runKeyed,
		// A hand-back queued behind a busy key is made even if its caller
		// stops waiting: withdrawn, it would leave permits held for nobody.
		Keep: func(c keyedCall) bool {
			op := c.args[1]
			return op == keyCancel || op == keyRelease
		},
		HandBack: s.handBackKeyed,
		MaxCalls: maxBatch, MaxWorks: 1,
		Deadlines: s.bounded,
	}
	if _, single := s.rdb.(*redis.Client); single || s.keyPipeline() != nil {
		cfg.MaxWorks, cfg.MaxRuns = maxWorks, maxKeyedInFlight
	}
	return batch.New(cfg)
}

// keyPipeline is the Cluster client whose pipelines carry runs of several
// keys, nil where runs do not go as pipelines: on one server (a run is one
// script), with auto-pipelining (which pipelines the keys' runs itself),
// and with WithReplicaAck (each change waits for its own WAIT).
func (s *Store) keyPipeline() *redis.ClusterClient {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if _, redirecting := s.scripter.(*redisclient.Redirecting); !ok || !redirecting || s.acks > 0 {
		return nil
	}
	return cc
}

// keyedRun makes one call of policy.lua (args[0] is set here): in a run
// shared with the calls made meanwhile where the store batches. It
// returns the call's reply text.
func (s *Store) keyedRun(ctx context.Context, c keyedCall) (string, error) {
	if s.keyBatch == nil {
		s.keyRuns.Add(1)
		s.keyRunCalls.Add(1)
		return s.runCall(ctx, c)
	}
	return s.keyBatcherFor(ctx, c.keys[0]).Do(ctx, c.keys[0], c)
}

// keyNodes routes keyed calls on a Cluster to one batcher per primary, so
// that a stalled primary holds up the runs of its own keys only, not those
// of the others (a run is over when its slowest primary answered). The
// route of a slot is fixed once made (at the first keyed call, from the
// Cluster's slots then), as every call of a key must go to the batcher
// that keeps its order; a slot that moves later still goes to the batcher
// of its first primary, whose pipelines follow it.
type keyNodes struct {
	mu     sync.Mutex
	routes atomic.Pointer[keyRoutes]
}

// keyRoutes is the batcher of each slot.
type keyRoutes struct {
	slot     [slotCount]uint8
	batchers []*keyBatcher
}

// slotCount is a Cluster's number of hash slots.
const slotCount = 16384

// keyBatcherFor returns the batcher of key's calls: the store's, or on a
// Cluster that of the key's slot.
func (s *Store) keyBatcherFor(ctx context.Context, key string) *keyBatcher {
	cc := s.keyPipeline()
	if cc == nil {
		return s.keyBatch
	}
	r := s.keyNodes.routes.Load()
	if r == nil {
		r = s.routeSlots(ctx, cc)
	}
	return r.batchers[r.slot[keySlot(key)]]
}

// routeSlots makes the routes of the Cluster's slots, once: a batcher per
// primary (up to 256), the store's own for the slots of the first and
// those no primary held; all to the store's own if the Cluster could not
// say.
func (s *Store) routeSlots(ctx context.Context, cc *redis.ClusterClient) *keyRoutes {
	n := &s.keyNodes
	n.mu.Lock()
	defer n.mu.Unlock()
	if r := n.routes.Load(); r != nil {
		return r
	}
	r := &keyRoutes{batchers: []*keyBatcher{s.keyBatch}}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), routeTimeout)
	defer cancel()
	index := map[string]uint8{}
	for _, sr := range clusterRanges(ctx, cc) {
		i, ok := index[sr.primary]
		if !ok {
			if len(index) == 256 {
				continue
			}
			i = uint8(len(index))
			index[sr.primary] = i
			if i > 0 {
				r.batchers = append(r.batchers, s.newKeyBatcher())
			}
		}
		for sl := sr.start; sl <= sr.end; sl++ {
			r.slot[sl] = i
		}
	}
	n.routes.Store(r)
	return r
}

// slotRange is a range of slots and the ID of the primary serving it.
type slotRange struct {
	start, end int64
	primary    string
}

// clusterRanges reads the Cluster's slot ranges: CLUSTER SHARDS, or
// CLUSTER SLOTS before Redis 7; none if neither answers.
func clusterRanges(ctx context.Context, cc *redis.ClusterClient) []slotRange {
	var out []slotRange
	add := func(start, end int64, primary string) {
		if primary != "" && 0 <= start && start <= end && end < slotCount {
			out = append(out, slotRange{start, end, primary})
		}
	}
	if shards, err := cc.ClusterShards(ctx).Result(); err == nil {
		for _, sh := range shards {
			primary := ""
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					primary = n.ID
				}
			}
			for _, sr := range sh.Slots {
				add(sr.Start, sr.End, primary)
			}
		}
		return out
	}
	//lint:ignore SA1019 CLUSTER SLOTS is what Redis 6 has.
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil
	}
	for _, sr := range slots {
		if len(sr.Nodes) > 0 {
			add(int64(sr.Start), int64(sr.End), sr.Nodes[0].ID)
		}
	}
	return out
}

// routeTimeout bounds the reading of the Cluster's slots for routing.
const routeTimeout = 2 * time.Second

// keySlot is key's Cluster hash slot: the CRC16 (XMODEM) of its hash tag
// (the whole key without one), modulo 16384, as the Cluster spec defines.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slotCount
}

// runKeyed makes the calls of works in one run and sets their results:
// each call's reply as policy_main gives it.
func (s *Store) runKeyed(ctx context.Context, works []*keyWork) {
	size := 0
	for _, w := range works {
		size += len(w.Calls)
	}
	s.keyRuns.Add(1)
	s.keyRunCalls.Add(int64(size))
	if len(works) > 1 {
		if cc := s.keyPipeline(); cc != nil {
			s.runKeyedPipeline(ctx, cc, works)
			return
		}
	}
	if size == 1 {
		c := works[0].Calls[0]
		r, err := s.runCall(ctx, c)
		works[0].Results[0], works[0].Err = r, err
		return
	}
	raw, err := s.runPolicyBatch(ctx, works, size)
	if err != nil && len(works) > 1 && crossSlot(err) {
		// A clustered Redis behind one endpoint refuses keys of several
		// slots in one run: from now on each key's calls go alone.
		s.keyBatch.Ungroup()
		for _, w := range works {
			s.runKeyed(ctx, []*keyWork{w})
		}
		return
	}
	setKeyedResults(works, size, raw, err)
}

// batchArgs is policy_batch's KEYS and ARGV for the calls of works. A
// call whose ARGV[5..] (the policy as the client knows it) is the call's
// before sends only its ARGV[2..4]: Redis then parses, and its Lua
// interns, half the strings per call; one whose ARGV[2..] too are the
// call's before, with as many KEYS, sends only "=" (repeatCall).
func batchArgs(works []*keyWork, size int, now string) ([]string, []any) {
	nk := 0
	for _, w := range works {
		for _, c := range w.Calls {
			nk += len(c.keys)
		}
	}
	keys := make([]string, 0, nk)
	args := make([]any, 1, 1+size*6+8)
	args[0] = now
	var prev []any
	prevKeys := 0
	for _, w := range works {
		for _, c := range w.Calls {
			keys = append(keys, c.keys...)
			switch {
			case prev != nil && samePolicyArgs(prev, c.args) && len(c.keys) == prevKeys &&
				prev[1] == c.args[1] && prev[2] == c.args[2] && prev[3] == c.args[3]:
				args = append(args, repeatCall)
			case prev != nil && samePolicyArgs(prev, c.args):
				args = append(args, len(c.keys), policyArgsAt, c.args[1], c.args[2], c.args[3])
			default:
				args = append(args, len(c.keys), len(c.args))
				args = append(args, c.args[1:]...)
			}
			prev, prevKeys = c.args, len(c.keys)
		}
	}
	return keys, args
}

// repeatCall is the ARGV of a call in a batch that is the call before it
// again, on its own KEYS (policy_batch).
const repeatCall = "="

// policyArgsAt is the index of a keyed call's first ARGV of its policy
// (epoch, version, ...): the number of ARGV a call sends without them.
const policyArgsAt = 4

// samePolicyArgs reports whether two keyed calls' ARGV[5..] are alike.
func samePolicyArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := policyArgsAt; i < len(a); i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// setKeyedResults sets the results of works from policy_batch's reply raw
// to their size calls, or err.
func setKeyedResults(works []*keyWork, size int, raw any, err error) {
	if err == nil {
		w, j := 0, 0
		err = splitKeyed(raw, size, func(_ int, text string) {
			for j == len(works[w].Results) {
				w, j = w+1, 0
			}
			works[w].Results[j] = text
			j++
		})
		if err == nil {
			return
		}
	}
	for _, w := range works {
		w.Err = err
	}
}

// keyedReply is one command's reply in a pipelined run.
type keyedReply struct {
	val any
	err error
}

// runKeyedPipeline makes the run of works, each of its own key, on a
// Cluster: one command per work, all in one pipeline, which go-redis
// splits by primary, one round trip to each. A command the Cluster did
// not run (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the client resends
// nothing), or that needs the library loaded or the script sent, is made
// again alone, through the store's redirecting path.
func (s *Store) runKeyedPipeline(ctx context.Context, cc *redis.ClusterClient, works []*keyWork) {
	now := s.nowArg()
	functions := true
	if off := s.functionsOff.Load(); off != 0 && time.Now().UnixNano() < off {
		functions = false
	}
	cmds := make([][]any, len(works))
	for i, w := range works {
		cmds[i] = keyedCommand(w, now, functions)
	}
	// The replies are f's own slice: a caller who leaves (within) takes
	// none of them while the pipeline may still fill it.
	replies, err := within(s, ctx, func(ctx context.Context) ([]keyedReply, error) {
		pipe := cc.Pipeline()
		sent := make([]*redis.Cmd, len(cmds))
		for i, c := range cmds {
			sent[i] = pipe.Do(ctx, c...)
		}
		_, _ = pipe.Exec(ctx) // each command's error is its own
		out := make([]keyedReply, len(sent))
		for i, c := range sent {
			out[i].val, out[i].err = c.Result()
		}
		return out, nil
	})
	for i, w := range works {
		if err != nil {
			w.Err = err
			continue
		}
		r := replies[i]
		switch {
		case r.err != nil && notRun(r.err):
			s.runKeyedAlone(ctx, w)
		case len(w.Calls) == 1:
			w.Results[0], w.Err = keyedText(r.val, r.err)
		default:
			setKeyedResults(works[i:i+1], len(w.Calls), r.val, r.err)
		}
	}
}

// keyedCommand is the command that makes w's calls at now: FCALL of the
// library's function, or EVALSHA of the same code as a script.
func keyedCommand(w *keyWork, now string, functions bool) []any {
	var keys []string
	var args []any
	name, function := "fcall", policyFunction
	script := policyScript
	if len(w.Calls) == 1 {
		c := w.Calls[0]
		keys, args = c.keys, c.alone(now)
	} else {
		keys, args = batchArgs([]*keyWork{w}, len(w.Calls), now)
		function, script = policyBatchFunction, policyBatchScript
	}
	if !functions {
		name, function = "evalsha", script.Hash()
	}
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, name, function, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// runKeyedAlone makes w's calls in a command of their own, through the
// store's redirecting path (which loads the library or sends the script
// as needed).
func (s *Store) runKeyedAlone(ctx context.Context, w *keyWork) {
	if len(w.Calls) == 1 {
		c := w.Calls[0]
		w.Results[0], w.Err = s.runCall(ctx, c)
		return
	}
	raw, err := s.runPolicyBatch(ctx, []*keyWork{w}, len(w.Calls))
	setKeyedResults([]*keyWork{w}, len(w.Calls), raw, err)
}

// notRun: Redis answered err without running the command, which can be
// sent again: the Cluster redirected or paused it, or the function or
// script is not loaded, or functions are refused.
func notRun(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
		functionMissing(err) || functionsRefused(err) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

// runPolicyBatch runs policy_batch on the size calls of works: as a
// function of the limiter library where Redis has it, else as a script.
// If the run's context ends first, the store sees the reply through and
// hands back what it granted (abandonKeyed).
func (s *Store) runPolicyBatch(ctx context.Context, works []*keyWork, size int) (any, error) {
	keys, args := batchArgs(works, size, s.nowArg())
	var abandon func() func(any, error)
	if s.mustGuard(ctx) {
		abandon = func() func(any, error) { return s.abandonKeyed(workCalls(works, size), true) }
	}
	return s.runFunctionIn(ctx, nil, policyBatchFunction, policyBatchScript, keys, args, abandon)
}

// keyedWait waits for the keyed batchers' kept calls (WaitHandBacks).
func (s *Store) keyedWait(ctx context.Context) error {
	if s.keyBatch == nil {
		return nil
	}
	if r := s.keyNodes.routes.Load(); r != nil {
		for _, b := range r.batchers[1:] {
			if err := b.Wait(ctx); err != nil {
				return err
			}
		}
	}
	return s.keyBatch.Wait(ctx)
}
