package main

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// hist is a log-linear histogram of latencies in nanoseconds: exact below
// 64 ns, then 32 buckets per power of two (each within about 3%).
type hist struct {
	counts [64 + 58*32]uint64
	n      uint64
}

func bucketOf(v uint64) int {
	if v < 64 {
		return int(v)
	}
	shift := bits.Len64(v) - 6 // v>>shift is in [32, 63]
	return 64 + (shift-1)*32 + int(v>>shift) - 32
}

// bucketMid is the middle of bucket i, in ns.
func bucketMid(i int) float64 {
	if i < 64 {
		return float64(i)
	}
	shift := (i-64)/32 + 1
	lo := uint64((i-64)%32+32) << shift
	return float64(lo) + float64(uint64(1)<<shift)/2
}

func (h *hist) add(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the latency at quantile q (0..1) in ns; NaN when empty.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return bucketMid(i)
		}
	}
	return bucketMid(len(h.counts) - 1)
}

// load is what a run of callers against a target measured.
type load struct {
	granted, refused, errors uint64
	firstErr                 string
	seconds                  float64 // the measured window
	hist                     hist
	before, after            snapshot // CPU counters at the window's ends
	// Open loop only (see runLoad): latency from the scheduled start as
	// measured, the load generator's own timer lateness included; and that
	// lateness, of the calls whose caller slept until their time.
	rawHist, lagHist hist
}

func (l *load) decisions() uint64 { return l.granted + l.refused }

// worker is one caller's tally; each is its own allocation (no false
// sharing).
type worker struct {
	hist                     hist
	granted, refused, errors uint64
	firstErr                 error
	open                     *openTally // open loop only
}

// openTally is an open-loop caller's extra histograms (see load).
type openTally struct{ raw, lag hist }

// Phases of a run.
const (
	warmingUp int32 = iota
	measuring
	stopping
)

// openTimes accounts one call of an open loop, scheduled at sched, started
// at t0 and ended at t1, after a queue of this caller's calls that ended at
// queueEnd: its latency (its end in the queue the schedule makes, less
// sched), the uncorrected one (t1 less sched), the timer's lateness (t0 less
// sched), and the queue's new end.
func openTimes(sched, t0, t1, queueEnd time.Time) (lat, raw, lag time.Duration, end time.Time) {
	end = later(sched, queueEnd).Add(t1.Sub(t0))
	return end.Sub(sched), t1.Sub(sched), t0.Sub(sched), end
}

// runLoad runs callers goroutines asking t for one permit each in a loop:
// warmup first (and until every caller has had an answer), then dur
// measured, and on until one timed call has been answered in the window
// (so that no window is empty, however the machine schedules its callers:
// a loaded machine can keep every caller off a CPU for a short window).
// Calls that complete within the measured window count; every timeEvery-th call of each caller is timed (timing
// costs about as much as an in-memory decision). snap reads the CPU
// counters at the window's ends. With pace > 0 the callers are paced,
// offering pace requests per second in all on a fixed schedule (a caller
// that falls behind calls back to back).
//
// Paced (the half-peak workload), the loop is open: latency is timed from
// each call's scheduled start, so that a call held up behind a slow one counts
// its wait (no coordinated omission), and the schedule is never dropped.
// The load generator's own lateness is taken out: Go wakes a sleep of less
// than a millisecond up to a millisecond late when the process is idle, and
// that would count as the system's. Each caller's calls are queued on their
// schedule with the durations measured (a call starts at its scheduled
// time or when the one before it ends, whichever is later), and a call's
// latency is its end in that queue less its scheduled start; with a punctual
// timer this is exactly the latency from the scheduled start. The
// uncorrected figure and the timer's lateness are kept too (load.rawHist,
// load.lagHist). Paced requires timeEvery 1.
//
// seq, when not empty, is the order in which the limiters are asked (a
// uniform or Zipf draw, made before): each caller walks it from its own
// offset, round and round; empty, every call asks limiter 0.
func runLoad(ctx context.Context, t *target, callers int, seq []int32, pace float64, warmup, dur time.Duration, timeEvery int, snap func() snapshot) (load, error) {
	open := pace > 0
	if open && timeEvery != 1 {
		return load{}, errors.New("a paced (open) loop times every call")
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var phase atomic.Int32
	workers := make([]*worker, callers)
	var wg sync.WaitGroup
	// ready is closed once every caller has had a call answered: the
	// warm-up lasts until then (a fresh client dials its connections, a
	// policy reads its config), so that no window starts cold.
	ready := make(chan struct{})
	var unready atomic.Int64
	unready.Store(int64(callers))
	// answered is closed by the first timed call answered in the window.
	answered := make(chan struct{})
	var timedInWindow atomic.Bool
	for g := range workers {
		w := &worker{}
		if open {
			w.open = &openTally{}
		}
		workers[g] = w
		wg.Add(1)
		go func(g, pos int) {
			defer wg.Done()
			var interval time.Duration
			var next, queueEnd time.Time // queueEnd: open loop, see above
			if pace > 0 {
				interval = time.Duration(float64(callers) / pace * float64(time.Second))
				next = time.Now().Add(interval * time.Duration(g) / time.Duration(callers)) // staggered
			}
			for k := 0; phase.Load() != stopping; k++ {
				var sched time.Time // this call's scheduled start
				slept := false
				if pace > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d) // the schedule: a fixed offered load
						slept = true
					}
					sched = next
					next = next.Add(interval)
				}
				timed := k%timeEvery == 0
				var t0 time.Time
				if timed {
					t0 = time.Now()
				}
				i := 0
				if len(seq) > 0 {
					i = int(seq[pos])
					if pos++; pos == len(seq) {
						pos = 0
					}
				}
				ok, err := t.call(cctx, i)
				if k == 0 && unready.Add(-1) == 0 {
					close(ready)
				}
				var d, raw, lag time.Duration
				if timed {
					t1 := time.Now()
					d = t1.Sub(t0)
					if open {
						d, raw, lag, queueEnd = openTimes(sched, t0, t1, queueEnd)
					}
				}
				if phase.Load() == measuring {
					switch {
					case err != nil:
						w.errors++
						if w.firstErr == nil {
							w.firstErr = err
						}
					case ok:
						w.granted++
					default:
						w.refused++
					}
					if timed && err == nil {
						w.hist.add(d)
						if !timedInWindow.Load() && timedInWindow.CompareAndSwap(false, true) {
							close(answered)
						}
						if open {
							w.open.raw.add(raw)
							if slept {
								w.open.lag.add(lag)
							}
						}
					}
				}
			}
		}(g, g*len(seq)/callers)
	}
	// stop ends the run; calls stuck on a dead server are cancelled after
	// a grace period.
	stop := func() {
		phase.Store(stopping)
		watchdog := time.AfterFunc(10*time.Second, cancel)
		wg.Wait()
		watchdog.Stop()
	}
	sleep := func(d time.Duration) bool {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
			return true
		case <-ctx.Done():
			return false
		}
	}

	var out load
	if !sleep(warmup) {
		stop()
		return out, ctx.Err()
	}
	// A call stuck on a dead server does not hold the window back long.
	wait := time.NewTimer(10 * time.Second)
	select {
	case <-ready:
	case <-wait.C:
	case <-ctx.Done():
		stop()
		return out, ctx.Err()
	}
	wait.Stop()
	out.before = snap()
	phase.Store(measuring)
	t1 := time.Now()
	ok := sleep(dur)
	if ok {
		// A call stuck on a dead server does not hold the window open long.
		wait.Reset(10 * time.Second)
		select {
		case <-answered:
		case <-wait.C:
		case <-ctx.Done():
			ok = false
		}
		wait.Stop()
	}
	out.seconds = time.Since(t1).Seconds()
	phase.Store(stopping)
	out.after = snap()
	stop()
	if !ok {
		return out, ctx.Err()
	}
	for _, w := range workers {
		out.granted += w.granted
		out.refused += w.refused
		out.errors += w.errors
		if w.firstErr != nil && out.firstErr == "" {
			out.firstErr = w.firstErr.Error()
		}
		out.hist.merge(&w.hist)
		if w.open != nil {
			out.rawHist.merge(&w.open.raw)
			out.lagHist.merge(&w.open.lag)
		}
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
