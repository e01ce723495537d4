package tokenbucket

import (
	"time"

	"github.com/redlimit/redlimit/algorithm"
)

// Name is the algorithm as users write it.
const Name = "token-bucket"

// Spec is what the rest of redlimit knows of the token bucket (package
// algorithm's registry). Burst is the bucket's size, the most one request
// takes; it defaults to the rate.
var Spec = algorithm.Spec{
	Name:    Name,
	Package: "tokenbucket",
	Summary: "bursts of up to burst (default: the rate), rate per interval in the long run",
	New:     func() algorithm.State { return new(State) },
	Unit:    time.Microsecond,
	Params:  algorithm.Burst,
	Defaults: func(lim algorithm.Limit) algorithm.Limit {
		if lim.Burst == 0 {
			lim.Burst = lim.Rate
		}
		return lim
	},
	MaxPermits:            func(lim algorithm.Limit) int64 { return lim.Burst },
	MinInterval:           algorithm.MinInterval,
	MaxInterval:           algorithm.MaxBucketInterval,
	MaxCountTimesInterval: algorithm.MaxExact,
	SetRate: "refills at the old rate until the change, then at the new; the tokens carry over, " +
		"capped at the new burst; a debt keeps the instant it is paid",
	Since: true,
}
