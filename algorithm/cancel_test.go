package algorithm_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// kind is one algorithm: a fresh state, a deep copy of one, and a random
// limit with the most one request may ask.
type kind struct {
	name  string
	fresh func() algorithm.State
	clone func(algorithm.State) algorithm.State
	limit func(rng *rand.Rand) (algorithm.Limit, int64)
}

func windowLimit(rng *rand.Rand) (algorithm.Limit, int64) {
	lim := algorithm.Limit{Rate: 1 + rng.Int64N(20), Interval: 1 + rng.Int64N(200)}
	return lim, lim.Rate
}

var kinds = []kind{
	{"sliding-log", func() algorithm.State { return new(slidinglog.State) }, func(s algorithm.State) algorithm.State {
		c := *s.(*slidinglog.State)
		c.Entries = slices.Clone(c.Entries)
		return &c
	}, windowLimit},
	{"fixed-window", func() algorithm.State { return new(fixedwindow.State) }, func(s algorithm.State) algorithm.State {
		c := *s.(*fixedwindow.State)
		c.Windows = slices.Clone(c.Windows)
		return &c
	}, windowLimit},
	{"sliding-counter", func() algorithm.State { return new(slidingcounter.State) }, func(s algorithm.State) algorithm.State {
		c := *s.(*slidingcounter.State)
		c.Windows = slices.Clone(c.Windows)
		return &c
	}, windowLimit},
	{"token-bucket", func() algorithm.State { return new(tokenbucket.State) }, func(s algorithm.State) algorithm.State {
		c := *s.(*tokenbucket.State)
		return &c
	}, func(rng *rand.Rand) (algorithm.Limit, int64) {
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(20), Interval: 1 + rng.Int64N(200), Burst: 1 + rng.Int64N(20)}
		return lim, lim.Burst
	}},
	{"leaky-bucket", func() algorithm.State { return new(leakybucket.State) }, func(s algorithm.State) algorithm.State {
		c := *s.(*leakybucket.State)
		return &c
	}, func(rng *rand.Rand) (algorithm.Limit, int64) {
		// A capacity that queues many waiters.
		lim := algorithm.Limit{Rate: 1 + rng.Int64N(20), Interval: 1 + rng.Int64N(200), Capacity: 1 + rng.Int64N(3000)}
		return lim, min(lim.Capacity, 1+rng.Int64N(5))
	}},
}

// TestEveryWaiterGivesUp: a limiter at rest gets a queue of up to 2,000
// waiters (reservations without a bound on the wait), and then every one
// of them cancels, in a random order, at random instants before its own
// (the last possible one included: at == now hands back too). Afterwards
// the state answers every call as a copy taken before the waiters came,
// which never saw them: Available at once, then the decisions of a random
// trace of acquires (waiting or not), releases and time steps.
func TestEveryWaiterGivesUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cancels := 0
			for trace := 0; trace < 200; trace++ {
				lim, most := k.limit(rng)
				s := k.fresh()
				now := int64(1_700_000_000_000) + rng.Int64N(100_000)
				// Traffic before the queue: immediate grants over some time.
				for i := rng.IntN(30); i > 0; i-- {
					now += rng.Int64N(lim.Interval/2 + 1)
					s.Acquire(now, lim, 1+rng.Int64N(most), 0)
				}
				before := k.clone(s)
				waiters := 1 + rng.IntN(200)
				if trace%20 == 0 {
					waiters = 2000
				}
				type res struct{ at, n int64 }
				var queue []res
				for i := 0; i < waiters; i++ {
					n := 1 + rng.Int64N(most)
					d := s.Acquire(now, lim, n, algorithm.Unlimited)
					if !d.Granted {
						break // a leaky bucket's queue is full
					}
					if d.Wait == 0 {
						// Not a waiter: the copy gets the same grant.
						if len(queue) > 0 {
							t.Fatalf("trace %d: granted at once behind %d waiters", trace, len(queue))
						}
						before.Acquire(now, lim, n, 0)
						continue
					}
					queue = append(queue, res{d.At, n})
				}
				// Cancel in a random order; time moves on, but never past
				// the earliest reservation still waiting.
				rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })
				for i, r := range queue {
					first := r.at
					for _, o := range queue[i:] {
						first = min(first, o.at)
					}
					if rng.IntN(4) == 0 {
						now += rng.Int64N(first - now + 1)
					}
					got := s.Cancel(now, lim, r.at, r.n)
					if got < 0 || got > r.n {
						t.Fatalf("trace %d: Cancel(%d at %d) = %d", trace, r.n, r.at, got)
					}
					cancels++
				}
				if a, b := s.Available(now, lim), before.Available(now, lim); a != b {
					t.Fatalf("trace %d (%+v, %d waiters): Available after all cancelled = %d, before they came %d",
						trace, lim, len(queue), a, b)
				}
				for step := 0; step < 40; step++ {
					now += rng.Int64N(lim.Interval/3 + 1)
					var a, b any
					switch rng.IntN(5) {
					case 0:
						n := 1 + rng.Int64N(most)
						a, b = s.Release(now, lim, n), before.Release(now, lim, n)
					case 1:
						a, b = s.Available(now, lim), before.Available(now, lim)
					default:
						n := 1 + rng.Int64N(most)
						wait := []int64{0, algorithm.Unlimited, rng.Int64N(2 * lim.Interval)}[rng.IntN(3)]
						a, b = s.Acquire(now, lim, n, wait), before.Acquire(now, lim, n, wait)
					}
					if fmt.Sprint(a) != fmt.Sprint(b) {
						t.Fatalf("trace %d (%+v, %d waiters gone) step %d: %v; never asked: %v", trace, lim, len(queue), step, a, b)
					}
				}
			}
			t.Logf("%d cancellations", cancels)
		})
	}
}

// TestCancelKeepsLimits: over random traces where some waiters cancel (in
// any order, at any instant up to their own) and the others keep their
// grants, the grants kept never exceed the algorithm's limit: at most Rate
// in any window of Interval (sliding log), in any window of the grid (fixed
// window, sliding counter); at most Burst + Rate x span / Interval in any
// span (token bucket); grants at least the work between them apart (leaky
// bucket). Both buckets get one time unit (a µs in the stores) of slack: instants are whole
// units, and x/time/rate's partial hand-back, which they keep while other
// waiters remain, measures "later" work from a rounded-up instant.
func TestCancelKeepsLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var kept, cancelled int
			for trace := 0; trace < 600; trace++ {
				lim, most := k.limit(rng)
				if k.name == "leaky-bucket" {
					lim.Capacity = min(lim.Capacity, 40)
					most = min(most, lim.Capacity)
				}
				s := k.fresh()
				now := int64(1_700_000_000_000) + rng.Int64N(100_000)
				type grant struct {
					at, n   int64
					reserve bool
					gone    bool
				}
				var grants []*grant
				var log []string
				for step := 0; step < 150; step++ {
					switch op := rng.IntN(10); {
					case op < 5:
						n := 1 + rng.Int64N(most)
						wait := []int64{0, algorithm.Unlimited, rng.Int64N(3 * lim.Interval)}[rng.IntN(3)]
						d := s.Acquire(now, lim, n, wait)
						log = append(log, fmt.Sprintf("%d acquire(%d, %d) = %+v -> %+v", now, n, wait, d, s))
						if d.Granted {
							grants = append(grants, &grant{at: d.At, n: n, reserve: d.Wait > 0})
						}
					case op < 8:
						var waiting []*grant
						for _, g := range grants {
							if !g.gone && g.at >= now {
								waiting = append(waiting, g)
							}
						}
						if len(waiting) > 0 {
							g := waiting[rng.IntN(len(waiting))]
							got := s.Cancel(now, lim, g.at, g.n)
							log = append(log, fmt.Sprintf("%d cancel(%d at %d) = %d -> %+v", now, g.n, g.at, got, s))
							g.gone = true
							cancelled++
						}
					default:
						now += rng.Int64N(lim.Interval/4 + 2)
					}
				}
				var used []*grant
				for _, g := range grants {
					if !g.gone {
						used = append(used, g)
					}
				}
				kept += len(used)
				slices.SortStableFunc(used, func(a, b *grant) int { return int(a.at - b.at) })
				for i, g := range used {
					var sum int64
					for j := i; j < len(used); j++ {
						h := used[j]
						sum += h.n
						var over bool
						switch k.name {
						case "sliding-log":
							over = h.at-g.at < lim.Interval && sum > lim.Rate
						case "fixed-window", "sliding-counter":
							over = algorithm.WindowStart(h.at, lim.Interval) == algorithm.WindowStart(g.at, lim.Interval) && sum > lim.Rate
						case "token-bucket":
							// One unit of refill more: instants are whole units, and
							// a partial hand-back counts the refill up to the
							// cancelled reservation's (rounded up) instant.
							span := h.at - g.at + 1
							over = sum*lim.Interval > lim.Burst*lim.Interval+lim.Rate*span
						case "leaky-bucket":
							// The work of the grants before h drains before h,
							// to the unit (less than one unit of work may remain).
							over = (h.at-g.at+1)*lim.Rate < (sum-h.n)*lim.Interval
						}
						if over {
							t.Fatalf("trace %d (%+v): %d permits granted in [%d, %d]\n%s", trace, lim, sum, g.at, h.at, strings.Join(log, "\n"))
						}
					}
				}
			}
			t.Logf("%d grants kept, %d cancelled", kept, cancelled)
		})
	}
}
