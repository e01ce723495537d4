package serve

import (
	"testing"

	"github.com/redlimit/redlimit/serve/rules"
)

func set(t *testing.T, yaml string) *rules.Set {
	t.Helper()
	d, err := rules.Parse("r.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rules.NewSet(d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDiff(t *testing.T) {
	a := set(t, "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: c, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	b := set(t, "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 2}}\n  - {key: e, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	if added, changed, removed := diff(a, b); added != 1 || changed != 1 || removed != 1 {
		t.Errorf("diff = %d added, %d changed, %d removed", added, changed, removed)
	}
	if added, changed, removed := diff(nil, b); added != 3 || changed != 0 || removed != 0 {
		t.Errorf("from nothing: %d %d %d", added, changed, removed)
	}
}
