package tokenbucket

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/redlimit/redlimit/algorithm"
)

// tbBase is a clock reading (Unix ms, a multiple of 1000): the tests never
// start at 0, the zero of the clock.
const tbBase int64 = 1_700_000_000_000

// The rules at fixed instants: a bucket of 3 refilling 1 token per 10 ms.
func TestAcquireTable(t *testing.T) {
	lim := algorithm.Limit{Rate: 1, Interval: 10, Burst: 3}
	const b = tbBase
	var s State
	steps := []struct {
		now, n, maxWait int64
		want            algorithm.Decision
	}{
		{b + 0, 2, 0, algorithm.Decision{Granted: true, At: b, Remaining: 1, Now: b}},
		{b + 5, 2, 0, algorithm.Decision{Wait: 5, Remaining: 1, Now: b + 5}},                                     // 1.5 tokens: the 2nd at 10
		{b + 5, 2, 5, algorithm.Decision{Granted: true, At: b + 10, Wait: 5, Remaining: 0, Now: b + 5}},          // reserved for 10
		{b + 5, 3, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 40, Wait: 35, Now: b + 5}},     // 3 more after those
		{b + 40, 1, 0, algorithm.Decision{Wait: 10, Remaining: 0, Now: b + 40}},                                  // the bucket is empty at 40
		{b + 3, 1, 0, algorithm.Decision{Wait: 45, Remaining: 0, Now: b + 5}},                                    // clock behind: time stays at the last change, 5 (a refusal changes nothing)
		{b + 50, 1, 0, algorithm.Decision{Granted: true, At: b + 50, Remaining: 0, Now: b + 50}},                 // one token back
		{b + 100, 3, 0, algorithm.Decision{Granted: true, At: b + 100, Remaining: 0, Now: b + 100}},              // full again: a burst of 3
		{b + 115, 2, 0, algorithm.Decision{Wait: 5, Remaining: 1, Now: b + 115}},                                 // 1.5 tokens
		{b + 115, 1, 0, algorithm.Decision{Granted: true, At: b + 115, Remaining: 0, Now: b + 115}},              // 0.5 left
		{b + 116, 1, algorithm.Unlimited, algorithm.Decision{Granted: true, At: b + 120, Wait: 4, Now: b + 116}}, // 0.6 tokens: 0.4 more take 4 ms
	}
	for i, st := range steps {
		if got := s.Acquire(st.now, lim, st.n, st.maxWait); got != st.want {
			t.Fatalf("step %d: Acquire(now=b+%d, n=%d, wait=%d) = %+v; want %+v", i, st.now-b, st.n, st.maxWait, got, st.want)
		}
	}
}

func TestCancelReleaseAvailableForgotten(t *testing.T) {
	lim := algorithm.Limit{Rate: 1, Interval: 10, Burst: 3}
	const b = tbBase
	var s State
	if got := s.Available(b, lim); got != 3 || !s.Forgotten(b, lim) {
		t.Fatalf("fresh: Available = %d, Forgotten = %v", got, s.Forgotten(b, lim))
	}
	s.Acquire(b, lim, 3, 0)
	d := s.Acquire(b, lim, 2, algorithm.Unlimited)
	if !d.Granted || d.At != b+20 {
		t.Fatalf("reservation: %+v; want at b+20", d)
	}
	if got := s.Cancel(b+1, lim, d.At, 2); got != 2 {
		t.Fatalf("Cancel = %d, want 2", got)
	}
	if got := s.Available(b+1, lim); got != 0 {
		t.Fatalf("Available after Cancel = %d, want 0 (0.1 token)", got)
	}
	if got := s.Release(b+1, lim, 5); got != 2 {
		t.Fatalf("Release = %d, want 2 (whole tokens missing from the bucket)", got)
	}
	// It filled the bucket: the 0.9 of a token missing went back too.
	if got := s.Available(b+1, lim); got != 3 {
		t.Fatalf("Available after Release = %d, want 3", got)
	}
	if got := s.Release(b+1, lim, 5); got != 0 {
		t.Fatalf("Release beyond the bucket's size = %d, want 0", got)
	}
	if !s.Forgotten(b+1, lim) {
		t.Fatalf("a full bucket is not forgotten")
	}
	if got := s.Available(b+10, lim); got != 3 {
		t.Fatalf("Available when full again = %d, want 3", got)
	}
}

// TestReservationRoundingSlack documents why the span bound below allows one
// ms of refill for spans that begin with a reservation: grant instants are
// whole ms, rounded up, so a token that came at 1.5 ms is granted at 2 and
// the next at 3: 2 permits in the 1 ms span [2, 3], where a continuous
// bucket allows Burst + Rate*1/Interval = 1 + 2/3.
func TestReservationRoundingSlack(t *testing.T) {
	lim := algorithm.Limit{Rate: 2, Interval: 3, Burst: 1}
	const b = tbBase
	var s State
	var at []int64
	for range 3 {
		d := s.Acquire(b, lim, 1, algorithm.Unlimited)
		at = append(at, d.At)
	}
	if want := []int64{b, b + 2, b + 3}; fmt.Sprint(at) != fmt.Sprint(want) {
		t.Fatalf("grants at %v; want %v", at, want)
	}
	granted, t1, t2 := int64(2), at[1], at[2]
	if exact := granted*lim.Interval <= lim.Burst*lim.Interval+lim.Rate*(t2-t1); exact {
		t.Fatalf("the exact bound holds here; the slack is not needed")
	}
	if granted*lim.Interval > lim.Burst*lim.Interval+lim.Rate*(t2-t1+1) {
		t.Fatalf("even the bound with 1 ms of slack fails")
	}
}

// TestPropertySpanBound: over random traces, the permits granted (by grant
// instant) in any span [t1, t2] are at most Burst + Rate*(t2-t1)/Interval, in
// exact integers: granted*Interval <= Burst*Interval + Rate*(t2-t1). That is
// exact for spans whose first grant was immediate, and for every span when
// Rate divides Interval; a span that begins with a reservation gets one ms
// of refill more (Rate*(t2-t1+1)), the rounding of its instant up to a whole
// ms (TestReservationRoundingSlack). Also: grants are FIFO, a refusal's
// retry-after is exact, and Remaining is exact.
func TestPropertySpanBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var immediate, reserved, refused int
	for trace := 0; trace < 2000; trace++ {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(10), Interval: 1 + rng.Int64N(50), Burst: 1 + rng.Int64N(10)}
		if trace%3 == 0 {
			lim.Interval = lim.Rate * (1 + rng.Int64N(10)) // Rate divides Interval: no rounding
		}
		type grant struct {
			at, n   int64
			reserve bool
		}
		var grants []grant
		var s State
		now := tbBase + rng.Int64N(1000)
		for step := 0; step < 100; step++ {
			now += rng.Int64N(2*lim.Interval/lim.Rate + 2)
			n := 1 + rng.Int64N(lim.Burst)
			wait := []int64{0, algorithm.Unlimited, rng.Int64N(2 * lim.Interval)}[rng.IntN(3)]
			before := s
			d := s.Acquire(now, lim, n, wait)
			if d.Now != now || d.Remaining != s.Available(now, lim) {
				t.Fatalf("trace %d: %+v at %d; Available after = %d", trace, d, now, s.Available(now, lim))
			}
			if d.Remaining > 0 {
				if p := s; !p.Acquire(now, lim, d.Remaining, 0).Granted {
					t.Fatalf("trace %d: Remaining %d at %d not granted", trace, d.Remaining, now)
				}
			}
			if d.Remaining < lim.Burst {
				if p := s; p.Acquire(now, lim, d.Remaining+1, 0).Granted {
					t.Fatalf("trace %d: Remaining %d at %d, but %d granted", trace, d.Remaining, now, d.Remaining+1)
				}
			}
			if !d.Granted {
				if wait == algorithm.Unlimited || d.Wait <= wait {
					t.Fatalf("trace %d: refused %+v with maxWait %d", trace, d, wait)
				}
				refused++
				if p := before; !p.Acquire(now+d.Wait, lim, n, 0).Granted {
					t.Fatalf("trace %d: refused with retry-after %d, refused again then", trace, d.Wait)
				}
				if p := before; p.Acquire(now+d.Wait-1, lim, n, 0).Granted {
					t.Fatalf("trace %d: granted 1 ms before the retry-after %d", trace, d.Wait)
				}
				continue
			}
			if d.At < now || d.Wait != d.At-now || (wait != algorithm.Unlimited && d.Wait > wait) {
				t.Fatalf("trace %d: grant %+v at %d with maxWait %d", trace, d, now, wait)
			}
			if k := len(grants); k > 0 && d.At < grants[k-1].at {
				t.Fatalf("trace %d: grant at %d after a grant at %d: not FIFO", trace, d.At, grants[k-1].at)
			}
			grants = append(grants, grant{d.At, n, d.Wait > 0})
			if d.Wait > 0 {
				reserved++
			} else {
				immediate++
			}
		}
		// Grants are sorted by instant: every span [t1, t2] that matters runs
		// from the first grant at t1 to the last at t2.
		for i := range grants {
			if i > 0 && grants[i-1].at == grants[i].at {
				continue
			}
			var sum int64
			for j := i; j < len(grants); j++ {
				sum += grants[j].n
				if j+1 < len(grants) && grants[j+1].at == grants[j].at {
					continue
				}
				t1, t2 := grants[i].at, grants[j].at
				span := t2 - t1
				if grants[i].reserve && lim.Interval%lim.Rate != 0 {
					span++
				}
				if sum*lim.Interval > lim.Burst*lim.Interval+lim.Rate*span {
					t.Fatalf("trace %d (%+v): %d permits granted in [%d, %d] (first a reservation: %v)",
						trace, lim, sum, t1, t2, grants[i].reserve)
				}
			}
		}
	}
	if immediate == 0 || reserved == 0 || refused == 0 {
		t.Fatalf("traces too tame: %d immediate grants, %d reservations, %d refusals", immediate, reserved, refused)
	}
}

// TestAgreesWithXTimeRate holds the rules to golang.org/x/time/rate, an
// independent implementation, over random traces: Rate R per 1000 ms and
// Burst B against rate.NewLimiter(R, B) (both start full), at instants that
// are multiples of 125 ms from a fixed base so that its float arithmetic is
// exact. AllowN is our maxWait 0; ReserveN is our Unlimited, its delay
// rounded up to whole ms against our Wait. n > B: x/time/rate refuses, and
// ours is not asked (its State assumes n <= Burst).
//
// Config changes (SetLimitAt, SetBurstAt, ours a Limit with Since) come
// between the calls, where ours differs from x/time/rate by design in two
// cases the traces step around: a bucket in debt (ours keeps the instants
// of the reservations made, TestConfigChangeKeepsTheWaitersOrder), and a
// full bucket, which ours forgets (a fresh x/time/rate limiter stands in).
// A state records one change: a second comes once a grant wrote the first.
func TestAgreesWithXTimeRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	base := time.UnixMilli(tbBase)
	steps, changes := 0, 0
	for trace := 0; trace < 300; trace++ {
		R, B := 1+rng.Int64N(20), 1+rng.Int64N(10)
		lim := algorithm.Limit{Rate: R, Interval: 1000, Burst: B}
		ref := rate.NewLimiter(rate.Limit(R), int(B))
		var s State
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("trace %d (rate %d/s, burst %d): %s\ntrace:\n%s", trace, R, B, fmt.Sprintf(format, args...), strings.Join(log, "\n"))
		}
		off := int64(0) // ms since base
		for step := 0; step < 40; step++ {
			steps++
			off += 125 * []int64{0, 0, 1, 2, 4, 8, 16}[rng.IntN(7)]
			now, at := tbBase+off, base.Add(time.Duration(off)*time.Millisecond)
			if tokens := ref.TokensAt(at); rng.IntN(4) == 0 && tokens >= 0 && (s.Scale == 0 || s.Rate == lim.Rate && s.Burst == lim.Burst) {
				R, B = 1+rng.Int64N(20), 1+rng.Int64N(10)
				if tokens == float64(lim.Burst) {
					ref = rate.NewLimiter(rate.Limit(R), int(B))
				} else {
					ref.SetLimitAt(at, rate.Limit(R))
					ref.SetBurstAt(at, int(B))
				}
				lim = algorithm.Limit{Rate: R, Interval: 1000, Burst: B, Since: now}
				log = append(log, fmt.Sprintf("  +%dms %v tokens: now %d/s, burst %d", off, tokens, R, B))
				changes++
			}
			n := 1 + rng.Int64N(B+2)
			reserve := rng.IntN(2) == 0
			if n > B {
				log = append(log, fmt.Sprintf("  +%dms n=%d reserve=%v: over the burst", off, n, reserve))
				if r := ref.ReserveN(at, int(n)); r.OK() {
					fail("x/time/rate reserved %d > burst", n)
				}
				if ref.AllowN(at, int(n)) {
					fail("x/time/rate allowed %d > burst", n)
				}
				continue
			}
			if !reserve {
				want := ref.AllowN(at, int(n))
				d := s.Acquire(now, lim, n, 0)
				log = append(log, fmt.Sprintf("  +%dms AllowN(%d): x/time/rate %v, ours %+v", off, n, want, d))
				if d.Granted != want || (d.Granted && d.At != now) {
					fail("AllowN mismatch")
				}
			} else {
				r := ref.ReserveN(at, int(n))
				if !r.OK() {
					fail("x/time/rate refused a reservation of %d <= burst", n)
				}
				delay := r.DelayFrom(at)
				wantMS := int64((delay + time.Millisecond - 1) / time.Millisecond)
				d := s.Acquire(now, lim, n, algorithm.Unlimited)
				log = append(log, fmt.Sprintf("  +%dms ReserveN(%d): x/time/rate delay %v (%d ms), ours %+v", off, n, delay, wantMS, d))
				if !d.Granted || d.Wait != wantMS {
					fail("ReserveN mismatch")
				}
			}
			// The tokens left agree too (whole tokens, none while in debt).
			want := max(0, int64(ref.TokensAt(at)))
			if got := s.Available(now, lim); got != want {
				log = append(log, fmt.Sprintf("  +%dms tokens: x/time/rate %v, ours %d", off, ref.TokensAt(at), got))
				fail("tokens mismatch")
			}
		}
	}
	t.Logf("%d steps agreed, %d config changes", steps, changes)
}

func BenchmarkAcquire(b *testing.B) {
	lim := algorithm.Limit{Rate: 1 << 40, Interval: 60_000, Burst: 1 << 40}
	var s State
	b.ReportAllocs()
	now := tbBase
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			now++
		}
		s.Acquire(now, lim, 1, 0)
	}
}

// A config change keeping the state accounts the time before it at the old
// rate, as x/time/rate's SetLimitAt does: the two examples of a rate raised
// and lowered after the bucket was emptied, against x/time/rate itself.
func TestConfigChangeAccountsThePastAtTheOldRate(t *testing.T) {
	const b, sec = tbBase, 1000
	base := time.UnixMilli(b)
	check := func(name string, s *State, ref *rate.Limiter, now int64, lim algorithm.Limit, want int64) {
		t.Helper()
		if got := s.Available(now, lim); got != want {
			t.Errorf("%s: Available at b+%dms = %d, want %d", name, now-b, got, want)
		}
		if ref := int64(ref.TokensAt(base.Add(time.Duration(now-b) * time.Millisecond))); ref != want {
			t.Errorf("%s: x/time/rate has %d tokens at b+%dms, want %d", name, ref, now-b, want)
		}
	}

	// 1/s, burst 10, emptied at b; raised to 100/s at b+5s.
	var s State
	ref := rate.NewLimiter(1, 10)
	old := algorithm.Limit{Rate: 1, Interval: sec, Burst: 10}
	if d := s.Acquire(b, old, 10, 0); !d.Granted || !ref.AllowN(base, 10) {
		t.Fatalf("emptying the bucket: %+v", d)
	}
	raised := algorithm.Limit{Rate: 100, Interval: sec, Burst: 10, Since: b + 5*sec}
	ref.SetLimitAt(base.Add(5*time.Second), 100)
	check("raised", &s, ref, b+5*sec, raised, 5)
	check("raised", &s, ref, b+5*sec+20, raised, 7) // 2 more in 20 ms at 100/s
	check("raised", &s, ref, b+5*sec+100, raised, 10)

	// 10/s, burst 10, emptied at b; lowered to 1/s at b+500ms.
	s = State{}
	ref = rate.NewLimiter(10, 10)
	old = algorithm.Limit{Rate: 10, Interval: sec, Burst: 10}
	if d := s.Acquire(b, old, 10, 0); !d.Granted || !ref.AllowN(base, 10) {
		t.Fatalf("emptying the bucket: %+v", d)
	}
	lowered := algorithm.Limit{Rate: 1, Interval: sec, Burst: 10, Since: b + 500}
	ref.SetLimitAt(base.Add(500*time.Millisecond), 1)
	check("lowered", &s, ref, b+500, lowered, 5)
	check("lowered", &s, ref, b+sec, lowered, 5) // 5.5: not 10, though the old rate would have refilled it by then
	check("lowered", &s, ref, b+1500, lowered, 6)
	if s.Forgotten(b+sec, lowered) {
		t.Errorf("forgotten at b+1s, when the old rate would have refilled it")
	}
	if !s.Forgotten(b+5500, lowered) || s.Forgotten(b+5499, lowered) {
		t.Errorf("Forgotten(b+5499ms, b+5500ms) = %v, %v; want false, true", s.Forgotten(b+5499, lowered), s.Forgotten(b+5500, lowered))
	}
	// A grant writes the state under the new config: it stays exact.
	if d := s.Acquire(b+1500, lowered, 6, 0); !d.Granted || d.Remaining != 0 {
		t.Fatalf("taking the 6 tokens at b+1.5s: %+v", d)
	}
	if d := s.Acquire(b+1500, lowered, 1, algorithm.Unlimited); d.Wait != sec {
		t.Fatalf("next token after 1 s at 1/s: %+v", d)
	}
}

// A config change keeps the instants of reservations already made: after a
// rate rise, a newcomer is served after the waiters, not before them (there
// x/time/rate, which counts the debt again at the new rate, serves it first).
func TestConfigChangeKeepsTheWaitersOrder(t *testing.T) {
	const b, sec = tbBase, 1000
	base := time.UnixMilli(b)
	old := algorithm.Limit{Rate: 1, Interval: sec, Burst: 1}
	var s State
	ref := rate.NewLimiter(1, 1)
	var last int64
	for i := range 3 {
		d := s.Acquire(b, old, 1, algorithm.Unlimited)
		r := ref.ReserveN(base, 1)
		if !d.Granted || d.At != b+int64(i)*sec || r.DelayFrom(base) != time.Duration(i)*time.Second {
			t.Fatalf("grant %d: %+v, x/time/rate delay %v", i, d, r.DelayFrom(base))
		}
		last = d.At
	}
	// 100/s from b+100ms: the waiters still sleep until b+1s and b+2s.
	raised := algorithm.Limit{Rate: 100, Interval: sec, Burst: 1, Since: b + 100}
	ref.SetLimitAt(base.Add(100*time.Millisecond), 100)
	d := s.Acquire(b+100, raised, 1, algorithm.Unlimited)
	if !d.Granted || d.At != last+10 {
		t.Fatalf("newcomer after the rise: %+v; want at b+%dms, 10 ms (the new spacing) after the last waiter", d, last+10-b)
	}
	if r := ref.ReserveN(base.Add(100*time.Millisecond), 1); base.Add(100 * time.Millisecond).Add(r.DelayFrom(base.Add(100 * time.Millisecond))).After(time.UnixMilli(last)) {
		t.Fatalf("x/time/rate no longer serves the newcomer before the waiters: the comment above is stale")
	}
	// And from then on at the new rate.
	if d := s.Acquire(b+100, raised, 1, algorithm.Unlimited); d.At != last+20 {
		t.Fatalf("second newcomer: %+v; want at b+%dms", d, last+20-b)
	}
}

// TestAgreesWithXTimeRateMicroseconds holds the rules, counting time in
// microseconds as the stores do, to x/time/rate with calls 100 µs apart (and
// a few µs more or less) on a fake clock: rates from 1000 to 10^6 per
// second, whose spacing is not a whole number of milliseconds. Decisions
// are equal call by call; a reservation's instant is x/time/rate's rounded
// up to the µs. The rates have no factor 2 or 5 so that no call falls on
// an instant where a token is exactly complete, where x/time/rate's float
// arithmetic could round either way.
func TestAgreesWithXTimeRateMicroseconds(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const b = tbBase * 1000 // µs
	base := time.UnixMicro(b)
	granted, reserved := 0, 0
	for trace := 0; trace < 200; trace++ {
		R := 1001 + 2*rng.Int64N(499_000)
		for R%5 == 0 {
			R += 2
		}
		B := 1 + rng.Int64N(10)
		lim := algorithm.Limit{Rate: R, Interval: 1_000_000, Burst: B}
		ref := rate.NewLimiter(rate.Limit(R), int(B))
		var s State
		off := int64(0)
		for step := 0; step < 200; step++ {
			off += 100 + rng.Int64N(7) - 3
			now, at := b+off, base.Add(time.Duration(off)*time.Microsecond)
			n := 1 + rng.Int64N(B)
			if rng.IntN(8) > 0 {
				want := ref.AllowN(at, int(n))
				if d := s.Acquire(now, lim, n, 0); d.Granted != want {
					t.Fatalf("trace %d (%d/s, burst %d) +%dµs AllowN(%d): x/time/rate %v, ours %+v", trace, R, B, off, n, want, d)
				}
				if want {
					granted++
				}
				continue
			}
			r := ref.ReserveN(at, int(n))
			wantAt := at.Add(r.DelayFrom(at))
			d := s.Acquire(now, lim, n, algorithm.Unlimited)
			if got := time.UnixMicro(d.At); !d.Granted || got.Before(wantAt) || got.Sub(wantAt) >= time.Microsecond {
				t.Fatalf("trace %d (%d/s, burst %d) +%dµs ReserveN(%d): x/time/rate at %v, ours %+v", trace, R, B, off, n, wantAt.Sub(base), d)
			}
			reserved++
		}
	}
	t.Logf("%d grants and %d reservations agreed", granted, reserved)
}

// The example of a rate above one per millisecond: 3000 per second, burst 1,
// asked every 100 µs for a second, grants 2500 (a token every 333.3 µs,
// taken at the next call), as x/time/rate's NewLimiter(3000, 1) does; a clock
// of whole ms gave 1000.
func TestSubMillisecondRate(t *testing.T) {
	const b = tbBase * 1000 // µs
	lim := algorithm.Limit{Rate: 3000, Interval: 1_000_000, Burst: 1}
	ref := rate.NewLimiter(3000, 1)
	var s State
	ours, theirs := 0, 0
	for us := int64(0); us < 1_000_000; us += 100 {
		if s.Acquire(b+us, lim, 1, 0).Granted {
			ours++
		}
		if ref.AllowN(time.UnixMicro(b+us), 1) {
			theirs++
		}
	}
	if ours != 2500 || theirs != 2500 {
		t.Fatalf("granted in 1 s: ours %d, x/time/rate %d; want 2500", ours, theirs)
	}
}

// An interval change on a bucket near the caps (100000 per 24 h, interval
// in µs) carries the tokens over without leaving 2^53: 50000.5 tokens stay
// 50000.5, the half token completing at the new rate.
func TestConfigChangeRescalesLargeIntervals(t *testing.T) {
	const b = tbBase * 1000 // µs
	day, hours23 := int64(86_400_000_000), int64(82_800_000_000)
	old := algorithm.Limit{Rate: 100_000, Interval: day, Burst: 100_000}
	var s State
	if d := s.Acquire(b, old, 100_000, 0); !d.Granted {
		t.Fatalf("emptying: %+v", d)
	}
	// 50000.5 tokens come back in 43200.432 s at 100000 per day.
	now := b + 43_200_432_000
	lim := algorithm.Limit{Rate: 100_000, Interval: hours23, Burst: 100_000, Since: now}
	if got := s.Available(now, lim); got != 50_000 {
		t.Fatalf("Available after the change = %d, want 50000", got)
	}
	// Half a token at 100000 per 23 h: 414 ms.
	if d := s.Acquire(now, lim, 50_001, algorithm.Unlimited); !d.Granted || d.Wait != 414_000 {
		t.Fatalf("50001 tokens: %+v; want a wait of 414 ms", d)
	}
}

// TestCancelAtItsInstant: a reservation cancelled at the very instant it is
// due hands its tokens back, as x/time/rate's CancelAt does (its
// TestCancel1Token): 10 per s, burst 2, emptied at t0; 2 reserved for
// t0+200ms and cancelled then: x/time/rate has 2 tokens at that instant, and
// so do we (time in µs, as the stores count it).
func TestCancelAtItsInstant(t *testing.T) {
	const b = tbBase * 1000 // µs
	lim := algorithm.Limit{Rate: 10, Interval: 1_000_000, Burst: 2}
	ref := rate.NewLimiter(10, 2)
	t0 := time.UnixMicro(b)
	t2 := t0.Add(200 * time.Millisecond)
	ref.ReserveN(t0, 2)
	r := ref.ReserveN(t0, 2)
	var s State
	s.Acquire(b, lim, 2, 0)
	d := s.Acquire(b, lim, 2, algorithm.Unlimited)
	if !d.Granted || d.At != b+200_000 || r.DelayFrom(t0) != 200*time.Millisecond {
		t.Fatalf("reservation %+v; x/time/rate's delay %v; want both at +200ms", d, r.DelayFrom(t0))
	}
	r.CancelAt(t2)
	if got := s.Cancel(b+200_000, lim, d.At, 2); got != 2 {
		t.Fatalf("Cancel at the reservation's instant = %d, want 2", got)
	}
	if got, want := s.Available(b+200_000, lim), int64(ref.TokensAt(t2)); got != want || want != 2 {
		t.Fatalf("tokens after the cancel: %d; x/time/rate %d", got, want)
	}
}

// TestCancelUnderALaterReservation is x/time/rate's TestCancel1Token: a
// reservation built on in part by a later one hands back the part nobody
// was promised. x/time/rate gives back exactly one token; ours gives back
// one token less the one µs of refill its instants may have been rounded
// by (0.99999 token here), so the next reservation comes 1 µs later than
// x/time/rate's (t4 + 1µs): a hand-back never larger than exact arithmetic.
// Time in µs, as the stores count it.
func TestCancelUnderALaterReservation(t *testing.T) {
	const b = tbBase * 1000 // µs
	lim := algorithm.Limit{Rate: 10, Interval: 1_000_000, Burst: 2}
	var s State
	s.Acquire(b, lim, 2, 0)
	r := s.Acquire(b, lim, 2, algorithm.Unlimited)
	if d := s.Acquire(b, lim, 1, algorithm.Unlimited); d.At != b+300_000 {
		t.Fatalf("third reservation at %d, want t3", d.At-b)
	}
	if got := s.Cancel(b+200_000, lim, r.At, 2); got != 0 {
		t.Fatalf("Cancel = %d whole tokens, want 0 (0.99999 of one)", got)
	}
	if d := s.Acquire(b+200_000, lim, 2, algorithm.Unlimited); d.At != b+400_001 {
		t.Fatalf("next reservation at +%d µs, want t4 + 1µs (x/time/rate: t4)", d.At-b)
	}
}
