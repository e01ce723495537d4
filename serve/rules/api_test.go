package rules_test

import (
	"errors"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/rules"
)

func rate(n int64) *int64 { return &n }

func mustCompile(t *testing.T, domain, path string, spec rules.Spec) *rules.Rule {
	t.Helper()
	r, err := rules.Compile(domain, path, spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const baseYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: "mobile-*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
`

// TestSetWith: API rules take the place of the file's at their path, or
// add to them, in the domain or a new one; the file's set stays as it
// was.
func TestSetWith(t *testing.T) {
	d, err := rules.Parse("edge.yaml", []byte(baseYAML))
	if err != nil {
		t.Fatal(err)
	}
	base, err := rules.NewSet(d)
	if err != nil {
		t.Fatal(err)
	}
	base.Digest = "file"
	one := rules.Spec{Limits: []rules.LimitSpec{{Rate: rate(9), Interval: "1m"}}}
	extra := []*rules.Rule{
		mustCompile(t, "edge", "remote_address", one),
		mustCompile(t, "edge", "client=mobile-*", one),
		mustCompile(t, "edge", "tenant=acme", one),
		mustCompile(t, "edge", "tenant=acme/user", rules.Spec{Unlimited: true}),
		mustCompile(t, "edge", "client=web-*", one),
		mustCompile(t, "other", "k=v", one),
	}
	set, err := base.With(extra, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if set.Digest == base.Digest || set.Digest == "" {
		t.Fatalf("digest %q", set.Digest)
	}
	if again, _ := base.With(extra, "v1"); again.Digest != set.Digest {
		t.Fatal("the digest depends on more than its inputs")
	}
	if same, _ := base.With(nil, "v1"); same != base {
		t.Fatal("no extra rules: not the same set")
	}
	cases := []struct {
		domain  string
		entries []rules.Entry
		path    string
		api     bool
	}{
		{"edge", entries("remote_address", "10.0.0.1"), "remote_address", true},
		{"edge", entries("client", "mobile-ios"), "client=mobile-*", true},
		{"edge", entries("client", "web-firefox"), "client=web-*", true},
		{"edge", entries("tenant", "acme"), "tenant=acme", true},
		{"edge", entries("tenant", "acme", "user", "u1"), "tenant=acme/user", true},
		{"edge", entries("tenant", "other", "user", "u1"), "tenant/user", false},
		{"other", entries("k", "v"), "k=v", true},
	}
	for _, c := range cases {
		r := set.Match(c.domain, c.entries)
		if r == nil || r.Path != c.path || r.API != c.api {
			t.Errorf("%s %v: %+v", c.domain, c.entries, r)
		}
	}
	// share_threshold stays with the replaced wildcard.
	if _, k := set.MatchKey("edge", entries("client", "mobile-android")); k != "%*mobile-*" {
		t.Errorf("shared key %q", k)
	}
	if n := len(set.Domain("edge").Rules); n != 6 {
		t.Errorf("%d rules in edge", n)
	}
	// The file's set is unchanged.
	if r := base.Match("edge", entries("remote_address", "x")); r == nil || r.API {
		t.Errorf("base changed: %+v", r)
	}
	if r := base.Match("edge", entries("tenant", "acme")); r != nil || base.Domain("other") != nil || len(base.Domain("edge").Rules) != 3 {
		t.Errorf("base changed: %+v", r)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct {
		domain, path string
		spec         rules.Spec
		field        string
	}{
		{"", "k", rules.Spec{Unlimited: true}, "domain"},
		{"d", "", rules.Spec{Unlimited: true}, "path"},
		{"a\x00b", "k", rules.Spec{Unlimited: true}, "domain"},
		{"d", "k/=v", rules.Spec{Unlimited: true}, "path"},
		{"d", "k=%zz", rules.Spec{Unlimited: true}, "path"},
		{"d", "k", rules.Spec{}, "limits"},
		{"d", "k", rules.Spec{Limits: []rules.LimitSpec{{Rate: rate(1), Interval: "0s"}}}, "limits[0].interval"},
		{"d", "k", rules.Spec{Limits: []rules.LimitSpec{{Rate: rate(1), Interval: "1s", Algorithm: "token-bucket", Capacity: 5}}}, "limits[0].capacity"},
		{"d", "k", rules.Spec{Limits: make([]rules.LimitSpec, 17)}, "limits"},
	} {
		_, err := rules.Compile(c.domain, c.path, c.spec)
		var e *rules.Error
		if !errors.As(err, &e) || e.Field != c.field || !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%q %q %+v: %v", c.domain, c.path, c.spec, err)
		}
	}
}

func TestParsePath(t *testing.T) {
	for _, p := range []string{"k", "k=v", "a=1/b/c=x%2Fy", "k=%25"} {
		e, err := rules.ParsePath(p)
		if err != nil || rules.PathOf(e) != p {
			t.Errorf("%q: %v %v", p, e, err)
		}
	}
	if e, _ := rules.ParsePath("c=x%2Fy"); e[0].Value != "x/y" {
		t.Errorf("unescaped %v", e)
	}
}

// FuzzParsePath: any path is an *Error or parses to entries that print
// back as it; a good path with any limit compiles or is an *Error.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"k", "k=v/k2", "a=%2F", "=", "k=%", "k=a*b/x"} {
		f.Add(s, int64(1), "1s")
	}
	f.Fuzz(func(t *testing.T, path string, n int64, interval string) {
		e, err := rules.ParsePath(path)
		var re *rules.Error
		if err != nil {
			if !errors.As(err, &re) {
				t.Fatalf("%q: %v is not an *Error", path, err)
			}
			return
		}
		if got := rules.PathOf(e); got != path {
			t.Fatalf("%q prints back as %q", path, got)
		}
		if _, err := rules.Compile("d", path, rules.Spec{Limits: []rules.LimitSpec{{Rate: &n, Interval: interval}}}); err != nil && !errors.As(err, &re) {
			t.Fatalf("%q: %v is not an *Error", path, err)
		}
	})
}
