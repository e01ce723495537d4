package slidingcounter

import (
	"math/rand/v2"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
)

// scBase is a clock reading on every grid used here (a multiple of 1000 ms):
// the tests never start at 0, the zero of the clock.
const scBase int64 = 1_700_000_000_000

// scClone copies a state deeply, so that probing the copy leaves s alone.
func scClone(s State) State {
	s.Windows = append(algorithm.Windows(nil), s.Windows...)
	return s
}

// The rules at fixed instants: 4 permits per 10 ms, windows [k*10, k*10+10);
// n fits at elapsed e when ceil(prev*(10-e)/10) + cur + n <= 4.
func TestAcquireTable(t *testing.T) {
	lim := algorithm.Limit{Rate: 4, Interval: 10}
	const b = scBase
	var s State
	steps := []struct {
		now, n, maxWait int64
		want            algorithm.Decision
	}{
		{b + 0, 4, 0, algorithm.Decision{Granted: true, At: b, Remaining: 0, Now: b}},
		{b + 5, 1, 0, algorithm.Decision{Wait: 8, Remaining: 0, Now: b + 5}},                                   // at 13: ceil(4*7/10) = 3, 3+0+1 <= 4
		{b + 5, 1, 8, algorithm.Decision{Granted: true, At: b + 13, Wait: 8, Remaining: 0, Now: b + 5}},        // reserved for 13
		{b + 13, 1, 0, algorithm.Decision{Wait: 2, Remaining: 0, Now: b + 13}},                                 // at 15: 2+1+1 <= 4
		{b + 15, 2, 0, algorithm.Decision{Wait: 3, Remaining: 1, Now: b + 15}},                                 // at 18: ceil(4*2/10) = 1, 1+1+2 <= 4
		{b + 15, 1, 0, algorithm.Decision{Granted: true, At: b + 15, Remaining: 0, Now: b + 15}},               // 2+1+1 <= 4
		{b + 12, 1, 0, algorithm.Decision{Wait: 3, Remaining: 0, Now: b + 15}},                                 // clock behind: time stays at 15; 18: 1+2+1
		{b + 25, 4, 0, algorithm.Decision{Wait: 5, Remaining: 3, Now: b + 25}},                                 // window 10 holds 2: 4 fit only at 30
		{b + 25, 3, 0, algorithm.Decision{Granted: true, At: b + 25, Remaining: 0, Now: b + 25}},               // ceil(2*5/10) = 1, 1+0+3 <= 4
		{b + 25, 4, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 40, Wait: 15, Now: b + 25}}, // at 30: 3 weigh until 40
		{b + 41, 1, 0, algorithm.Decision{Wait: 12, Remaining: 0, Now: b + 41}},                                // window 40 is full; at 53: ceil(4*7/10) = 3
		{b + 60, 4, 0, algorithm.Decision{Granted: true, At: b + 60, Remaining: 0, Now: b + 60}},               // window 40 no longer weighs
	}
	for i, st := range steps {
		if got := s.Acquire(st.now, lim, st.n, st.maxWait); got != st.want {
			t.Fatalf("step %d: Acquire(now=b+%d, n=%d, wait=%d) = %+v; want %+v", i, st.now-b, st.n, st.maxWait, got, st.want)
		}
	}
}

func TestCancelReleaseAvailableForgotten(t *testing.T) {
	lim := algorithm.Limit{Rate: 4, Interval: 10}
	const b = scBase
	var s State
	if got := s.Available(b, lim); got != 4 || !s.Forgotten(b, lim) {
		t.Fatalf("fresh: Available = %d, Forgotten = %v", got, s.Forgotten(b, lim))
	}
	s.Acquire(b, lim, 3, 0)
	if got := s.Release(b+1, lim, 2); got != 2 {
		t.Fatalf("Release = %d, want 2", got)
	}
	if got := s.Available(b+1, lim); got != 3 {
		t.Fatalf("Available after Release = %d, want 3", got)
	}
	s.Acquire(b+1, lim, 3, 0) // window b holds 4
	d := s.Acquire(b+2, lim, 1, algorithm.Unlimited)
	if !d.Granted || d.At != b+13 {
		t.Fatalf("reservation: %+v; want at b+13", d)
	}
	if got := s.Available(b+2, lim); got != 0 {
		t.Fatalf("Available behind a reservation = %d, want 0", got)
	}
	if got := s.Cancel(b+3, lim, d.At, 1); got != 1 {
		t.Fatalf("Cancel = %d, want 1", got)
	}
	// The window of the previous grid weighs until two intervals after it
	// began: the state is forgotten then.
	if s.Forgotten(b+19, lim) || !s.Forgotten(b+20, lim) {
		t.Fatalf("Forgotten(b+19, b+20) = %v, %v; want false, true", s.Forgotten(b+19, lim), s.Forgotten(b+20, lim))
	}
	if got := s.Available(b+15, lim); got != 2 {
		t.Fatalf("Available at b+15 = %d, want 4 - ceil(4*5/10) = 2", got)
	}
	if got := s.Available(b+20, lim); got != 4 {
		t.Fatalf("Available at b+20 = %d, want 4", got)
	}
}

// TestPropertyRetryAfterExact: over random traces, every grant satisfies the
// documented rule (recomputed from the grants themselves), grants are FIFO,
// every refusal's retry-after is exact (the same request on a copy of the
// state before the call is granted at once at now+Wait and not at
// now+Wait-1), Remaining is exact, and the state holds O(1) windows.
func TestPropertyRetryAfterExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var immediate, reserved, refused int
	for trace := 0; trace < 1000; trace++ {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(10), Interval: 1 + rng.Int64N(50)}
		onlyNow := trace%4 == 0 // no reservations: at most the previous and current windows
		var s State
		type grant struct{ at, n int64 }
		var grants []grant
		now := scBase + rng.Int64N(1000)
		for step := 0; step < 100; step++ {
			now += rng.Int64N(lim.Interval/2 + 2)
			n := 1 + rng.Int64N(lim.Rate)
			wait := []int64{0, algorithm.Unlimited, rng.Int64N(2 * lim.Interval)}[rng.IntN(3)]
			if onlyNow {
				wait = 0
			}
			before := scClone(s)
			d := s.Acquire(now, lim, n, wait)
			if d.Granted { // a refusal changes nothing, old windows included
				checkWindows(t, trace, s, now, lim, onlyNow)
			}
			if d.Now != now || d.Remaining != s.Available(now, lim) {
				t.Fatalf("trace %d: %+v at %d; Available after = %d", trace, d, now, s.Available(now, lim))
			}
			checkRemainingExact(t, trace, s, now, lim, d.Remaining)
			if d.Granted {
				if d.At < now || d.Wait != d.At-now || (wait != algorithm.Unlimited && d.Wait > wait) {
					t.Fatalf("trace %d: grant %+v at %d with maxWait %d", trace, d, now, wait)
				}
				if k := len(grants); k > 0 && d.At < grants[k-1].at {
					t.Fatalf("trace %d: grant at %d after a grant at %d: not FIFO", trace, d.At, grants[k-1].at)
				}
				// The rule, recomputed from the earlier grants.
				w := d.At - d.At%lim.Interval
				var prev, cur int64
				for _, g := range grants {
					switch {
					case g.at >= w-lim.Interval && g.at < w:
						prev += g.n
					case g.at >= w:
						cur += g.n
					}
				}
				if prev*(lim.Interval-(d.At-w)) > (lim.Rate-cur-n)*lim.Interval {
					t.Fatalf("trace %d: %d granted at %d (window %d) with prev %d, cur %d, rate %d", trace, n, d.At, w, prev, cur, lim.Rate)
				}
				grants = append(grants, grant{d.At, n})
				if d.Wait == 0 {
					immediate++
				} else {
					reserved++
				}
				continue
			}
			if wait == algorithm.Unlimited || d.Wait <= wait {
				t.Fatalf("trace %d: refused %+v with maxWait %d", trace, d, wait)
			}
			refused++
			probe := scClone(before)
			if p := probe.Acquire(now+d.Wait, lim, n, 0); !p.Granted {
				t.Fatalf("trace %d: refused with retry-after %d, refused again then: %+v", trace, d.Wait, p)
			}
			probe = scClone(before)
			if p := probe.Acquire(now+d.Wait-1, lim, n, 0); p.Granted {
				t.Fatalf("trace %d: granted 1 ms before the retry-after %d", trace, d.Wait)
			}
		}
	}
	if immediate == 0 || reserved == 0 || refused == 0 {
		t.Fatalf("traces too tame: %d immediate grants, %d reservations, %d refusals", immediate, reserved, refused)
	}
}

// checkWindows: the state holds the previous and current windows of now and
// reserved future ones, nothing older; without reservations, at most 2.
func checkWindows(t *testing.T, trace int, s State, now int64, lim algorithm.Limit, onlyNow bool) {
	t.Helper()
	cur := now - now%lim.Interval
	var held int
	for _, w := range s.Windows {
		if w.Start < cur-lim.Interval {
			t.Fatalf("trace %d: at %d a window from %d is held: %+v", trace, now, w.Start, s.Windows)
		}
		if w.Start <= now {
			held++
		}
	}
	if held > 2 || (onlyNow && len(s.Windows) > 2) {
		t.Fatalf("trace %d: at %d, %d windows held: %+v", trace, now, len(s.Windows), s.Windows)
	}
}

// checkRemainingExact: Remaining permits are granted at once, one more are not.
func checkRemainingExact(t *testing.T, trace int, s State, now int64, lim algorithm.Limit, rem int64) {
	t.Helper()
	if rem > 0 {
		p := scClone(s)
		if d := p.Acquire(now, lim, rem, 0); !d.Granted || d.At != now {
			t.Fatalf("trace %d: Remaining %d at %d, but %+v", trace, rem, now, d)
		}
	}
	if rem < lim.Rate {
		p := scClone(s)
		if d := p.Acquire(now, lim, rem+1, 0); d.Granted {
			t.Fatalf("trace %d: Remaining %d at %d, but %d granted", trace, rem, now, rem+1)
		}
	}
}

// TestMeasureSlidingWindowExcess measures (it does not hold the rules to a
// figure) the approximation: the most permits granted in any sliding window
// of Interval over random traces, as a fraction of Rate. The only assertion
// is the hard bound: a sliding window overlaps two grid windows, each of
// which holds at most Rate.
func TestMeasureSlidingWindowExcess(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	worst, sumWorst := 0.0, 0.0
	var worstLim algorithm.Limit
	const traces = 1000
	for trace := 0; trace < traces; trace++ {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(100), Interval: 10 + rng.Int64N(990)}
		var s State
		type grant struct{ at, n int64 }
		var grants []grant
		now := scBase + rng.Int64N(100_000)
		for step := 0; step < 200; step++ {
			// Idle gaps and bursts: a step is often 0, sometimes most of a window.
			switch rng.IntN(4) {
			case 0:
				now += rng.Int64N(lim.Interval)
			case 1:
				now += rng.Int64N(3)
			}
			n := 1 + rng.Int64N(max(1, lim.Rate/4))
			wait := []int64{0, 0, algorithm.Unlimited, rng.Int64N(lim.Interval)}[rng.IntN(4)]
			if d := s.Acquire(now, lim, n, wait); d.Granted {
				grants = append(grants, grant{d.At, n})
			}
		}
		// Grants are FIFO, so the heaviest window of Interval starts at a
		// grant: two pointers over the sorted instants.
		var most, in int64
		j := 0
		for i := range grants {
			for j < len(grants) && grants[j].at < grants[i].at+lim.Interval {
				in += grants[j].n
				j++
			}
			most = max(most, in)
			in -= grants[i].n
		}
		if most > 2*lim.Rate {
			t.Fatalf("trace %d: %d permits in a window of %d ms, more than 2 x rate %d", trace, most, lim.Interval, lim.Rate)
		}
		f := float64(most) / float64(lim.Rate)
		sumWorst += f
		if f > worst {
			worst, worstLim = f, lim
		}
	}
	t.Logf("most permits in any sliding window of Interval: %.3f x Rate (rate %d per %d ms); mean over %d traces of each trace's worst: %.3f x Rate",
		worst, worstLim.Rate, worstLim.Interval, traces, sumWorst/traces)
}

func BenchmarkAcquire(b *testing.B) {
	lim := algorithm.Limit{Rate: 1 << 40, Interval: 60_000}
	var s State
	b.ReportAllocs()
	now := scBase
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			now++
		}
		s.Acquire(now, lim, 1, 0)
	}
}
