package redisstore

import (
	"context"
	"slices"

	"github.com/redlimit/redlimit"
)

// Handing back what keyed callers that are gone were granted, as
// handback.go does for limiters: a keyed acquire whose caller leaves while
// it is in flight is seen through by the store, and a grant in its reply
// is handed back in the background (keyedHandBack says how). Where
// the caller leaves is where the call is abandoned: in a run of a keyed
// batcher (its HandBack, handBackKeyed) or in a script run the store
// watches itself (a client that does not keep to contexts: abandonKeyed).

// workCalls is the size calls of works, in order.
func workCalls(works []*keyWork, size int) []keyedCall {
	calls := make([]keyedCall, 0, size)
	for _, w := range works {
		calls = append(calls, w.Calls...)
	}
	return calls
}

// abandonKeyed is what to do when the caller of a script run of calls
// leaves it: the reply (policy_batch's where batch is set, else
// policy_main's), when it comes, is seen through.
func (s *Store) abandonKeyed(calls []keyedCall, batch bool) func(any, error) {
	s.hb.abandoned.Add(int64(len(calls)))
	s.hb.settling.Add()
	return func(raw any, err error) {
		defer s.hb.settling.Done()
		if err != nil {
			return
		}
		results := make([]string, len(calls))
		if batch {
			err = splitKeyed(raw, len(calls), func(i int, text string) { results[i] = text })
		} else {
			results[0], err = keyedText(raw, nil)
		}
		if err == nil {
			s.handBackKeyed("", calls, results)
		}
	}
}

// handBackKeyed hands back, in the background, the grants in results to
// calls, whose callers have gone (the keyed batchers' Config.HandBack).
func (s *Store) handBackKeyed(_ string, calls []keyedCall, results []string) {
	var back []keyedCall
	for i, c := range calls {
		if i >= len(results) {
			break
		}
		if b, ok := keyedHandBack(c, results[i]); ok {
			back = append(back, b)
		}
	}
	s.inBackground(len(back), func(ctx context.Context) {
		for _, c := range back {
			if s.keyedHandBackRun(ctx, c) {
				s.hb.handedBack.Add(1)
			} else {
				s.hb.failed.Add(1)
			}
		}
	})
}

// keyedHandBackRun makes the hand-back c and says whether Redis took it.
// A policy changed since the grant (flags -4, -5) fails it: the grant was
// made under limits no longer in force, which bounded it.
func (s *Store) keyedHandBackRun(ctx context.Context, c keyedCall) bool {
	text, err := s.keyedRun(ctx, c)
	if err != nil {
		return false
	}
	var buf [maxKeyedNums]int64
	r, err := keyedNums(text, &buf)
	if err != nil {
		return false
	}
	nums := replyNums(r)
	if f := nums.at(1); f != 0 && f != 1 {
		return false
	}
	_, err = handedBack(nums[1:], nil)
	return err == nil
}

// keyedHandBack is the call that hands back the grant in reply to the
// keyed acquire c, if reply holds a grant: a cancel of the reservation at
// its instant, or, for a grant due at once under buckets only, a release
// (onlyBuckets); both under the policy as c knew it.
func keyedHandBack(c keyedCall, reply string) (keyedCall, bool) {
	if len(c.args) < 4 || c.args[1] != any(keyAcquire) {
		return keyedCall{}, false
	}
	var buf [maxKeyedNums]int64
	r, err := keyedNums(reply, &buf)
	if err != nil {
		return keyedCall{}, false
	}
	nums := replyNums(r)
	var wait int64
	switch nums.at(1) {
	case 1: // granted at once by the one limit
	case 0:
		x := nums[2:]
		if x.at(0) != 1 {
			return keyedCall{}, false // refused: nothing to hand back
		}
		wait = x.at(3)
	default:
		return keyedCall{}, false
	}
	args := slices.Clone(c.args)
	args[0] = nil
	if wait <= 0 && onlyBuckets(args) {
		args[1], args[3] = boxedOp(keyRelease), int64(-1)
	} else {
		args[1], args[3] = boxedOp(keyCancel), nums.at(0)+max(wait, 0)
	}
	return keyedCall{keys: c.keys, args: args}, true
}

// onlyBuckets says whether every limit of the policy in a call's args
// (policyEntry.appendArgs) is a bucket. A bucket's grant due at once is
// handed back by a release (a token bucket's permits put back, a leaky
// bucket's gone: nothing); a cancel at an instant past hands back nothing
// there. A window's, a log's or a counter's is handed back by a cancel at
// its instant, from the window it was counted in, where a release would
// take it from the window of now, perhaps a later one. A policy mixing
// both is cancelled: its buckets keep the grant, which no window exceeds.
func onlyBuckets(args []any) bool {
	count, ok := args[8].(int)
	if !ok || len(args) < 9+count {
		return false
	}
	for _, a := range args[9 : 9+count] {
		cfg, err := decodeConfig(a)
		if err != nil || cfg.Algorithm != redlimit.TokenBucket && cfg.Algorithm != redlimit.LeakyBucket {
			return false
		}
	}
	return true
}

// keyedAbandoned is the keyed calls abandoned in the keyed batchers' runs.
func (s *Store) keyedAbandoned() int64 {
	if s.keyBatch == nil {
		return 0
	}
	n := s.keyBatch.Abandoned()
	if r := s.keyNodes.routes.Load(); r != nil {
		for _, b := range r.batchers[1:] {
			n += b.Abandoned()
		}
	}
	return n
}
