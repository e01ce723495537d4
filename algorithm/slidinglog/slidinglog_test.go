package slidinglog

import (
	"math/rand/v2"
	"testing"
)

// The rules at fixed instants, x/time/rate style: 3 permits per 10 ms.
func TestAcquireTable(t *testing.T) {
	lim := Limit{Rate: 3, Interval: 10}
	var s State
	steps := []struct {
		now, n, maxWait int64
		want            Decision
	}{
		{0, 1, 0, Decision{Granted: true, At: 0, Remaining: 2, Now: 0}},
		{1, 2, 0, Decision{Granted: true, At: 1, Remaining: 0, Now: 1}},
		{2, 1, 0, Decision{Wait: 8, Remaining: 0, Now: 2}},                  // the grant at 0 frees at 10
		{2, 3, 0, Decision{Wait: 9, Remaining: 0, Now: 2}},                  // all 3 free at 11
		{2, 1, 7, Decision{Wait: 8, Remaining: 0, Now: 2}},                  // 8 > 7: refused, nothing reserved
		{2, 1, 8, Decision{Granted: true, At: 10, Wait: 8, Now: 2}},         // reserved for 10
		{3, 1, 0, Decision{Wait: 8, Remaining: 0, Now: 3}},                  // behind the queue: the 2 at 1 free at 11
		{1, 1, Unlimited, Decision{Granted: true, At: 11, Wait: 9, Now: 2}}, // clock behind: time stays at 2, the last change (a refusal changes nothing)
		{20, 3, 0, Decision{Wait: 1, Remaining: 2, Now: 20}},                // 10 has left; 11 holds 1 until 21
		{21, 3, 0, Decision{Granted: true, At: 21, Remaining: 0, Now: 21}},
	}
	for i, st := range steps {
		if got := s.Acquire(st.now, lim, st.n, st.maxWait); got != st.want {
			t.Fatalf("step %d: Acquire(now=%d, n=%d, wait=%d) = %+v; want %+v", i, st.now, st.n, st.maxWait, got, st.want)
		}
	}
}

func TestSameMillisecondSharesAnEntry(t *testing.T) {
	lim := Limit{Rate: 1_000_000, Interval: 60_000}
	var s State
	for now := int64(0); now < 60_000; now += 1 {
		for i := 0; i < 5; i++ {
			if d := s.Acquire(now, lim, 3, 0); !d.Granted {
				t.Fatalf("refused at %d: %+v", now, d)
			}
		}
	}
	if len(s.Entries) != 60_000 || s.Total != 900_000 {
		t.Fatalf("%d entries, total %d; want one entry per ms (60000), 900000", len(s.Entries), s.Total)
	}
}

func TestCancelAndRelease(t *testing.T) {
	lim := Limit{Rate: 2, Interval: 10}
	var s State
	s.Acquire(0, lim, 2, 0)
	d := s.Acquire(0, lim, 2, Unlimited) // reserved for 10
	if !d.Granted || d.At != 10 {
		t.Fatalf("reservation: %+v", d)
	}
	if got := s.Cancel(1, lim, 10, 5); got != 2 {
		t.Fatalf("Cancel = %d, want the 2 reserved", got)
	}
	if got := s.Cancel(1, lim, 10, 1); got != 0 {
		t.Fatalf("second Cancel = %d, want 0", got)
	}
	if got := s.Release(1, lim, 1); got != 1 {
		t.Fatalf("Release = %d, want 1", got)
	}
	if got := s.Available(1, lim); got != 1 {
		t.Fatalf("Available = %d, want 1", got)
	}
	// A reservation still in the future is not released: its waiter uses it.
	s.Acquire(1, lim, 1, 0)
	s.Acquire(1, lim, 2, Unlimited) // at 10
	if got := s.Release(2, lim, 5); got != 2 {
		t.Fatalf("Release with a future reservation = %d, want 2 (not the reserved ones)", got)
	}
}

func TestExpiryForgetsUnderTheConfigOfTheLastChange(t *testing.T) {
	var s State
	s.Acquire(0, Limit{Rate: 1, Interval: 10}, 1, 0)
	// A longer interval later does not bring back a log that was due to be
	// forgotten at 10.
	if got := s.Available(10, Limit{Rate: 1, Interval: 100}); got != 1 {
		t.Fatalf("Available after expiry = %d, want 1", got)
	}
	if !s.Forgotten(10, Limit{}) || s.Forgotten(9, Limit{}) {
		t.Fatalf("Forgotten(9, 10) = %v, %v", s.Forgotten(9, Limit{}), s.Forgotten(10, Limit{}))
	}
	if d := s.Acquire(10, Limit{Rate: 1, Interval: 100}, 1, 0); !d.Granted {
		t.Fatalf("after expiry: %+v", d)
	}
}

// TestPropertyNoWindowOverRate: over random traces (waits, cancels, releases
// excluded because they return permits by design), no window of Interval
// holds more than Rate permits, and every refusal's retry-after is exact: the
// same request at now+wait is granted at once.
func TestPropertyNoWindowOverRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trace := 0; trace < 2000; trace++ {
		lim := Limit{Rate: 1 + rng.Int64N(10), Interval: 1 + rng.Int64N(50)}
		var s State
		var grants []Entry
		now := int64(0)
		for step := 0; step < 100; step++ {
			now += rng.Int64N(8)
			n := 1 + rng.Int64N(lim.Rate)
			wait := []int64{0, Unlimited, rng.Int64N(30)}[rng.IntN(3)]
			before := s
			before.Entries = append([]Entry(nil), s.Entries...)
			d := s.Acquire(now, lim, n, wait)
			if d.Granted {
				if d.At < now || d.At-now != d.Wait {
					t.Fatalf("trace %d: grant %+v at now %d", trace, d, now)
				}
				grants = append(grants, Entry{d.At, n})
				continue
			}
			// The retry-after is exact: at now+wait (and not a ms before) it fits.
			probe := before
			probe.Entries = append([]Entry(nil), before.Entries...)
			if p := probe.Acquire(now+d.Wait, lim, n, 0); !p.Granted {
				t.Fatalf("trace %d: refused with retry-after %d, but refused again then: %+v", trace, d.Wait, p)
			}
			if d.Wait > 0 {
				probe = before
				probe.Entries = append([]Entry(nil), before.Entries...)
				if p := probe.Acquire(now+d.Wait-1, lim, n, 0); p.Granted {
					t.Fatalf("trace %d: granted 1 ms before the retry-after %d", trace, d.Wait)
				}
			}
		}
		for _, g := range grants {
			var sum int64
			for _, h := range grants {
				if h.At >= g.At && h.At < g.At+lim.Interval {
					sum += h.Permits
				}
			}
			if sum > lim.Rate {
				t.Fatalf("trace %d: window from %d holds %d > rate %d", trace, g.At, sum, lim.Rate)
			}
		}
		// FIFO: grants were handed out at non-decreasing instants.
		for i := 1; i < len(grants); i++ {
			if grants[i].At < grants[i-1].At {
				t.Fatalf("trace %d: grant %d at %d before grant %d at %d", trace, i, grants[i].At, i-1, grants[i-1].At)
			}
		}
	}
}

func BenchmarkAcquire(b *testing.B) {
	lim := Limit{Rate: 1 << 40, Interval: 60_000}
	var s State
	b.ReportAllocs()
	now := int64(0)
	for i := 0; b.Loop(); i++ {
		if i%64 == 0 {
			now++
		}
		s.Acquire(now, lim, 1, 0)
	}
}

// ReleaseUpTo takes no entry newer than its bound, newest first below it,
// and Release is ReleaseUpTo bounded by now.
func TestReleaseUpTo(t *testing.T) {
	lim := Limit{Rate: 10, Interval: 1000}
	var s State
	for _, at := range []int64{100, 200, 300} {
		if d := s.Acquire(at, lim, 2, 0); !d.Granted {
			t.Fatalf("acquire at %d refused", at)
		}
	}
	if got := s.ReleaseUpTo(300, lim, 3, 250); got != 3 {
		t.Fatalf("ReleaseUpTo(250) = %d; want 3", got)
	}
	want := []Entry{{At: 100, Permits: 1}, {At: 300, Permits: 2}}
	if len(s.Entries) != 2 || s.Entries[0] != want[0] || s.Entries[1] != want[1] || s.Total != 3 {
		t.Fatalf("log %+v total %d; want %+v total 3", s.Entries, s.Total, want)
	}
	if got := s.ReleaseUpTo(300, lim, 5, 50); got != 0 {
		t.Fatalf("ReleaseUpTo(50) = %d; want 0: every entry is later", got)
	}
	if got := s.Release(300, lim, 5); got != 3 {
		t.Fatalf("Release = %d; want 3", got)
	}
}
