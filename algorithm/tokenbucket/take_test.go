package tokenbucket

import (
	"math/rand/v2"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
)

// TestTakeIsAcquireAt: Acquire's short path (Take) answers and leaves the
// bucket exactly as AcquireAt does, over random calls, cancellations,
// releases and gaps.
func TestTakeIsAcquireAt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		lim := algorithm.Limit{Rate: r.Int64N(20) + 1, Interval: r.Int64N(50) + 1}
		lim.Burst = lim.Rate + r.Int64N(5)
		var s State
		now := int64(1_700_000_000_000)
		var granted []algorithm.Decision
		for step := range 300 {
			now += r.Int64N(lim.Interval/4 + 2)
			n := r.Int64N(lim.Burst) + 1
			switch r.IntN(8) {
			case 0:
				s.Release(now, lim, n)
				continue
			case 1:
				if len(granted) > 0 {
					d := granted[len(granted)-1]
					s.Cancel(now, lim, d.At, n)
				}
				continue
			}
			wait := []int64{0, algorithm.Unlimited, r.Int64N(lim.Interval * 3)}[r.IntN(3)]
			ref := s
			want := ref.AcquireAt(now, lim, n, wait, 0)
			got := s.Acquire(now, lim, n, wait)
			if got != want || s != ref {
				t.Fatalf("run %d step %d: Acquire = %+v, state %+v; AcquireAt = %+v, state %+v", run, step, got, s, want, ref)
			}
			if got.Granted {
				granted = append(granted, got)
			}
		}
	}
}
