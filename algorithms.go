package redlimit

import (
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// Algorithms lists every algorithm built in, the default first. They are
// registered here, in this order, with package algorithm's registry, which
// everything else reads (Config.Normalize, the stores, the command line):
// an algorithm is added with its package's Spec on this list.
//
// The list is explicit rather than each package registering itself from
// its init, because Go initializes independent packages in the order of
// their import paths: the registry's order would then be alphabetical, not
// the default first.
var Algorithms = register(
	slidinglog.Spec,
	fixedwindow.Spec,
	slidingcounter.Spec,
	tokenbucket.Spec,
	leakybucket.Spec,
)

// register adds specs to the registry and returns their names.
func register(specs ...algorithm.Spec) []Algorithm {
	names := make([]Algorithm, len(specs))
	for i, s := range specs {
		names[i] = Algorithm(algorithm.Register(s).Name)
	}
	return names
}

// registered lists the names of every algorithm in the registry, for the
// errors that list them: the built-in ones, then any registered later.
func registered() []Algorithm {
	var names []Algorithm
	for _, s := range algorithm.All() {
		names = append(names, Algorithm(s.Name))
	}
	return names
}
