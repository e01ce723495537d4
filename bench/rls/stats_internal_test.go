package rls

import (
	"testing"
	"time"
)

func TestSummariseAndQuantile(t *testing.T) {
	if s := summarise([]float64{3, 1, 2}); s != (Stat{Median: 2, Min: 1, Max: 3, N: 3}) {
		t.Errorf("odd: %+v", s)
	}
	if s := summarise([]float64{4, 1, 2, 3}); s != (Stat{Median: 2.5, Min: 1, Max: 4, N: 4}) {
		t.Errorf("even: %+v", s)
	}
	if s := summarise(nil); s != (Stat{}) {
		t.Errorf("none: %+v", s)
	}
	lat := make([]time.Duration, 100)
	for i := range lat {
		lat[i] = time.Duration(i + 1)
	}
	if q50, q99, q100 := quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1); q50 != 50 || q99 != 99 || q100 != 100 {
		t.Errorf("quantiles %v %v %v", q50, q99, q100)
	}
	if quantile(nil, 0.99) != 0 {
		t.Error("quantile of nothing")
	}
}

func TestCompareAndRuns(t *testing.T) {
	ok := func(rem uint32) Answer {
		return Answer{Code: "OK", Remaining: rem, Limit: 2, Unit: "SECOND", ResetSeconds: 1}
	}
	over := Answer{Code: "OVER_LIMIT", Limit: 2, Unit: "SECOND", ResetSeconds: 1}
	a := []Answer{ok(1), ok(0), over}
	if !asFixedWindow(a, 2) || asFixedWindow(a, 3) || asFixedWindow([]Answer{ok(1), over, over}, 2) {
		t.Error("asFixedWindow")
	}
	if got := runs(a); got != "2 OK (remaining 1..0, reset 1s), 1 OVER_LIMIT (remaining 0, reset 1s)" {
		t.Errorf("runs: %s", got)
	}
	if m := compareWindow(0, a, a); len(m) != 0 {
		t.Errorf("same: %v", m)
	}
	m := compareWindow(4, a, []Answer{ok(1), over})
	if len(m) != 2 || m[0].Call != 1 || m[0].Window != 4 || m[1].Call != 2 || m[1].B != (Answer{}) {
		t.Errorf("different: %v", m)
	}
}
