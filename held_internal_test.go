package redlimit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/clock"
)

// The record of a window algorithm stays small however its grants fall:
// slots never span a window's end, and are a thirty-second of an Interval
// wide, so a window holds at most holdSlices+1 of them.
func TestHeldSlotsBounded(t *testing.T) {
	cfg := PerInterval(1000, time.Minute).WithAlgorithm(FixedWindow)
	c, err := cfg.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	var h held
	// A grant every millisecond of a whole window.
	for ms := range time.Minute.Milliseconds() {
		h.add(&c, start.Add(time.Duration(ms)*time.Millisecond).UnixMilli(), 1, clk)
	}
	if n := h.count; n > holdSlices+1 {
		t.Fatalf("%d slots for one window; want at most %d", n, holdSlices+1)
	}
	if _, got, _ := h.take(clk.Now(), 1<<40); got != time.Minute.Milliseconds() {
		t.Fatalf("held %d; want %d", got, time.Minute.Milliseconds())
	}
}

// A record whose slots stop holding reuses them: a Limiter called less
// often than a slot is wide (one key among many) makes no new slot per
// grant once its first slots are done, and still holds exactly its
// grants of the span.
func TestHeldSlotsReused(t *testing.T) {
	c, clk := heldBucket(t)
	var h held
	// A grant every 100ms (slots are 31ms wide; each is held 1s).
	for i := range 100 {
		h.add(&c, clk.Now().UnixMilli(), 1, clk)
		if i == 20 && h.made == 0 {
			t.Fatal("no slot made")
		}
		clk.Advance(100 * time.Millisecond)
	}
	if h.made > 2*11 { // chunks double: at most twice the slots held at a time
		t.Fatalf("%d slots made for 100 grants, about 10 held at a time", h.made)
	}
	if _, got, _ := h.take(clk.Now(), 100); got != 9 {
		t.Fatalf("held %d; want the 9 grants made in the last second", got)
	}
}

// Grants added while Releases take and put back permits, concurrently:
// nothing is lost or counted twice (clock still: every grant holds).
func TestHeldConcurrent(t *testing.T) {
	c, err := TokenBucketConfig(1000, time.Second, 1000).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	var h held
	const adders, grants = 4, 2000
	var released atomic.Int64
	var wg sync.WaitGroup
	for a := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range grants {
				// Spread over many slots, each visited several times.
				h.add(&c, start.Add(time.Duration((i*7+a)%900)*time.Millisecond).UnixMilli(), 1, clk)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				tk, n, _ := h.take(clk.Now(), 3)
				back := n / 2
				if i%2 == 0 {
					back = 0
				}
				released.Add(n - back)
				h.putBack(tk, n-back)
			}
		}()
	}
	wg.Wait()
	_, rest, _ := h.take(clk.Now(), 1<<40)
	if got := rest + released.Load(); got != adders*grants {
		t.Fatalf("held %d + released %d = %d; want %d", rest, released.Load(), got, adders*grants)
	}
}

// take hands back the newest grants first, across slots, and reports the
// start of the oldest slot it took from (a sliding log's bound).
func TestHeldTakeNewestFirst(t *testing.T) {
	c, clk := heldBucket(t)
	start := clk.Now()
	var h held
	for i := range int64(3) { // 1, 2, 3 permits, 100ms apart: three slots
		h.add(&c, clk.Now().UnixMilli(), i+1, clk)
		clk.Advance(100 * time.Millisecond)
	}
	tk, got, oldest := h.take(clk.Now(), 4)
	if got != 4 || len(tk) != 2 || tk[0].n != 3 || tk[1].n != 1 {
		t.Fatalf("took %d as %v; want 3 from the newest slot, then 1", got, tk)
	}
	if want := start.Add(100 * time.Millisecond).UnixMilli(); oldest != want {
		t.Fatalf("oldest %d; want the middle slot's start %d", oldest, want)
	}
	h.putBack(tk, 4)
	if _, got, _ := h.take(clk.Now(), 10); got != 2 {
		t.Fatalf("%d left; want 2", got)
	}
}

// heldBucket is a token bucket of 10 a second (each grant held 1s, slots
// 31ms wide) and a fake clock.
func heldBucket(t *testing.T) (Config, *clock.Fake) {
	t.Helper()
	c, err := TokenBucketConfig(10, time.Second, 10).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return c, clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}
