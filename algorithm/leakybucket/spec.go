package leakybucket

import (
	"time"

	"github.com/redlimit/redlimit/algorithm"
)

// Name is the algorithm as users write it.
const Name = "leaky-bucket"

// Spec is what the rest of redlimit knows of the leaky bucket (package
// algorithm's registry). Capacity is the most permits its queue holds, the
// most one request takes; it defaults to the rate. A request that would
// overflow the queue is refused however long it may wait (Full).
var Spec = algorithm.Spec{
	Name:    Name,
	Package: "leakybucket",
	Summary: "grants spaced interval/rate apart; capacity (default: the rate) permits may wait in its queue",
	New:     func() algorithm.State { return new(State) },
	Unit:    time.Microsecond,
	Params:  algorithm.Capacity,
	Defaults: func(lim algorithm.Limit) algorithm.Limit {
		if lim.Capacity == 0 {
			lim.Capacity = lim.Rate
		}
		return lim
	},
	MaxPermits:            func(lim algorithm.Limit) int64 { return lim.Capacity },
	MinInterval:           algorithm.MinInterval,
	MaxInterval:           algorithm.MaxBucketInterval,
	MaxCountTimesInterval: algorithm.MaxExact,
	SetRate: "drains at the old rate until the change; the work queued keeps the instant it drains at " +
		"and counts against the new capacity",
	Since: true,
	Full: func(st algorithm.State, now int64, lim algorithm.Limit, n int64) bool {
		s, ok := st.(*State)
		if !ok {
			return false
		}
		again := *s // a refusal changes nothing: a copy answers for the state
		return !again.Acquire(now, lim, n, algorithm.Unlimited).Granted
	},
}
