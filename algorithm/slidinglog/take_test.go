package slidinglog

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestTakeIsAcquireAt: Acquire's short path (Take) answers and leaves the
// log exactly as AcquireAt does, over random calls, releases and gaps.
func TestTakeIsAcquireAt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		lim := Limit{Rate: r.Int64N(20) + 1, Interval: r.Int64N(50) + 1}
		var s State
		now := int64(1_700_000_000_000)
		for step := range 300 {
			now += r.Int64N(lim.Interval/4 + 2)
			n := r.Int64N(lim.Rate) + 1
			if r.IntN(8) == 0 {
				s.Release(now, lim, n)
				continue
			}
			wait := []int64{0, Unlimited, r.Int64N(lim.Interval)}[r.IntN(3)]
			ref := s.Clone().(*State)
			want := ref.AcquireAt(now, lim, n, wait, 0)
			got := s.Acquire(now, lim, n, wait)
			if got != want || !reflect.DeepEqual(&s, ref) {
				t.Fatalf("run %d step %d: Acquire = %+v, state %+v; AcquireAt = %+v, state %+v", run, step, got, s, want, *ref)
			}
		}
	}
}
