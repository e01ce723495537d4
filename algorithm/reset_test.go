package algorithm_test

import (
	"testing"

	"github.com/redlimit/redlimit" // registers the algorithms built in
	"github.com/redlimit/redlimit/algorithm"
)

// TestReset: every built-in State is a Resetter, and a used state, once
// reset, answers as a fresh one (spec.New) does, call for call.
func TestReset(t *testing.T) {
	for _, name := range redlimit.Algorithms {
		spec := algorithm.Lookup(string(name))
		t.Run(spec.Name, func(t *testing.T) {
			lim := algorithm.Limit{Rate: 5, Interval: 100}
			if spec.Defaults != nil {
				lim = spec.Defaults(lim)
			}
			used := spec.New()
			r, ok := used.(algorithm.Resetter)
			if !ok {
				t.Fatalf("%T is not a Resetter", used)
			}
			now := int64(1_700_000_000_000)
			for i := range 20 {
				used.Acquire(now+int64(i*7), lim, 1, algorithm.Unlimited)
			}
			r.Reset()
			fresh := spec.New()
			for i := range 40 {
				at := now + 500 + int64(i*3)
				if got, want := used.Acquire(at, lim, 1, 50), fresh.Acquire(at, lim, 1, 50); got != want {
					t.Fatalf("call %d at %d: reset state %+v, fresh state %+v", i, at, got, want)
				}
				if got, want := used.ExpiresAt(), fresh.ExpiresAt(); got != want {
					t.Fatalf("call %d: ExpiresAt %d, fresh %d", i, got, want)
				}
			}
		})
	}
}
