package fixedwindow

import (
	"time"

	"github.com/redlimit/redlimit/algorithm"
)

// Name is the algorithm as users write it.
const Name = "fixed-window"

// Spec is what the rest of redlimit knows of the fixed window (package
// algorithm's registry).
var Spec = algorithm.Spec{
	Name:    Name,
	Package: "fixedwindow",
	Summary: "at most rate per window of the interval aligned to the clock (1s, 1m, 1h, 24h: " +
		"whole seconds, minutes, hours, UTC days); up to 2 x rate in an interval across a window boundary",
	New:         func() algorithm.State { return new(State) },
	Unit:        time.Microsecond,
	MinInterval: algorithm.MinInterval,
	MaxInterval: algorithm.MaxInterval,
	SetRate:     "keeps the current window's count: a new rate applies at once, a new interval lays a new grid under it",
}
