package decide_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

const testRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: client
    value: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: client
    value: internal
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}
  - key: plan
    value: gold
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per_user}]
  - key: tenant
    limits:
      - {name: per-second, unit: second, requests_per_unit: 2}
      - {name: per-minute, unit: minute, requests_per_unit: 3}
  - key: path
    value: /api
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5}
`

// t0 is 20s into a minute: fixed windows of a minute reset 40s later.
var t0 = time.Date(2026, 11, 23, 10, 0, 20, 0, time.UTC)

type env struct {
	t     *testing.T
	clock *clock.Fake
	d     *decide.Decider
}

func newEnv(t *testing.T, yaml string, opts decide.Options) *env {
	t.Helper()
	fake := clock.NewFake(t0)
	store := memstore.New(memstore.WithTimeSource(fake))
	opts.Clock = fake
	d, err := decide.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clock: fake, d: d}
	e.setRules(yaml)
	return e
}

func (e *env) setRules(yaml string) {
	e.t.Helper()
	dom, err := rules.Parse("test.yaml", []byte(yaml))
	if err != nil {
		e.t.Fatal(err)
	}
	set, err := rules.NewSet(dom)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.d.SetRules(context.Background(), set); err != nil {
		e.t.Fatal(err)
	}
}

func desc(kv ...string) decide.Descriptor {
	var d decide.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) decide(hits uint32, ds ...decide.Descriptor) decide.Response {
	e.t.Helper()
	r, err := e.d.Decide(context.Background(), decide.Request{Domain: "edge", Descriptors: ds, Hits: hits})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func TestFixedWindowPerValue(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	for i, want := range []int64{2, 1, 0} {
		r := e.decide(0, desc("remote_address", "10.0.0.1"))
		st := r.Statuses[0]
		if r.Overall != decide.OK || st.Code != decide.OK || st.Remaining != want || st.ResetAfter != 40*time.Second {
			t.Fatalf("call %d: %+v", i, st)
		}
		if st.Limit.Config.Rate != 3 || st.Limit.Unit != rules.Minute || st.Limit.Multiplier != 1 || st.Rule.Path != "remote_address" {
			t.Fatalf("limit %+v", st.Limit)
		}
	}
	r := e.decide(0, desc("remote_address", "10.0.0.1"))
	if r.Overall != decide.OverLimit || r.Statuses[0].Code != decide.OverLimit || r.Statuses[0].Remaining != 0 || r.Statuses[0].RetryAfter != 40*time.Second {
		t.Fatalf("4th call %+v", r)
	}
	// Another value has its own count.
	if r := e.decide(0, desc("remote_address", "10.0.0.2")); r.Overall != decide.OK || r.Statuses[0].Remaining != 2 {
		t.Fatalf("other address %+v", r)
	}
	// The next window starts whole.
	e.clock.Advance(40 * time.Second)
	if r := e.decide(0, desc("remote_address", "10.0.0.1")); r.Overall != decide.OK || r.Statuses[0].Remaining != 2 || r.Statuses[0].ResetAfter != time.Minute {
		t.Fatalf("next window %+v", r.Statuses[0])
	}
}

func TestNoRuleBlockedUnlimited(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	r := e.decide(0, desc("nothing", "x"), desc("remote_address", "50.0.0.5"), desc("client", "internal"))
	if r.Overall != decide.OverLimit {
		t.Fatalf("overall %v", r.Overall)
	}
	if st := r.Statuses[0]; st.Code != decide.OK || st.Rule != nil || st.Limit != nil {
		t.Errorf("no rule: %+v", st)
	}
	if st := r.Statuses[1]; st.Code != decide.OverLimit || st.Limit.Config.Rate != 0 || st.Limit.Unit != rules.Second {
		t.Errorf("blocked: %+v", st)
	}
	if st := r.Statuses[2]; st.Code != decide.OK || !st.Unlimited || st.Limit != nil {
		t.Errorf("unlimited: %+v", st)
	}
	if r := e.decide(0, desc("domain-unknown", "x")); r.Overall != decide.OK {
		t.Errorf("unknown key %+v", r)
	}
	r2, err := e.d.Decide(context.Background(), decide.Request{Domain: "other", Descriptors: []decide.Descriptor{desc("remote_address", "10.0.0.1")}})
	if err != nil || r2.Overall != decide.OK || r2.Statuses[0].Rule != nil {
		t.Errorf("unknown domain: %+v, %v", r2, err)
	}
}

func TestShadowMode(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	e.decide(0, desc("client", "shadow"))
	r := e.decide(0, desc("client", "shadow"))
	if st := r.Statuses[0]; r.Overall != decide.OK || st.Code != decide.OK || !st.Shadowed || st.Remaining != 0 {
		t.Fatalf("shadow over limit %+v", r)
	}
}

func TestReplaces(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	for range 3 {
		r := e.decide(0, desc("user", "u1"), desc("plan", "gold"))
		if r.Overall != decide.OK || !r.Statuses[0].Replaced || r.Statuses[0].Limit != nil {
			t.Fatalf("replaced %+v", r)
		}
	}
	// Alone, per_user applies and was never charged above.
	if r := e.decide(0, desc("user", "u1")); r.Statuses[0].Remaining != 1 {
		t.Fatalf("per_user %+v", r.Statuses[0])
	}
}

func TestNested(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	r := e.decide(0, desc("path", "/api", "method", "GET"))
	if st := r.Statuses[0]; st.Rule == nil || st.Rule.Path != "path=%2Fapi/method" || st.Remaining != 4 {
		t.Fatalf("nested %+v", st)
	}
	r = e.decide(0, desc("path", "/api", "method", "POST"))
	if st := r.Statuses[0]; st.Remaining != 4 {
		t.Fatalf("each method apart %+v", st)
	}
	if r := e.decide(0, desc("path", "/api")); r.Statuses[0].Rule != nil {
		t.Fatalf("a prefix of the tree has no limit %+v", r.Statuses[0])
	}
}

func TestSeveralLimits(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	for range 2 {
		if r := e.decide(0, desc("tenant", "acme")); r.Overall != decide.OK {
			t.Fatalf("%+v", r)
		}
	}
	r := e.decide(0, desc("tenant", "acme"))
	if st := r.Statuses[0]; st.Code != decide.OverLimit || st.Limit.Name != "per-second" || len(st.Result.Limits) != 2 {
		t.Fatalf("per-second refusal %+v", st)
	}
	e.clock.Advance(time.Second)
	if r := e.decide(0, desc("tenant", "acme")); r.Overall != decide.OK || r.Statuses[0].Limit.Name != "per-minute" || r.Statuses[0].Remaining != 0 {
		t.Fatalf("third within the minute %+v", r.Statuses[0])
	}
	e.clock.Advance(time.Second)
	if st := e.decide(0, desc("tenant", "acme")).Statuses[0]; st.Code != decide.OverLimit || st.Limit.Name != "per-minute" || st.ResetAfter != 38*time.Second {
		t.Fatalf("per-minute refusal %+v", st)
	}
}

func TestHits(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	if st := e.decide(2, desc("remote_address", "a")).Statuses[0]; st.Remaining != 1 {
		t.Fatalf("hits 2: %+v", st)
	}
	zero := uint64(0)
	look := desc("remote_address", "a")
	look.Hits = &zero
	for range 3 {
		if st := e.decide(0, look).Statuses[0]; st.Code != decide.OK || st.Remaining != 1 {
			t.Fatalf("hits_addend 0 only looks: %+v", st)
		}
	}
	if st := e.decide(2, desc("remote_address", "a")).Statuses[0]; st.Code != decide.OverLimit {
		t.Fatalf("hits 2 over 1 left: %+v", st)
	}
	// More than the limit ever grants: over it, not an error.
	if st := e.decide(100, desc("remote_address", "b")).Statuses[0]; st.Code != decide.OverLimit || st.Limit.Config.Rate != 3 {
		t.Fatalf("hits 100: %+v", st)
	}
}

func TestAllOrNothing(t *testing.T) {
	for _, aon := range []bool{false, true} {
		e := newEnv(t, testRules, decide.Options{AllOrNothing: aon})
		e.decide(0, desc("user", "u"))
		e.decide(0, desc("user", "u"))
		r := e.decide(0, desc("remote_address", "ip"), desc("user", "u"))
		if r.Overall != decide.OverLimit || r.Statuses[0].Code != decide.OK {
			t.Fatalf("%+v", r)
		}
		want := int64(1)
		if aon {
			want = 2 // the grant on remote_address was handed back
		}
		if st := e.decide(0, desc("remote_address", "ip")).Statuses[0]; st.Remaining != want {
			t.Errorf("all-or-nothing %v: remaining %d, want %d", aon, st.Remaining, want)
		}
	}
}

func TestSetRulesKeepsCounts(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	e.decide(0, desc("remote_address", "ip"))
	e.decide(0, desc("remote_address", "ip"))
	e.setRules(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	if st := e.decide(0, desc("remote_address", "ip")).Statuses[0]; st.Remaining != 7 || st.Limit.Config.Rate != 10 {
		t.Fatalf("after raising the limit %+v", st)
	}
	if e.d.Rules().Domain("edge").Rules[0].Limits[0].Config.Rate != 10 {
		t.Fatal("Rules() does not show the new rules")
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{MaxDescriptors: 2, MaxEntries: 2})
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'x'
	}
	for name, req := range map[string]decide.Request{
		"no domain":         {Descriptors: []decide.Descriptor{desc("a", "b")}},
		"no descriptors":    {Domain: "edge"},
		"too many":          {Domain: "edge", Descriptors: []decide.Descriptor{desc("a", "b"), desc("a", "b"), desc("a", "b")}},
		"no entries":        {Domain: "edge", Descriptors: []decide.Descriptor{{}}},
		"too many entries":  {Domain: "edge", Descriptors: []decide.Descriptor{desc("a", "b", "c", "d", "e", "f")}},
		"empty key":         {Domain: "edge", Descriptors: []decide.Descriptor{desc("", "b")}},
		"value over 1024 B": {Domain: "edge", Descriptors: []decide.Descriptor{desc("remote_address", string(long))}},
	} {
		_, err := e.d.Decide(context.Background(), req)
		if !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	fresh, _ := decide.New(memstore.New(), decide.Options{})
	if _, err := fresh.Decide(context.Background(), decide.Request{Domain: "d", Descriptors: []decide.Descriptor{desc("a", "b")}}); !errors.Is(err, decide.ErrNoRules) {
		t.Errorf("no rules: %v", err)
	}
	if _, err := decide.New(nil, decide.Options{}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("nil store: %v", err)
	}
}

func TestOverride(t *testing.T) {
	e := newEnv(t, testRules, decide.Options{})
	over := func(kv ...string) decide.Descriptor {
		d := desc(kv...)
		d.Override = &decide.Override{RequestsPerUnit: 2, Interval: time.Minute}
		return d
	}
	for i, want := range []int64{1, 0} {
		st := e.decide(0, over("remote_address", "ip", "path", "/x")).Statuses[0]
		if st.Code != decide.OK || st.Remaining != want || st.Limit.Config.Rate != 2 || st.Limit.Unit != rules.Minute || st.ResetAfter != 40*time.Second {
			t.Fatalf("call %d: %+v", i, st)
		}
	}
	if st := e.decide(0, over("remote_address", "ip", "path", "/x")).Statuses[0]; st.Code != decide.OverLimit {
		t.Fatalf("3rd: %+v", st)
	}
	// Keyed by every entry; the rules' own limit is not charged.
	if st := e.decide(0, over("remote_address", "ip", "path", "/y")).Statuses[0]; st.Remaining != 1 {
		t.Fatalf("other path: %+v", st)
	}
	if st := e.decide(0, desc("remote_address", "ip")).Statuses[0]; st.Remaining != 2 || st.Limit.Config.Rate != 3 {
		t.Fatalf("rules' limit: %+v", st)
	}
	block := desc("anything", "x")
	block.Override = &decide.Override{RequestsPerUnit: 0, Interval: time.Hour}
	if st := e.decide(0, block).Statuses[0]; st.Code != decide.OverLimit || st.Limit.Unit != rules.Hour {
		t.Fatalf("override 0: %+v", st)
	}
	r, err := e.d.Decide(context.Background(), decide.Request{Domain: "unknown", Descriptors: []decide.Descriptor{block}})
	if err != nil || r.Overall != decide.OK {
		t.Fatalf("unknown domain: %+v %v", r, err)
	}
	bad := desc("a", "b")
	bad.Override = &decide.Override{RequestsPerUnit: 1, Interval: 1500 * time.Millisecond}
	if _, err := e.d.Decide(context.Background(), decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{bad}}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("bad override: %v", err)
	}
}

const newerRules = `
domain: edge
descriptors:
  - key: path
    value: "/files/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: "/img/*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

func TestShareThreshold(t *testing.T) {
	e := newEnv(t, newerRules, decide.Options{})
	e.decide(0, desc("path", "/files/a"))
	if st := e.decide(0, desc("path", "/files/b")).Statuses[0]; st.Code != decide.OK || st.Remaining != 0 {
		t.Fatalf("shared count: %+v", st)
	}
	if st := e.decide(0, desc("path", "/files/c")).Statuses[0]; st.Code != decide.OverLimit {
		t.Fatalf("third file: %+v", st)
	}
	// Without share_threshold each value counts apart.
	e.decide(0, desc("path", "/img/a"))
	if st := e.decide(0, desc("path", "/img/b")).Statuses[0]; st.Remaining != 1 {
		t.Fatalf("own counts: %+v", st)
	}
}

func TestQuotaMode(t *testing.T) {
	e := newEnv(t, newerRules, decide.Options{})
	if r := e.decide(0, desc("quota_a", "u"), desc("quota_b", "u")); r.Overall != decide.OK {
		t.Fatalf("first: %+v", r)
	}
	e.decide(0, desc("quota_b", "v")) // b is spent for v, a is not
	r := e.decide(0, desc("quota_a", "v"), desc("quota_b", "v"))
	if r.Overall != decide.OK || r.Statuses[0].Code != decide.OK || r.Statuses[1].Code != decide.OverLimit {
		t.Fatalf("one quota over: %+v", r)
	}
	r = e.decide(0, desc("quota_a", "u"), desc("quota_b", "u"))
	if r.Overall != decide.OverLimit {
		t.Fatalf("every quota over: %+v", r)
	}
	// A descriptor under an ordinary rule still decides alone.
	r = e.decide(0, desc("quota_a", "w"), desc("path", "/files/x"), desc("path", "/files/y"), desc("path", "/files/z"))
	if r.Overall != decide.OverLimit || r.Statuses[0].Code != decide.OK {
		t.Fatalf("mixed: %+v", r)
	}
}

// TestSetRulesWhileDeciding swaps the rules while callers decide: every
// answer comes from the old rules or the new, whole.
func TestSetRulesWhileDeciding(t *testing.T) {
	e := newEnv(t, limitYAML(100), decide.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			req := decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{desc("remote_address", "ip"+strconv.Itoa(g))}}
			for range 200 {
				r, err := e.d.Decide(context.Background(), req)
				if err != nil {
					errs <- err
					return
				}
				if rate := r.Statuses[0].Limit.Config.Rate; rate != 100 && rate != 200 {
					errs <- fmt.Errorf("rate %d", rate)
					return
				}
			}
		})
	}
	for i := range 20 {
		e.setRules(limitYAML(100 + 100*(i%2)))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func limitYAML(rate int) string {
	return "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(rate) + "}\n"
}
