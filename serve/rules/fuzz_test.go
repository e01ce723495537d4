package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/redlimit/redlimit/serve/rules"
)

// FuzzParse: any bytes give rules or an *Error, never a panic, and
// matching on what was parsed never panics either.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata", "testdata/envoy"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: 'v*', descriptors: [{key: k2, limits: [{unit: hour, requests_per_unit: 1}]}]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := rules.Parse("f.yaml", data)
		if err != nil {
			var e *rules.Error
			if !errors.As(err, &e) || !errors.Is(err, rules.ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *rules.Error", err, err)
			}
			return
		}
		set, err := rules.NewSet(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Rules {
			if len(r.Limits) == 0 && !r.Unlimited && !r.Blocked {
				t.Fatalf("rule %s has no limit", r)
			}
		}
		set.Match(d.Name, []rules.Entry{{Key: "k", Value: "v"}, {Key: "k2", Value: ""}})
	})
}
