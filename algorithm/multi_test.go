package algorithm_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

var multiSpecs = []*algorithm.Spec{&slidinglog.Spec, &fixedwindow.Spec, &slidingcounter.Spec, &tokenbucket.Spec, &leakybucket.Spec}

// randomParts makes two or three limits of random algorithms, each a rate
// of 1..5 per 10..200 ms (in the part's unit).
func randomParts(r *rand.Rand) []algorithm.Part {
	parts := make([]algorithm.Part, 2+r.IntN(2))
	for i := range parts {
		spec := multiSpecs[r.IntN(len(multiSpecs))]
		ms := 10 + r.Int64N(190)
		lim := algorithm.Limit{Rate: 1 + r.Int64N(5), Interval: ms * 1000 / int64(spec.Unit/1000)}
		lim.Burst, lim.Capacity = 1+r.Int64N(6), 1+r.Int64N(6)
		parts[i] = algorithm.Part{Spec: spec, State: spec.New(), Limit: lim}
	}
	return parts
}

// Over random traces of requests against several limits: a grant is
// charged to every limit, as each would have granted it alone at once; a
// refusal changes no limit; and a refused request asked again after its
// retry-after (nobody else asking) is granted unless a queue is full.
func TestAcquireAll(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		parts := randomParts(r)
		out := make([]algorithm.Decision, len(parts))
		now := int64(1_000_000_000)
		for step := range 60 {
			now += r.Int64N(40_000) // µs
			n := int64(1)
			before := make([]algorithm.State, len(parts))
			alone := make([]bool, len(parts))
			for i, p := range parts {
				before[i] = p.State.Clone()
				u := int64(p.Spec.Unit / 1000)
				alone[i] = p.State.Clone().Acquire(now/u, p.Limit, n, 0).Granted
			}
			d := algorithm.AcquireAll(parts, now, n, 0, out)
			all := true
			for _, ok := range alone {
				all = all && ok
			}
			if d.Granted != all {
				t.Fatalf("seed %d step %d: granted %v, each alone %v", seed, step, d.Granted, alone)
			}
			if d.Granted {
				for i, p := range parts {
					u := int64(p.Spec.Unit / 1000)
					want := before[i].Clone()
					want.Acquire(now/u, p.Limit, n, 0)
					if !reflect.DeepEqual(p.State, want) {
						t.Fatalf("seed %d step %d: limit %d not charged as alone", seed, step, i)
					}
				}
				continue
			}
			for i, p := range parts {
				if !reflect.DeepEqual(p.State, before[i]) {
					t.Fatalf("seed %d step %d: a refusal changed limit %d", seed, step, i)
				}
			}
			if d.Refused < 0 || alone[d.Refused] && !d.Full {
				t.Fatalf("seed %d step %d: refused by %d, which grants alone (%v)", seed, step, d.Refused, alone)
			}
			if d.Full {
				continue
			}
			again := make([]algorithm.Part, len(parts))
			for i, p := range parts {
				again[i] = p
				again[i].State = p.State.Clone()
			}
			if d2 := algorithm.AcquireAll(again, now+d.Wait, n, 0, make([]algorithm.Decision, len(parts))); !d2.Granted {
				t.Fatalf("seed %d step %d: refused with retry-after %d µs, refused again then (%+v)", seed, step, d.Wait, d2)
			}
		}
	}
}

// Over random traces of requests against several limits that may wait:
// a grant after now is a reservation at one instant on every limit; the
// instants of a key's grants never go backwards; a request that would
// wait longer than allowed is refused and changes nothing; and a
// reservation handed back on every limit, with no other outstanding,
// leaves the limits answering as if it had never been asked.
func TestAcquireAllReserves(t *testing.T) {
	var reserved, handedBack, refused int
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 11))
		parts := randomParts(r)
		out := make([]algorithm.Decision, len(parts))
		now := int64(1_000_000_000)
		var last, latest int64 // the latest grant instant, of any grant
		for step := range 80 {
			now += r.Int64N(30_000)
			n := 1 + r.Int64N(3)
			maxWait := algorithm.Unlimited
			if r.IntN(3) == 0 {
				maxWait = r.Int64N(100_000)
			}
			fits := true
			for _, p := range parts {
				fits = fits && n <= p.Spec.Max(p.Limit)
			}
			if !fits {
				continue
			}
			before := make([]algorithm.State, len(parts))
			for i, p := range parts {
				before[i] = p.State.Clone()
			}
			d := algorithm.AcquireAll(parts, now, n, maxWait, out)
			if !d.Granted {
				refused++
				for i, p := range parts {
					if !reflect.DeepEqual(p.State, before[i]) {
						t.Fatalf("seed %d step %d: a refusal changed limit %d", seed, step, i)
					}
				}
				if !d.Full && (maxWait == algorithm.Unlimited || d.Wait <= 0) {
					t.Fatalf("seed %d step %d: refused %+v, waiting up to %d", seed, step, d, maxWait)
				}
				continue
			}
			at := now + d.Wait
			if maxWait != algorithm.Unlimited && d.Wait > maxWait {
				t.Fatalf("seed %d step %d: waits %d, longer than %d", seed, step, d.Wait, maxWait)
			}
			for i, p := range parts {
				u := int64(p.Spec.Unit / 1000)
				if out[i].At*u != at && (d.Wait > 0 || out[i].At != now/u) {
					t.Fatalf("seed %d step %d: limit %d granted at %d, the request at %d (unit %d µs)", seed, step, i, out[i].At, at, u)
				}
			}
			if at < last {
				t.Fatalf("seed %d step %d: granted at %d, before an earlier grant's %d", seed, step, at, last)
			}
			last = at
			if d.Wait == 0 {
				continue
			}
			reserved++
			if latest >= now || r.IntN(2) == 0 {
				latest = max(latest, at)
				continue // other reservations outstanding: kept
			}
			// Handed back at once, on every limit.
			for i, p := range parts {
				u := int64(p.Spec.Unit / 1000)
				if got := p.State.Cancel(now/u, p.Limit, at/u, n); got != n {
					t.Fatalf("seed %d step %d: limit %d handed back %d of %d", seed, step, i, got, n)
				}
			}
			handedBack++
			last = 0
			// Asked the same now, the limits answer as before it.
			m := 1 + r.Int64N(n)
			was := make([]algorithm.Part, len(parts))
			for i, p := range parts {
				was[i] = p
				was[i].State = before[i].Clone()
			}
			got, want := make([]algorithm.Decision, len(parts)), make([]algorithm.Decision, len(parts))
			dg := algorithm.AcquireAll(parts, now, m, algorithm.Unlimited, got)
			dw := algorithm.AcquireAll(was, now, m, algorithm.Unlimited, want)
			if dg != dw || !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d: after the hand-back %+v %+v; never asked %+v %+v", seed, step, dg, got, dw, want)
			}
			last = now + dg.Wait
			latest = max(latest, last)
		}
	}
	t.Logf("%d reserved, %d handed back, %d refused", reserved, handedBack, refused)
	if reserved == 0 || handedBack == 0 || refused == 0 {
		t.Fatal("the traces missed a kind of answer")
	}
}
