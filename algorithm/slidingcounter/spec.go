package slidingcounter

import (
	"time"

	"github.com/redlimit/redlimit/algorithm"
)

// Name is the algorithm as users write it.
const Name = "sliding-counter"

// Spec is what the rest of redlimit knows of the sliding counter (package
// algorithm's registry). Its weighing multiplies counts by microseconds,
// hence the bounds on the interval and on the rate times the interval.
var Spec = algorithm.Spec{
	Name:                  Name,
	Package:               "slidingcounter",
	Summary:               "the previous window weighed by its overlap: O(1), approximate",
	New:                   func() algorithm.State { return new(State) },
	Unit:                  time.Microsecond,
	MinInterval:           algorithm.MinInterval,
	MaxInterval:           algorithm.MaxBucketInterval,
	MaxCountTimesInterval: algorithm.MaxExact,
	SetRate:               "keeps the window counts: a new rate applies at once, a new interval re-lays the grid under them",
}
