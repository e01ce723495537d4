package main

import (
	"context"
	"testing"
	"time"
)

// TestSystemPrefixes: every system's keys live under a prefix of its own,
// all of one length, so that the bytes per key compare like with like.
func TestSystemPrefixes(t *testing.T) {
	e := &env{prefix: "redlimit-bench:"}
	seen := map[string]string{}
	length := -1
	for _, s := range systems() {
		p := e.systemPrefix(s.Name)
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q share the prefix %q", s.Name, other, p)
		}
		seen[p] = s.Name
		if length >= 0 && len(p) != length {
			t.Errorf("%q: prefix %q is %d bytes, others %d", s.Name, p, len(p), length)
		}
		length = len(p)
	}
}

// TestGoLimiterGrantsAll: go-limiter, given a limit meant to grant every
// call, grants every call past its limit's interval, where its refill
// (interval/tokens a tick) would otherwise leave it one token; a small
// limit keeps its own interval.
func TestGoLimiterGrantsAll(t *testing.T) {
	l := limit{Rate: 1 << 24, Interval: 20 * time.Millisecond}
	tg, err := prepareGoLimiter(context.Background(), &env{}, prep{l: l, names: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	calls, refused := 0, 0
	for start := time.Now(); time.Since(start) < 3*l.Interval; calls++ {
		ok, err := tg.call(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("%d of %d calls refused over three intervals of %v", refused, calls, l)
	}
	if got := goLimiterInterval(deniedLimit); got != deniedLimit.Interval {
		t.Errorf("interval for %v: %v", deniedLimit, got)
	}
}
