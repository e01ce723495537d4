package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/rules"
)

func entries(kv ...string) []rules.Entry {
	var out []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestLoadEnvoyExamples(t *testing.T) {
	s, err := rules.Load("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Domains(), ","); got != "edge_proxy_per_ip,messaging,mongo_cps,newest" {
		t.Fatalf("domains %s", got)
	}
	cases := []struct {
		domain  string
		entries []rules.Entry
		path    string // "" for no rule
	}{
		{"mongo_cps", entries("database", "users"), "database=users"},
		{"mongo_cps", entries("database", "other"), ""},
		{"mongo_cps", entries("database", "users", "extra", "x"), ""},
		{"unknown", entries("database", "users"), ""},
		{"edge_proxy_per_ip", entries("remote_address", "10.0.0.1"), "remote_address"},
		{"edge_proxy_per_ip", entries("remote_address", "50.0.0.5"), "remote_address=50.0.0.5"},
		{"messaging", entries("message_type", "marketing", "to_number", "2061234567"), "message_type=marketing/to_number"},
		{"messaging", entries("message_type", "marketing"), ""},
		{"messaging", entries("to_number", "2061234567"), "to_number"},
		{"messaging", entries("path", "/api/users"), "path=%2Fapi%2F*"},
		{"messaging", entries("path", "/web"), ""},
		{"messaging", entries("client_id", "internal"), "client_id=internal"},
	}
	for _, c := range cases {
		r := s.Match(c.domain, c.entries)
		got := ""
		if r != nil {
			got = r.Path
		}
		if got != c.path {
			t.Errorf("Match(%s, %v) = %q, want %q", c.domain, c.entries, got, c.path)
		}
	}

	perIP := s.Match("edge_proxy_per_ip", entries("remote_address", "10.0.0.1"))
	want := redlimit.Config{Algorithm: redlimit.FixedWindow, Rate: 10, Interval: time.Second}
	if len(perIP.Limits) != 1 || perIP.Limits[0].Config != want {
		t.Errorf("per-IP limits %+v, want one %v", perIP.Limits, want)
	}
	if r := s.Match("edge_proxy_per_ip", entries("remote_address", "50.0.0.5")); !r.Blocked || r.BlockedInterval != time.Second || len(r.Limits) != 0 {
		t.Errorf("a limit of 0 should block: %+v", r)
	}
	msg := s.Domain("messaging")
	byPath := map[string]*rules.Rule{}
	for _, r := range msg.Rules {
		byPath[r.Path] = r
	}
	if r := byPath["client_id=test_client"]; !r.ShadowMode || r.Limits[0].Config.Interval != time.Minute {
		t.Errorf("shadow rule %+v", r)
	}
	if r := byPath["client_id=internal"]; !r.Unlimited || len(r.Limits) != 0 {
		t.Errorf("unlimited rule %+v", r)
	}
	if r := byPath["path=%2Fapi%2F*"]; r.Limits[0].Config.Interval != 2*time.Hour || !r.DetailedMetric {
		t.Errorf("unit_multiplier rule %+v", r)
	}
	if r := byPath["plan=gold"]; len(r.Replaces) != 1 || r.Replaces[0] != "per_user" {
		t.Errorf("replaces %+v", r)
	}
	if r := byPath["user"]; r.Name != "per_user" || strings.Join(r.Names(), ",") != "per_user" {
		t.Errorf("name %+v", r)
	}
	if r := byPath["client_id=test_client"]; r.File != filepath.Join("testdata/envoy", "messaging.yaml") || r.Line != 18 {
		t.Errorf("rule at %s:%d", r.File, r.Line)
	}
}

func TestLoadExtensions(t *testing.T) {
	s, err := rules.Load("testdata/extensions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tb := s.Match("api", entries("api_key", "k1"))
	if c := tb.Limits[0].Config; c != redlimit.TokenBucketConfig(10, time.Second, 50) {
		t.Errorf("token bucket %v", c)
	}
	two := s.Match("api", entries("tenant", "acme"))
	if len(two.Limits) != 2 || two.Limits[1].Config.Algorithm != redlimit.SlidingLog || two.Limits[1].Config.Interval != time.Hour || two.Limits[0].Name != "tenant-second" {
		t.Errorf("two limits %+v", two.Limits)
	}
	if got := strings.Join(two.Names(), ","); got != "tenant-second,tenant-hour" {
		t.Errorf("names %s", got)
	}
	lb := s.Match("api", entries("queue", "q"))
	if c := lb.Limits[0].Config; c != redlimit.LeakyBucketConfig(3, 1500*time.Millisecond, 6) {
		t.Errorf("leaky bucket %v", c)
	}
}

func TestLoadDigestFollowsContent(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "r.yaml")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	a, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 2}}]\n")
	c, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || a.Digest == c.Digest {
		t.Errorf("digests %s %s %s", a.Digest, b.Digest, c.Digest)
	}
	if d, err := rules.Digest(dir); err != nil || d != c.Digest {
		t.Errorf("Digest %s, %v; Load's %s", d, err, c.Digest)
	}
	write("domain: a\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 2}}]\n")
	if d, err := rules.Digest(dir); err != nil || d == c.Digest {
		t.Errorf("Digest of a bad file %s, %v", d, err)
	}
}

func TestLoadDirectorySkipsHiddenAndOthers(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml":       "domain: a\n",
		"b.yml":        "domain: b\n",
		".hidden.yaml": "not: [valid",
		"notes.txt":    "anything",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Domains(), ","); got != "a,b" {
		t.Errorf("domains %s", got)
	}
}

func TestBadFiles(t *testing.T) {
	cases := []struct {
		name, body string
		line       int
		field      string
		reason     string
	}{
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      unit: second\n", 4, "rate_limits", "unknown field"},
		{"unknown field in limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 3\n", 7, "burts", "unknown field"},
		{"syntax", "domain: d\ndescriptors:\n  - key: k\n   value: v\n", 2, "", "did not find expected"},
		{"wrong type", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: lots\n", 6, "", "cannot unmarshal"},
		{"not a map", "domain: d\ndescriptors:\n  - a\n", 3, "", "cannot unmarshal str `a` into a descriptor"},
		{"empty", "", 0, "", "is empty"},
		{"no domain", "descriptors: []\n", 1, "domain", "must not be empty"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", 3, "descriptors[0].key", "must not be empty"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", 5, "descriptors[1]", "duplicate descriptor"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", 5, "descriptors[0].rate_limit.unit", "unknown unit"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n", 5, "descriptors[0].rate_limit.unit", "missing"},
		{"no rate", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n", 5, "descriptors[0].rate_limit.requests_per_unit", "missing"},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", 6, "descriptors[0].rate_limit.requests_per_unit", "must not be negative"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", 5, "descriptors[0].rate_limit.unlimited", "takes no unit"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", 8, "descriptors[0].rate_limit.replaces", "empty name"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: a}]\n", 8, "descriptors[0].rate_limit.replaces", "names the limit itself"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: magic\n", 7, "descriptors[0].rate_limit.algorithm", "magic"},
		{"burst on fixed window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n", 7, "descriptors[0].rate_limit.burst", "applies to token-bucket"},
		{"unit and interval", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      interval: 2s\n      requests_per_unit: 1\n", 6, "descriptors[0].rate_limit.interval", "not both"},
		{"bad interval", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      interval: soon\n      requests_per_unit: 1\n", 5, "descriptors[0].rate_limit.interval", "not a positive Go duration"},
		{"both forms", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    limits:\n      - {unit: second, requests_per_unit: 1}\n", 6, "descriptors[0].limits", "not both"},
		{"nested bad limit", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        limits:\n          - {unit: second, requests_per_unit: 1}\n          - {unit: minute, requests_per_unit: 0}\n", 8, "descriptors[0].descriptors[0].limits[1].requests_per_unit", "goes on rate_limit"},
		{"shadow without limit", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n", 4, "descriptors[0].shadow_mode", "needs rate_limit"},
		{"two documents", "domain: d\n---\ndomain: e\n", 2, "", "more than one YAML document"},
		{"duplicate key", "domain: d\ndomain: e\n", 2, "", "already defined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := rules.Parse("r.yaml", []byte(c.body))
			var e *rules.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *rules.Error", err, err)
			}
			if !errors.Is(err, rules.ErrInvalid) || !errors.Is(err, redlimit.ErrInvalidArgument) {
				t.Errorf("%v does not match ErrInvalid and ErrInvalidArgument", err)
			}
			if e.File != "r.yaml" || e.Line != c.line || e.Field != c.field || !strings.Contains(e.Reason, c.reason) {
				t.Errorf("got %#v\nwant line %d field %q reason containing %q", e, c.line, c.field, c.reason)
			}
		})
	}
}

func TestDuplicateDomain(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("domain: same\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rules.Load(dir)
	if !errors.Is(err, rules.ErrInvalid) || !strings.Contains(err.Error(), `domain "same" is also defined in`) {
		t.Fatalf("got %v", err)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := rules.Load(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
	_, err = rules.Load(t.TempDir())
	if !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("empty dir: got %v", err)
	}
}

func TestUnitOf(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		u    rules.Unit
		mult int64
	}{
		{time.Second, rules.Second, 1},
		{90 * time.Second, rules.Second, 90},
		{2 * time.Hour, rules.Hour, 2},
		{7 * 24 * time.Hour, rules.Week, 1},
		{1500 * time.Millisecond, "", 0},
	} {
		if u, m := rules.UnitOf(c.d); u != c.u || m != c.mult {
			t.Errorf("UnitOf(%v) = %s, %d", c.d, u, m)
		}
	}
}

func TestNewerEnvoyFields(t *testing.T) {
	s, err := rules.Load("testdata/envoy/newest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []rules.Entry
		path    string
		key     string
	}{
		{entries("path", "/api/v1/users"), "path=%2Fapi%2F*%2Fusers", "%2Fapi%2Fv1%2Fusers"},
		{entries("path", "/api/users"), "", ""}, // the literal parts may not overlap
		{entries("path", "/api/v1/orders"), "", ""},
		{entries("mid", "barab"), "mid=bar*b", "barab"},
		{entries("mid", "bar123b"), "mid=bar*b", "bar123b"},
		{entries("mid", "bar"), "", ""},
		{entries("multi", "fooXbarYbaz"), "multi=foo*bar*baz", "fooXbarYbaz"},
		{entries("multi", "foobarbaz"), "multi=foo*bar*baz", "foobarbaz"},
		{entries("multi", "foobaz"), "", ""},
		{entries("multi", "fooXbazYbar"), "", ""},
		{entries("multi", "foobazbarbaz"), "multi=foo*bar*baz", "foobazbarbaz"},
		{entries("path", "/files/a.txt"), "path=%2Ffiles%2F*", "%*%2Ffiles%2F*"},
		{entries("path", "/files/b.txt"), "path=%2Ffiles%2F*", "%*%2Ffiles%2F*"},
		{entries("org", "acme", "user", "ann"), "org=*/user", "%**/ann"},
		{entries("org", "initech", "user", "ann"), "org=*/user", "%**/ann"},
		{entries("quota_a", "x"), "quota_a", "x"},
	} {
		r, key := s.MatchKey("newest", c.entries)
		path := ""
		if r != nil {
			path = r.Path
		}
		if path != c.path || key != c.key {
			t.Errorf("MatchKey(%v) = %q, %q; want %q, %q", c.entries, path, key, c.path, c.key)
		}
	}
	if r := s.Match("newest", entries("quota_b", "x")); !r.QuotaMode {
		t.Errorf("quota_mode not read: %+v", r)
	}
	for _, bad := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
		"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
	} {
		if _, err := rules.Parse("r.yaml", []byte(bad)); !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestMatchKeyIsUnambiguous(t *testing.T) {
	d, err := rules.Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: one\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := rules.NewSet(d)
	seen := map[string][]rules.Entry{}
	for _, e := range [][]rules.Entry{
		entries("a", "x/y", "b", "z"),
		entries("a", "x", "b", "y/z"),
		entries("a", "", "b", ""),
		entries("a", "%", "b", ""),
	} {
		_, k := s.MatchKey("d", e)
		if prev, dup := seen[k]; dup {
			t.Errorf("%v and %v share key %q", prev, e, k)
		}
		seen[k] = e
	}
	for _, v := range []string{"", "%", "%25", "a/b", "a%2Fb"} {
		_, k := s.MatchKey("d", entries("one", v))
		if prev, dup := seen[k]; dup || k == "" {
			t.Errorf("value %q: key %q (also %v)", v, k, prev)
		}
		seen[k] = entries("one", v)
	}
}

func TestUnlimitedIgnoresRequestsPerUnit(t *testing.T) {
	d, err := rules.Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n"))
	if err != nil || !d.Rules[0].Unlimited {
		t.Fatalf("%+v %v", d, err)
	}
}

// TestMatchKeyEscapes: the key of a descriptor escapes '%', '/' and '='
// in its values as %XX (upper-case hex), so that no two descriptors
// share a key; the stored counts depend on it.
func TestMatchKeyEscapes(t *testing.T) {
	d, err := rules.Parse("r.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: one\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []rules.Entry
		want    string
	}{
		{[]rules.Entry{{Key: "one", Value: "1.2.3.4"}}, "1.2.3.4"},
		{[]rules.Entry{{Key: "one", Value: "/x=%y"}}, "%2Fx%3D%25y"},
		{[]rules.Entry{{Key: "a", Value: "p/q"}, {Key: "b", Value: "r=s"}}, "p%2Fq/r%3Ds"},
		{[]rules.Entry{{Key: "a", Value: ""}, {Key: "b", Value: ""}}, "/"},
	} {
		if r, got := set.MatchKey("d", c.entries); r == nil || got != c.want {
			t.Errorf("%v: key %q (rule %v), want %q", c.entries, got, r, c.want)
		}
	}
	if got := rules.Escape("a%/=\x00z"); got != "a%25%2F%3D\x00z" {
		t.Errorf("Escape: %q", got)
	}
}
