package leakybucket

import (
	"math/rand/v2"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
)

// lbBase is a clock reading (Unix ms, a multiple of 1000): the tests never
// start at 0, the zero of the clock.
const lbBase int64 = 1_700_000_000_000

// The rules at fixed instants: a queue of 3 draining 1 permit per 10 ms.
func TestAcquireTable(t *testing.T) {
	lim := algorithm.Limit{Rate: 1, Interval: 10, Capacity: 3}
	const b = lbBase
	var s State
	steps := []struct {
		now, n, maxWait int64
		want            algorithm.Decision
	}{
		{b + 0, 1, 0, algorithm.Decision{Granted: true, At: b, Remaining: 0, Now: b}},                        // 1 queued until 10
		{b + 5, 1, 0, algorithm.Decision{Wait: 5, Remaining: 0, Now: b + 5}},                                 // not empty: no TryAcquire
		{b + 5, 1, 5, algorithm.Decision{Granted: true, At: b + 10, Wait: 5, Remaining: 0, Now: b + 5}},      // behind the 0.5 left
		{b + 5, 2, algorithm.Unlimited, algorithm.Decision{Wait: 15, Remaining: 0, Now: b + 5}},              // 1.5 + 2 > 3: full, whatever the wait
		{b + 5, 1, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 20, Wait: 15, Now: b + 5}}, // 1.5 + 1 fits
		{b + 5, 1, algorithm.Unlimited, algorithm.Decision{Wait: 25, Remaining: 0, Now: b + 5}},              // 2.5 + 1 > 3
		{b + 2, 1, algorithm.Unlimited, algorithm.Decision{Wait: 25, Remaining: 0, Now: b + 5}},              // clock behind: time stays at 5
		{b + 30, 3, 0, algorithm.Decision{Granted: true, At: b + 30, Remaining: 0, Now: b + 30}},             // empty: the whole queue at once
		{b + 30, 1, algorithm.Unlimited, algorithm.Decision{Wait: 30, Remaining: 0, Now: b + 30}},            // full
		{b + 59, 1, 0, algorithm.Decision{Wait: 1, Remaining: 0, Now: b + 59}},
		{b + 60, 1, 0, algorithm.Decision{Granted: true, At: b + 60, Remaining: 0, Now: b + 60}},
	}
	for i, st := range steps {
		if got := s.Acquire(st.now, lim, st.n, st.maxWait); got != st.want {
			t.Fatalf("step %d: Acquire(now=b+%d, n=%d, wait=%d) = %+v; want %+v", i, st.now-b, st.n, st.maxWait, got, st.want)
		}
	}
}

// With Rate 3 per 10 units grants are 10/3 units apart: instants at the
// clock's resolution, rounded up (never before their turn), so successive
// grants are 4, 3, 3 units apart, 10 for 3.
func TestFractionalSpacing(t *testing.T) {
	lim := algorithm.Limit{Rate: 3, Interval: 10, Capacity: 10}
	const b = lbBase
	var s State
	for i, want := range []int64{0, 4, 7, 10, 14, 17, 20} {
		if d := s.Acquire(b, lim, 1, algorithm.Unlimited); !d.Granted || d.At != b+want {
			t.Fatalf("grant %d: %+v; want at b+%d", i, d, want)
		}
	}
}

func TestCancelReleaseAvailableForgotten(t *testing.T) {
	lim := algorithm.Limit{Rate: 1, Interval: 10, Capacity: 5}
	const b = lbBase
	var s State
	if got := s.Available(b, lim); got != 5 || !s.Forgotten(b, lim) {
		t.Fatalf("fresh: Available = %d, Forgotten = %v", got, s.Forgotten(b, lim))
	}
	s.Acquire(b, lim, 1, 0)
	if got := s.Release(b, lim, 1); got != 0 {
		t.Fatalf("Release = %d, want 0: a granted permit has left the queue", got)
	}
	d := s.Acquire(b+1, lim, 2, algorithm.Unlimited) // 0.9 queued ahead
	if !d.Granted || d.At != b+10 {
		t.Fatalf("reservation: %+v; want at b+10", d)
	}
	if got := s.Available(b+1, lim); got != 0 {
		t.Fatalf("Available with a queue = %d, want 0", got)
	}
	if got := s.Cancel(b+2, lim, d.At, 2); got != 2 {
		t.Fatalf("Cancel = %d, want the 2 queued", got)
	}
	if got := s.Release(b+2, lim, 5); got != 0 {
		t.Fatalf("Release = %d, want 0", got)
	}
	if s.Forgotten(b+9, lim) || !s.Forgotten(b+10, lim) {
		t.Fatalf("Forgotten(b+9, b+10) = %v, %v; want false, true", s.Forgotten(b+9, lim), s.Forgotten(b+10, lim))
	}
	if got := s.Available(b+10, lim); got != 5 {
		t.Fatalf("Available when drained = %d, want 5", got)
	}
}

// lbModel is the queue as virtual scheduling, independent of the deficit and
// expiry the rules keep: the queued work finishes at fin/Rate (fin counts
// time x Rate, so it stays an integer). A request is granted when the work
// ahead has finished, at the clock's resolution: ceil(max(fin,
// now*Rate)/Rate), never before; the queue holds max(0, fin - now*Rate)
// permits x Interval.
type lbModel struct{ fin int64 }

func (m lbModel) owed(now int64, lim algorithm.Limit) int64 { return max(0, m.fin-now*lim.Rate) }

// TestPropertyQueue: over random traces of Acquire (maxWait 0, bounded and
// Unlimited), Release and Cancel of the newest reservation:
//   - every decision is what the model above predicts, exactly;
//   - a TryAcquire (maxWait 0) is granted only when less than a
//     millisecond of work is queued;
//   - a request that would take the queue beyond Capacity is refused
//     whatever its maxWait, Unlimited included;
//   - grants are spaced: for any two grants j < m (in order), At_m - At_j >=
//     floor(sum of n_k*Interval/Rate over j <= k < m), the permits granted in
//     between being drained at Rate per Interval (grant instants are
//     floor(fin/Rate) of an increasing fin);
//   - Release returns 0 and changes nothing; Cancel of the newest, still
//     waiting reservation returns its permits and undoes it.
func TestPropertyQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var immediate, reserved, full, cancelled int
	for trace := 0; trace < 2000; trace++ {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(10), Interval: 1 + rng.Int64N(50), Capacity: 1 + rng.Int64N(10)}
		var s State
		var m lbModel
		type grant struct{ at, n int64 }
		var grants []grant
		now := lbBase + rng.Int64N(1000)
		for step := 0; step < 100; step++ {
			now += rng.Int64N(2*lim.Interval/lim.Rate + 2)
			owed := m.owed(now, lim)
			empty := owed == 0 // no work ahead
			room := max(0, (lim.Capacity*lim.Interval-owed)/lim.Interval)
			if !empty {
				room = 0
			}
			if got := s.Available(now, lim); got != room {
				t.Fatalf("trace %d: Available at %d = %d with a queue of %d; want %d", trace, now, got, owed, room)
			}
			switch op := rng.IntN(10); {
			case op == 0:
				if got := s.Release(now, lim, 1+rng.Int64N(5)); got != 0 {
					t.Fatalf("trace %d: Release = %d", trace, got)
				}
				continue
			case op == 1 && len(grants) > 0 && grants[len(grants)-1].at > now && lim.Interval >= lim.Rate:
				// (Above a permit per ms, instants shared by several grants
				// cannot tell the newest from those before it: Cancel then
				// holds what it cannot prove nothing was queued after.)
				g := grants[len(grants)-1]
				if got := s.Cancel(now, lim, g.at, g.n); got != g.n {
					t.Fatalf("trace %d: Cancel of the newest reservation (%d at %d) at %d = %d", trace, g.n, g.at, now, got)
				}
				grants = grants[:len(grants)-1]
				m.fin -= g.n * lim.Interval
				cancelled++
				continue
			}
			n := 1 + rng.Int64N(lim.Capacity)
			wait := []int64{0, algorithm.Unlimited, rng.Int64N(2 * lim.Interval)}[rng.IntN(3)]
			d := s.Acquire(now, lim, n, wait)

			start := max(m.fin, now*lim.Rate)
			want := algorithm.Decision{Wait: algorithm.CeilDiv(owed, lim.Rate), Now: now}
			overflow := owed+n*lim.Interval > lim.Capacity*lim.Interval
			if !overflow && (wait == algorithm.Unlimited || want.Wait <= wait) {
				want.Granted, want.At = true, now+want.Wait
				m.fin = start + n*lim.Interval
			}
			if after := m.owed(now, lim); after == 0 {
				want.Remaining = max(0, (lim.Capacity*lim.Interval-after)/lim.Interval)
			}
			if d != want {
				t.Fatalf("trace %d (%+v): Acquire(now=%d, n=%d, wait=%d) = %+v; the model (queue %d) says %+v", trace, lim, now, n, wait, d, owed, want)
			}
			if wait == 0 && d.Granted && !empty {
				t.Fatalf("trace %d: TryAcquire granted with a queue of %d", trace, owed)
			}
			if overflow {
				full++
				if d.Granted {
					t.Fatalf("trace %d: %d granted beyond capacity %d (queue %d, maxWait %d)", trace, n, lim.Capacity, owed, wait)
				}
			}
			if !d.Granted {
				continue
			}
			if d.Wait == 0 {
				immediate++
			} else {
				reserved++
			}
			grants = append(grants, grant{d.At, n})
			var sum int64
			for j := len(grants) - 2; j >= 0; j-- {
				sum += grants[j].n
				if d.At-grants[j].at < sum*lim.Interval/lim.Rate {
					t.Fatalf("trace %d (%+v): grant at %d only %d ms after the grant at %d; %d permits between take %d ms",
						trace, lim, d.At, d.At-grants[j].at, grants[j].at, sum, sum*lim.Interval/lim.Rate)
				}
			}
		}
	}
	if immediate == 0 || reserved == 0 || full == 0 || cancelled == 0 {
		t.Fatalf("traces too tame: %d immediate grants, %d reservations, %d overflows, %d cancels", immediate, reserved, full, cancelled)
	}
}

func BenchmarkAcquire(b *testing.B) {
	lim := algorithm.Limit{Rate: 1 << 40, Interval: 60_000, Capacity: 1 << 40}
	var s State
	b.ReportAllocs()
	now := lbBase
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			now++
		}
		s.Acquire(now, lim, 1, 0)
	}
}

// At one per microsecond (10^6 per second, the finest spacing the stores'
// clock tells apart), requests that never wait pass at the rate. Faster,
// a request that never waits still gets one per microsecond: a second one
// in the same microsecond would come before its turn.
func TestFastRateTryAcquire(t *testing.T) {
	for _, perUS := range []int64{1, 2} {
		lim := algorithm.Limit{Rate: perUS * 1_000_000, Interval: 1_000_000, Capacity: 100}
		var s State
		granted := 0
		for us := int64(0); us < 1000; us++ {
			for i := 0; i < 3; i++ {
				if s.Acquire(lbBase+us, lim, 1, 0).Granted {
					granted++
				}
			}
		}
		if granted != 1000 {
			t.Fatalf("%d granted in 1000 µs at %d per µs by TryAcquire; want 1000", granted, perUS)
		}
	}
}

// A config change keeping the state: the queue drains at the old rate up to
// the change, and the work still queued keeps the instant it drains at, so
// a newcomer after a rate rise is not scheduled ahead of the waiters
// already asleep; from then on grants are spaced at the new rate.
func TestConfigChangeKeepsTheWaitersOrder(t *testing.T) {
	const b = lbBase
	old := algorithm.Limit{Rate: 1, Interval: 100, Capacity: 10}
	var s State
	for i := range 3 {
		if d := s.Acquire(b, old, 1, algorithm.Unlimited); !d.Granted || d.At != b+100*int64(i) {
			t.Fatalf("grant %d: %+v", i, d)
		}
	}
	// 10 per 100 ms from b+50: the waiters sleep until b+100 and b+200, the
	// last one's slot ends at b+300.
	raised := algorithm.Limit{Rate: 10, Interval: 100, Capacity: 30, Since: b + 50}
	for i := range 3 {
		if d := s.Acquire(b+50, raised, 1, algorithm.Unlimited); !d.Granted || d.At != b+300+10*int64(i) {
			t.Fatalf("newcomer %d after the rise: %+v; want at b+%d", i, d, 300+10*i)
		}
	}
	// Lowered to 1 per 100 ms again at b+305: the queue drained at 10 per
	// 100 ms until then, and what is left (until b+330) keeps its instant.
	lowered := algorithm.Limit{Rate: 1, Interval: 100, Capacity: 10, Since: b + 305}
	if d := s.Acquire(b+310, lowered, 1, algorithm.Unlimited); !d.Granted || d.At != b+330 {
		t.Fatalf("newcomer after the cut: %+v; want at b+330", d)
	}
	if d := s.Acquire(b+310, lowered, 1, algorithm.Unlimited); !d.Granted || d.At != b+430 {
		t.Fatalf("next: %+v; want at b+430, 100 ms later", d)
	}
}

// Spacing that is not a whole number of milliseconds is kept to the
// microsecond: 12 per 10 ms (833.3 µs apart), capacity 18. After 11 permits
// at 24 ms, 17 more fit the queue at 33 ms, but the work ahead drains only
// at 33.1667 ms: they are granted at 33.167 ms, never before.
func TestSubMillisecondSpacing(t *testing.T) {
	const b, ms = lbBase * 1000, 1000 // microseconds
	lim := algorithm.Limit{Rate: 12, Interval: 10 * ms, Capacity: 18}
	var s State
	if d := s.Acquire(b+24*ms, lim, 11, 0); !d.Granted {
		t.Fatalf("11 at 24 ms: %+v", d)
	}
	if d := s.Acquire(b+33*ms, lim, 17, 0); d.Granted || d.Wait != 167 {
		t.Fatalf("17 at 33 ms without waiting: %+v; want refused, retry after 167 µs", d)
	}
	if d := s.Acquire(b+33*ms+166, lim, 17, 0); d.Granted || d.Wait != 1 {
		t.Fatalf("17 at 33.166 ms: %+v; want refused, retry after 1 µs", d)
	}
	if d := s.Acquire(b+33*ms, lim, 17, algorithm.Unlimited); !d.Granted || d.At != b+33*ms+167 {
		t.Fatalf("17 at 33 ms, waiting: %+v; want granted at 33.167 ms", d)
	}
}
