package decide_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
)

// TestPolicyOptionsObserve: an observer among Options.PolicyOptions is
// told each grant and refusal, named after the rule, keyed by the
// descriptor's value.
func TestPolicyOptionsObserve(t *testing.T) {
	var mu sync.Mutex
	var got []redlimit.Event
	obs := redlimit.ObserverFunc(func(_ context.Context, e redlimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		e.Limits = nil
		got = append(got, e)
	})
	e := newEnv(t, testRules, decide.Options{PolicyOptions: []redlimit.Option{redlimit.WithObserver(obs)}})
	for range 4 {
		e.decide(0, desc("remote_address", "10.0.0.1"))
	}
	mu.Lock()
	defer mu.Unlock()
	var granted, refused int
	for _, ev := range got {
		if ev.Op != redlimit.OpAcquire {
			continue
		}
		if ev.Name != "serve:edge/remote_address" || !ev.Policy || ev.Key != "10.0.0.1" {
			t.Fatalf("event %+v", ev)
		}
		switch ev.Outcome {
		case redlimit.OutcomeGranted:
			granted++
		case redlimit.OutcomeRefused:
			refused++
		}
	}
	if granted != 3 || refused != 1 {
		t.Fatalf("granted %d, refused %d; want 3 and 1", granted, refused)
	}
}
