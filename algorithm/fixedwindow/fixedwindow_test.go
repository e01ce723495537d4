package fixedwindow

import (
	"math/rand/v2"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
)

// fwBase is a clock reading on every grid used here (a multiple of 1000 ms):
// the tests never start at 0, the zero of the clock.
const fwBase int64 = 1_700_000_000_000

// fwClone copies a state deeply, so that probing the copy leaves s alone.
func fwClone(s State) State {
	s.Windows = append(algorithm.Windows(nil), s.Windows...)
	return s
}

// The rules at fixed instants: 3 permits per 10 ms, windows [k*10, k*10+10).
func TestAcquireTable(t *testing.T) {
	lim := algorithm.Limit{Rate: 3, Interval: 10}
	const b = fwBase
	var s State
	steps := []struct {
		now, n, maxWait int64
		want            algorithm.Decision
	}{
		{b + 0, 1, 0, algorithm.Decision{Granted: true, At: b, Remaining: 2, Now: b}},
		{b + 5, 2, 0, algorithm.Decision{Granted: true, At: b + 5, Remaining: 0, Now: b + 5}},
		{b + 9, 1, 0, algorithm.Decision{Wait: 1, Remaining: 0, Now: b + 9}},                                       // full: the next window starts at 10
		{b + 9, 1, 1, algorithm.Decision{Granted: true, At: b + 10, Wait: 1, Remaining: 0, Now: b + 9}},            // reserved in the next window
		{b + 9, 3, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 20, Wait: 11, Now: b + 9}},       // 1+3 > 3 at 10: the window after
		{b + 10, 1, 0, algorithm.Decision{Wait: 20, Remaining: 0, Now: b + 10}},                                    // behind the queue: window 20 is full
		{b + 5, 1, 0, algorithm.Decision{Wait: 21, Remaining: 0, Now: b + 9}},                                      // clock behind: time stays at the last change, 9
		{b + 20, 1, 0, algorithm.Decision{Wait: 10, Remaining: 0, Now: b + 20}},                                    // window 20 holds the 3 reserved
		{b + 30, 3, 0, algorithm.Decision{Granted: true, At: b + 30, Remaining: 0, Now: b + 30}},                   // a fresh window
		{b + 45, 2, 0, algorithm.Decision{Granted: true, At: b + 45, Remaining: 1, Now: b + 45}},                   // windows start on the grid: 40
		{b + 49, 2, 0, algorithm.Decision{Wait: 1, Remaining: 1, Now: b + 49}},                                     // 2+2 > 3
		{b + 49, 1, 0, algorithm.Decision{Granted: true, At: b + 49, Remaining: 0, Now: b + 49}},                   // 2+1 fits
		{b + 50, 3, 0, algorithm.Decision{Granted: true, At: b + 50, Remaining: 0, Now: b + 50}},                   // 6 in [45, 50]: the boundary
		{b + 99, 3, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 99, Remaining: 0, Now: b + 99}}, // no wait needed
	}
	for i, st := range steps {
		if got := s.Acquire(st.now, lim, st.n, st.maxWait); got != st.want {
			t.Fatalf("step %d: Acquire(now=b+%d, n=%d, wait=%d) = %+v; want %+v", i, st.now-b, st.n, st.maxWait, got, st.want)
		}
	}
}

func TestCancelReleaseAvailableForgotten(t *testing.T) {
	lim := algorithm.Limit{Rate: 2, Interval: 10}
	const b = fwBase
	var s State
	if got := s.Available(b, lim); got != 2 || !s.Forgotten(b, lim) {
		t.Fatalf("fresh: Available = %d, Forgotten = %v", got, s.Forgotten(b, lim))
	}
	s.Acquire(b, lim, 2, 0)
	d := s.Acquire(b, lim, 2, algorithm.Unlimited)
	if !d.Granted || d.At != b+10 {
		t.Fatalf("reservation: %+v", d)
	}
	if got := s.Available(b+1, lim); got != 0 {
		t.Fatalf("Available behind a reservation = %d, want 0", got)
	}
	if got := s.Cancel(b+1, lim, b+10, 5); got != 2 {
		t.Fatalf("Cancel = %d, want the 2 reserved", got)
	}
	if got := s.Release(b+1, lim, 1); got != 1 {
		t.Fatalf("Release = %d, want 1", got)
	}
	if got := s.Available(b+1, lim); got != 1 {
		t.Fatalf("Available = %d, want 1", got)
	}
	if s.Forgotten(b+9, lim) || !s.Forgotten(b+10, lim) {
		t.Fatalf("Forgotten(b+9, b+10) = %v, %v; want false, true", s.Forgotten(b+9, lim), s.Forgotten(b+10, lim))
	}
	// A window that has ended is not handed back by Release.
	if got := s.Release(b+10, lim, 5); got != 0 {
		t.Fatalf("Release in the next window = %d, want 0", got)
	}
	if got := s.Available(b+10, lim); got != 2 {
		t.Fatalf("Available in the next window = %d, want 2", got)
	}
}

// TestBoundaryBurst shows the fixed window's documented weakness (seed 001):
// Rate permits at the last millisecond of one window and Rate more at the
// first millisecond of the next, so 2 x Rate pass within 2 ms, and a sliding
// window of Interval holds 2 x Rate.
func TestBoundaryBurst(t *testing.T) {
	lim := algorithm.Limit{Rate: 5, Interval: 1000}
	var s State
	end := fwBase + lim.Interval - 1 // the last ms of window [fwBase, fwBase+1000)
	var at []int64
	for _, now := range []int64{end, end + 1} {
		for i := int64(0); i < lim.Rate; i++ {
			d := s.Acquire(now, lim, 1, 0)
			if !d.Granted || d.At != now {
				t.Fatalf("permit %d at %d: %+v", i, now, d)
			}
			at = append(at, d.At)
		}
		if d := s.Acquire(now, lim, 1, 0); d.Granted {
			t.Fatalf("permit %d at %d granted: the window holds Rate", lim.Rate+1, now)
		}
	}
	span := at[len(at)-1] - at[0] + 1
	var inSlidingWindow int64
	for _, a := range at {
		if a >= end && a < end+lim.Interval {
			inSlidingWindow++
		}
	}
	if int64(len(at)) != 2*lim.Rate || span != 2 || inSlidingWindow != 2*lim.Rate {
		t.Fatalf("%d grants within %d ms, %d in the sliding window [%d, %d); want 2*Rate = %d within 2 ms",
			len(at), span, inSlidingWindow, end, end+lim.Interval, 2*lim.Rate)
	}
}

// TestConstantWindows: however many calls, without reservations the state
// holds at most two windows: the current one, and the one before until the
// next grant (a refusal changes nothing).
func TestConstantWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lim := algorithm.Limit{Rate: 1000, Interval: 100}
	var s State
	now := fwBase
	for i := 0; i < 100_000; i++ {
		now += rng.Int64N(3)
		s.Acquire(now, lim, 1+rng.Int64N(5), 0)
		if len(s.Windows) > 2 {
			t.Fatalf("call %d at %d: %d windows held: %+v", i, now, len(s.Windows), s.Windows)
		}
	}
	// Reservations add future windows, which leave once their time has come.
	for i := 0; i < 50; i++ {
		s.Acquire(now, lim, lim.Rate, algorithm.Unlimited)
	}
	if got := len(s.Windows); got > 51 {
		t.Fatalf("%d windows after 50 reservations of a whole window each", got)
	}
	s.Acquire(now+100*lim.Interval, lim, 1, 0)
	if len(s.Windows) != 1 {
		t.Fatalf("after the reservations passed: %d windows", len(s.Windows))
	}
}

// TestPropertyWindowNeverOverRate: over random traces, the permits granted
// (by grant instant) in each window [k*I, (k+1)*I) of the aligned grid never
// exceed Rate; grants are FIFO; a refusal's retry-after is exact; Remaining
// is exact.
func TestPropertyWindowNeverOverRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var immediate, reserved, refused int
	for trace := 0; trace < 2000; trace++ {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(10), Interval: 1 + rng.Int64N(50)}
		var s State
		perWindow := map[int64]int64{}
		lastAt := int64(0)
		now := fwBase + rng.Int64N(1000)
		for step := 0; step < 100; step++ {
			now += rng.Int64N(2*lim.Interval/3 + 2)
			n := 1 + rng.Int64N(lim.Rate)
			wait := []int64{0, algorithm.Unlimited, rng.Int64N(2 * lim.Interval)}[rng.IntN(3)]
			before := fwClone(s)
			d := s.Acquire(now, lim, n, wait)
			if d.Now != now || d.Remaining != s.Available(now, lim) {
				t.Fatalf("trace %d: %+v at %d; Available after = %d", trace, d, now, s.Available(now, lim))
			}
			checkRemainingExact(t, trace, s, now, lim, d.Remaining)
			if d.Granted {
				if d.At < now || d.Wait != d.At-now || (wait != algorithm.Unlimited && d.Wait > wait) {
					t.Fatalf("trace %d: grant %+v at %d with maxWait %d", trace, d, now, wait)
				}
				if d.At < lastAt {
					t.Fatalf("trace %d: grant at %d after a grant at %d: not FIFO", trace, d.At, lastAt)
				}
				lastAt = d.At
				if d.Wait == 0 {
					immediate++
				} else {
					reserved++
				}
				k := d.At - d.At%lim.Interval
				perWindow[k] += n
				if perWindow[k] > lim.Rate {
					t.Fatalf("trace %d: window [%d, %d) holds %d > rate %d", trace, k, k+lim.Interval, perWindow[k], lim.Rate)
				}
				continue
			}
			if wait == algorithm.Unlimited || d.Wait <= wait {
				t.Fatalf("trace %d: refused %+v with maxWait %d", trace, d, wait)
			}
			refused++
			probe := fwClone(before)
			if p := probe.Acquire(now+d.Wait, lim, n, 0); !p.Granted {
				t.Fatalf("trace %d: refused with retry-after %d, refused again then: %+v", trace, d.Wait, p)
			}
			probe = fwClone(before)
			if p := probe.Acquire(now+d.Wait-1, lim, n, 0); p.Granted {
				t.Fatalf("trace %d: granted 1 ms before the retry-after %d", trace, d.Wait)
			}
		}
	}
	if immediate == 0 || reserved == 0 || refused == 0 {
		t.Fatalf("traces too tame: %d immediate grants, %d reservations, %d refusals", immediate, reserved, refused)
	}
}

// checkRemainingExact: Remaining permits are granted at once, one more are not.
func checkRemainingExact(t *testing.T, trace int, s State, now int64, lim algorithm.Limit, rem int64) {
	t.Helper()
	if rem > 0 {
		p := fwClone(s)
		if d := p.Acquire(now, lim, rem, 0); !d.Granted || d.At != now {
			t.Fatalf("trace %d: Remaining %d at %d, but %+v", trace, rem, now, d)
		}
	}
	if rem < lim.Rate {
		p := fwClone(s)
		if d := p.Acquire(now, lim, rem+1, 0); d.Granted {
			t.Fatalf("trace %d: Remaining %d at %d, but %d granted", trace, rem, now, rem+1)
		}
	}
}

func BenchmarkAcquire(b *testing.B) {
	lim := algorithm.Limit{Rate: 1 << 40, Interval: 60_000}
	var s State
	b.ReportAllocs()
	now := fwBase
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			now++
		}
		s.Acquire(now, lim, 1, 0)
	}
}
