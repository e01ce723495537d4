package traffic

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
)

// TestPendingBounded: with nothing flushing, the counts awaiting a flush
// stop growing at maxPending.
func TestPendingBounded(t *testing.T) {
	r, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i := range maxPending + 10 {
		r.Observe(context.Background(), redlimit.Event{Op: redlimit.OpAcquire, Outcome: redlimit.OutcomeGranted, Name: "p", Key: "k", Start: t0.Add(time.Duration(i) * time.Second)})
	}
	if n := len(r.pending); n != maxPending {
		t.Fatalf("%d counts pending, want %d", n, maxPending)
	}
}
