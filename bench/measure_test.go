package main

import (
	"context"
	"testing"
)

// TestRunLoadWindowNeverEmpty: however short the window and however the
// machine schedules the callers, a measurement counts at least one timed,
// answered call, so that no cell reports an empty window.
func TestRunLoadWindowNeverEmpty(t *testing.T) {
	for _, c := range []struct{ callers, timeEvery int }{{1, 1}, {3, 4}} {
		tg := &target{n: 1, call: func(context.Context, int) (bool, error) { return true, nil }, close: func() {}}
		out, err := runLoad(context.Background(), tg, c.callers, nil, 0, 0, 1, c.timeEvery, func() snapshot { return snapshot{} })
		if err != nil {
			t.Fatal(err)
		}
		if out.decisions() == 0 || out.hist.n == 0 {
			t.Errorf("%d callers, every %d timed: %d decisions, %d timed in a 1 ns window", c.callers, c.timeEvery, out.decisions(), out.hist.n)
		}
	}
}
