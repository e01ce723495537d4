package algorithm_test

import (
	"testing"

	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// Cases found by the property tests' author, kept so they stay fixed.

// A bucket last changed at the clock's zero still drains.
func TestBucketDrainsFromZero(t *testing.T) {
	var tb tokenbucket.State
	lim := algorithm.Limit{Rate: 1, Interval: 10, Burst: 2}
	tb.Acquire(0, lim, 2, 0)
	if d := tb.Acquire(10, lim, 1, 0); !d.Granted {
		t.Fatalf("token bucket 10 ms after emptying at 0: %+v", d)
	}
	var lb leakybucket.State
	lim = algorithm.Limit{Rate: 1, Interval: 10, Capacity: 5}
	lb.Acquire(0, lim, 1, 0)
	lb.Acquire(0, lim, 1, algorithm.Unlimited)
	if d := lb.Acquire(10, lim, 1, 0); d.Wait != 10 {
		t.Fatalf("leaky bucket: %+v; want wait 10", d)
	}
}

// Release never hands back a reservation still to come.
func TestSlidingCounterReleaseSparesReservations(t *testing.T) {
	var s slidingcounter.State
	lim := algorithm.Limit{Rate: 4, Interval: 10}
	s.Acquire(1000, lim, 4, 0)
	if d := s.Acquire(1005, lim, 1, algorithm.Unlimited); d.At != 1013 {
		t.Fatalf("reservation at %d, want 1013", d.At)
	}
	if got := s.Release(1011, lim, 5); got != 4 {
		t.Fatalf("Release = %d, want the 4 granted at 1000", got)
	}
	if got := s.Windows.Sum(1010, 1020); got != 1 {
		t.Fatalf("the window holding the reservation for 1013 counts %d, want it kept (1)", got)
	}
}

// A second Cancel of the same reservation hands back nothing.
func TestWindowCancelTwice(t *testing.T) {
	lim := algorithm.Limit{Rate: 4, Interval: 10}
	var fw fixedwindow.State
	fw.Acquire(1000, lim, 4, 0)
	d := fw.Acquire(1000, lim, 1, algorithm.Unlimited)
	if a, b := fw.Cancel(1001, lim, d.At, 1), fw.Cancel(1001, lim, d.At, 1); a != 1 || b != 0 {
		t.Fatalf("fixed window: Cancel twice = %d, %d; want 1, 0", a, b)
	}
	var sc slidingcounter.State
	sc.Acquire(1000, lim, 4, 0)
	d = sc.Acquire(1005, lim, 1, algorithm.Unlimited)
	if a, b := sc.Cancel(1006, lim, d.At, 1), sc.Cancel(1006, lim, d.At, 1); a != 1 || b != 0 {
		t.Fatalf("sliding counter: Cancel twice = %d, %d; want 1, 0", a, b)
	}
}

// Cancelling a reservation others wait behind cannot put two grants on one
// instant beyond the burst (x/time/rate hands back nothing here either).
func TestBucketCancelInTheMiddle(t *testing.T) {
	var tb tokenbucket.State
	lim := algorithm.Limit{Rate: 1, Interval: 1000, Burst: 1}
	tb.Acquire(0, lim, 1, 0)
	b := tb.Acquire(0, lim, 1, algorithm.Unlimited)
	c := tb.Acquire(0, lim, 1, algorithm.Unlimited)
	if got := tb.Cancel(1, lim, b.At, 1); got != 0 {
		t.Fatalf("Cancel of a reservation built on = %d, want 0", got)
	}
	if d := tb.Acquire(1, lim, 1, algorithm.Unlimited); d.At <= c.At {
		t.Fatalf("token bucket: new reservation at %d, not after %d", d.At, c.At)
	}
	var lb leakybucket.State
	lim = algorithm.Limit{Rate: 1, Interval: 10, Capacity: 5}
	lb.Acquire(0, lim, 1, 0)
	b = lb.Acquire(0, lim, 1, algorithm.Unlimited)
	c = lb.Acquire(0, lim, 1, algorithm.Unlimited)
	lb.Cancel(1, lim, b.At, 1)
	if d := lb.Acquire(1, lim, 1, algorithm.Unlimited); d.At <= c.At {
		t.Fatalf("leaky bucket: new grant at %d, not after %d", d.At, c.At)
	}
}
