package decide_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// TestPolicyOptions gives every policy an observer: the rules' and the
// overrides' decisions are all seen.
func TestPolicyOptions(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	obs := redlimit.ObserverFunc(func(_ context.Context, e redlimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		seen[e.Name]++
	})
	d, err := decide.New(memstore.New(), decide.Options{PolicyOptions: []redlimit.Option{redlimit.WithObserver(obs)}})
	if err != nil {
		t.Fatal(err)
	}
	dom, err := rules.Parse("test.yaml", []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(dom)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetRules(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	override := desc("remote_address", "10.0.0.2")
	override.Override = &decide.Override{RequestsPerUnit: 5, Interval: time.Minute}
	if _, err := d.Decide(context.Background(), decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{desc("remote_address", "10.0.0.1"), override}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	rule, overridden := 0, 0
	for name, n := range seen {
		switch {
		case name == "serve:"+set.Rules()[0].ID():
			rule += n
		case strings.HasPrefix(name, "serve:override:"):
			overridden += n
		}
	}
	if rule == 0 || overridden == 0 {
		t.Fatalf("observed %v", seen)
	}
}
