package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/batch"
)

// Batching of keyed calls: calls on keys of policies made while others are
// in flight go together in one run of policy_batch (policy.lua), as the
// limiters' calls do (batch.go): on one server the calls of any keys share
// a run (the run declares every key it touches), on a Cluster those of one
// key. A lone call still goes at once, as one run of policy_main.

var (
	// policyBatchFunction is policy_batch's name in the limiter library.
	policyBatchFunction any = limiterFunction + "_b"
	policyBatchScript       = redis.NewScript(limiterLua + "\nreturn policy_batch(KEYS, ARGV)\n")
)

// keyedCall is one call of policy.lua: its KEYS, and its ARGV with
// args[0] left for the run's now.
type keyedCall struct {
	keys []string
	args []any
}

// keyBatcher batches keyed calls, by the key's state key.
type keyBatcher = batch.Batcher[string, keyedCall, any]

type keyWork = batch.Work[string, keyedCall, any]

// newKeyBatcher returns the store's batcher of keyed calls, sized as the
// limiters' (newBatcher).
func (s *Store) newKeyBatcher() *keyBatcher {
	cfg := batch.Config[string, keyedCall, any]{
		Run: s.runKeyed,
		// A hand-back queued behind a busy key is made even if its caller
		// stops waiting: withdrawn, it would leave permits held for nobody.
		Keep: func(c keyedCall) bool {
			op := c.args[1]
			return op == keyCancel || op == keyRelease
		},
		MaxCalls: maxBatch, MaxWorks: 1,
		Deadlines: s.bounded,
	}
	if _, single := s.rdb.(*redis.Client); single {
		cfg.MaxWorks, cfg.MaxRuns = maxWorks, maxInFlight
	}
	return batch.New(cfg)
}

// keyedRun makes one call of policy.lua (args[0] is set here): in a run
// shared with the calls made meanwhile where the store batches.
func (s *Store) keyedRun(ctx context.Context, keys []string, args []any) (any, error) {
	if s.keyBatch == nil {
		args[0] = s.nowArg()
		s.keyRuns.Add(1)
		s.keyRunCalls.Add(1)
		return s.runPolicy(ctx, keys, args)
	}
	return s.keyBatch.Do(ctx, keys[0], keyedCall{keys: keys, args: args})
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
	if size == 1 {
		c := works[0].Calls[0]
		c.args[0] = s.nowArg()
		r, err := s.runPolicy(ctx, c.keys, c.args)
		works[0].Results[0], works[0].Err = r, err
		return
	}
	var keys []string
	args := make([]any, 1, 1+size*12)
	args[0] = s.nowArg()
	for _, w := range works {
		for _, c := range w.Calls {
			keys = append(keys, c.keys...)
			args = append(args, len(c.keys), len(c.args))
			args = append(args, c.args[1:]...)
		}
	}
	raw, err := s.runPolicyBatch(ctx, keys, args)
	if err != nil && len(works) > 1 && crossSlot(err) {
		// A clustered Redis behind one endpoint refuses keys of several
		// slots in one run: from now on each key's calls go alone.
		s.keyBatch.Ungroup()
		for _, w := range works {
			s.runKeyed(ctx, []*keyWork{w})
		}
		return
	}
	if err == nil {
		r, ok := raw.([]any)
		if !ok || len(r) != size {
			err = fmt.Errorf("%w: a keyed batch of %d calls answered %T of %d", redlimit.ErrCorrupt, size, raw, len(r))
		} else {
			for _, w := range works {
				n := copy(w.Results, r)
				r = r[n:]
			}
			return
		}
	}
	for _, w := range works {
		w.Err = err
	}
}

// runPolicyBatch runs policy_batch: as a function of the limiter library
// where Redis has it, else as a script.
func (s *Store) runPolicyBatch(ctx context.Context, keys []string, args []any) (any, error) {
	return s.runFunction(ctx, policyBatchFunction, policyBatchScript, keys, args)
}

// keyedWait waits for the keyed batcher's kept calls (WaitHandBacks).
func (s *Store) keyedWait(ctx context.Context) error {
	if s.keyBatch == nil {
		return nil
	}
	return s.keyBatch.Wait(ctx)
}
