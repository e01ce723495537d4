package slidinglog

import (
	"time"

	"github.com/redlimit/redlimit/algorithm"
)

// Name is the algorithm as users write it.
const Name = "sliding-log"

// Spec is what the rest of redlimit knows of the sliding log (package
// algorithm's registry). Times are milliseconds: a log's entries group the
// grants of one millisecond.
var Spec = algorithm.Spec{
	Name:        Name,
	Package:     "slidinglog",
	Summary:     "at most rate permits in any window of the interval (exact)",
	New:         func() algorithm.State { return new(State) },
	Unit:        time.Millisecond,
	MinInterval: algorithm.MinInterval,
	MaxInterval: algorithm.MaxInterval,
	SetRate:     "keeps the log: the grants made still count, judged by the new rate and interval",
	ReleaseUpTo: func(st algorithm.State, now int64, lim Limit, n, upTo int64) int64 {
		if s, ok := st.(*State); ok {
			return s.ReleaseUpTo(now, lim, n, upTo)
		}
		return st.Release(now, lim, n)
	},
}
