package redlimit

import (
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
		h.add(&c, start.Add(time.Duration(ms)*time.Millisecond), 1, clk)
	}
	if n := len(h.slots); n > holdSlices+1 {
		t.Fatalf("%d slots for one window; want at most %d", n, holdSlices+1)
	}
	if _, got, _ := h.take(clk.Now(), 1<<40); got != time.Minute.Milliseconds() {
		t.Fatalf("held %d; want %d", got, time.Minute.Milliseconds())
	}
}
