package redisstore

import (
	"context"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRunSizes: Stats.RunSizes counts each script run once, in the
// power-of-two bucket of the calls it carried, so that a metrics
// adapter can show how many callers batching puts in a round trip.
func TestRunSizes(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	cfg := redlimit.PerSecond(1000)
	for _, name := range []string{"a", "b"} {
		if _, _, err := s.SetConfig(ctx, name, cfg, redlimit.SetResetState); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := s.Config(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	calls := func(name string, k int) *work {
		w := &work{key: redlimit.Key{Name: name, Client: "c"}, known: encode(stored)}
		for range k {
			w.calls = append(w.calls, call{op: opAcquire, n: 1})
		}
		return w
	}
	before := s.Stats()
	for _, run := range [][]*work{
		{calls("a", 1)},                // 1 call
		{calls("a", 3)},                // 2..3
		{calls("a", 2), calls("b", 2)}, // 4..7
		{calls("a", 1), calls("b", 6)}, // 4..7
		{calls("a", 200)},              // 128 or more
	} {
		s.runWorks(ctx, run)
		for _, w := range run {
			if w.err != nil {
				t.Fatal(w.err)
			}
		}
	}
	after := s.Stats()
	want := [RunSizeBuckets]int64{1, 1, 2, 0, 0, 0, 0, 1}
	var got [RunSizeBuckets]int64
	for i := range got {
		got[i] = after.RunSizes[i] - before.RunSizes[i]
	}
	if got != want {
		t.Errorf("RunSizes grew by %v; want %v", got, want)
	}
	if runs := after.ScriptRuns - before.ScriptRuns; runs != 5 {
		t.Errorf("ScriptRuns grew by %d; want 5", runs)
	}
	if calls := after.RunCalls - before.RunCalls; calls != 1+3+4+7+200 {
		t.Errorf("RunCalls grew by %d; want %d", calls, 1+3+4+7+200)
	}
}
