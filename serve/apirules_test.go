package serve_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/serve"
)

const (
	aliceToken = "alice-secret-0123456789"
	bobToken   = "bob-secret-9876543210xx"
)

var testTokens = map[string]string{"alice": aliceToken, "bob": bobToken}

// apiRules is a rules file of token buckets (no window turns during a
// test): 3 per hour per address, 100 per hour per user.
const apiRulesFile = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token-bucket}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token-bucket}
`

// do sends one request with an optional bearer token and JSON body and
// decodes the JSON answer.
func do(t *testing.T, method, url, token, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
	}
	if strings.Contains(string(data), aliceToken) || strings.Contains(string(data), bobToken) {
		t.Fatalf("%s %s: the answer shows a token: %s", method, url, data)
	}
	return resp.StatusCode, resp.Header, out
}

// waitVersion waits until srv's rules are version.
func waitVersion(t *testing.T, srv *serve.Server, version string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a failure bound, not a wait
	for srv.RulesVersion() != version {
		if time.Now().After(deadline) {
			t.Fatalf("rules version %s, want %s", srv.RulesVersion(), version)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// remaining asks c once for the address and returns the answer's
// limit and remaining.
func remaining(t *testing.T, c rlsv3.RateLimitServiceClient, addr string) (uint32, uint32) {
	t.Helper()
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", addr)}})
	st := resp.Statuses[0]
	return st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining
}

// findRule returns the rule at path in a GET /v1/rules answer.
func findRule(t *testing.T, list map[string]any, domain, path string) map[string]any {
	t.Helper()
	for _, r := range list["rules"].([]any) {
		if m := r.(map[string]any); m["domain"] == domain && m["path"] == path {
			return m
		}
	}
	t.Fatalf("no rule %s %s in %v", domain, path, list)
	return nil
}

// TestAPIRulesAcrossInstances runs two instances on one real Redis: a
// rule set on A is in force on B, survives a reload of the file, shows
// its source and author, and its removal brings the file's rule back.
func TestAPIRulesAcrossInstances(t *testing.T) {
	rs := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, file, apiRulesFile)
	logs := &syncbuf.Buffer{}
	evA, evB := make(reloads, 16), make(reloads, 16)
	// No periodic check within the test: the announcements alone carry
	// the changes.
	a := redisInstance(t, rs, serve.Config{Rules: file, Tokens: testTokens, RulesPoll: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), OnReload: func(r serve.Reload) { evA <- r }})
	b := redisInstance(t, rs, serve.Config{Rules: file, Tokens: testTokens, RulesPoll: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), OnReload: func(r serve.Reload) { evB <- r }})
	<-a.srv.Watching()
	<-b.srv.Watching()
	waitSubscribers(t, rs, 2)
	if a.srv.RulesVersion() == "" || a.srv.RulesVersion() != b.srv.RulesVersion() {
		t.Fatalf("versions at start: %q %q", a.srv.RulesVersion(), b.srv.RulesVersion())
	}
	fileVersion := a.srv.RulesVersion()
	ca, cb := rlsClient(t, a.grpcAddr), rlsClient(t, b.grpcAddr)
	if l, r := remaining(t, cb, "10.0.0.1"); l != 3 || r != 2 {
		t.Fatalf("file rule on B: limit %d remaining %d", l, r)
	}

	// Set on A.
	body := `{"limits":[{"algorithm":"token-bucket","rate":5,"interval":"1h","name":"per-ip"}]}`
	code, _, out := do(t, "PUT", "http://"+a.httpAddr+"/v1/rules/edge/remote_address", aliceToken, body)
	if code != http.StatusOK || out["version"] != a.srv.RulesVersion() || out["version"] == fileVersion {
		t.Fatalf("PUT: %d %v", code, out)
	}
	if out["source"] != "api" || out["set_by"] != "alice" || out["name"] != "per-ip" || out["previous"] != nil {
		t.Fatalf("PUT answer's rule: %v", out)
	}
	// In force on B: the count goes on under the new limit.
	waitVersion(t, b.srv, a.srv.RulesVersion())
	if l, r := remaining(t, cb, "10.0.0.5"); l != 5 || r != 4 {
		t.Fatalf("API rule on B: limit %d remaining %d", l, r)
	}
	code, _, jsonOut := post(t, "http://"+b.httpAddr+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}]}`)
	if st := jsonOut["statuses"].([]any)[0].(map[string]any); code != http.StatusOK || st["currentLimit"].(map[string]any)["requestsPerUnit"] != 5.0 || st["limitRemaining"] != 4.0 {
		t.Fatalf("POST /json on B: %d %v", code, jsonOut)
	}

	// The registry lists both instances on the new rules; the metrics
	// count the API's rule.
	eventually(t, "the instances' rules versions", func() (bool, string) {
		list := instances(t, a.httpAddr)
		same := len(list) == 2
		for _, in := range list {
			same = same && in.RulesVersion == a.srv.RulesVersion()
		}
		return same, describe(list)
	})
	if n, _ := value(scrape(t, b.httpAddr), "redlimit_serve_rules", map[string]string{"source": "api"}); n != 1 {
		t.Fatalf("API rules in the metrics: %v", n)
	}

	// Every view on B says where the rule comes from.
	_, _, list := do(t, "GET", "http://"+b.httpAddr+"/v1/rules", "", "")
	if list["version"] != b.srv.RulesVersion() {
		t.Fatalf("GET /v1/rules version %v", list["version"])
	}
	rule := findRule(t, list, "edge", "remote_address")
	if rule["source"] != "api" || rule["set_by"] != "alice" || rule["overrides"].(map[string]any)["line"] != 3.0 || rule["descriptor"].([]any)[0].(map[string]any)["key"] != "remote_address" {
		t.Fatalf("API rule: %v", rule)
	}
	if l := rule["limits"].([]any)[0].(map[string]any); l["algorithm"] != "token-bucket" || l["rate"] != 5.0 || l["interval"] != "1h0m0s" || l["limit"] == "" {
		t.Fatalf("API rule's limit: %v", l)
	}
	if user := findRule(t, list, "edge", "user"); user["source"] != "file" || user["file"] != file || user["line"] != 5.0 {
		t.Fatalf("file rule: %v", user)
	}
	if _, body := get(t, "http://"+b.httpAddr+"/rules"); !strings.Contains(body, `"source":"api"`) || !strings.Contains(body, `"source":"file `+file+`:5"`) {
		t.Fatalf("GET /rules: %s", body)
	}

	// A rule for a descriptor and a domain the file lacks, by bob on B.
	code, _, out = do(t, "PUT", "http://"+b.httpAddr+"/v1/rules/internal/tenant=acme/user", bobToken, `{"limits":[{"rate":2,"interval":"1h","algorithm":"token-bucket"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT new domain: %d %v", code, out)
	}
	waitVersion(t, a.srv, b.srv.RulesVersion())
	req := &rlsv3.RateLimitRequest{Domain: "internal", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("tenant", "acme", "user", "u1")}}
	if resp := call(t, ca, req); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("new domain's rule on A: %v", resp)
	}

	// A reload of the file keeps the API's rules over the file's.
	replace(t, file, strings.Replace(apiRulesFile, "requests_per_unit: 100", "requests_per_unit: 50", 1))
	for _, ev := range []serve.Reload{evA.next(t), evB.next(t)} {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	if a.srv.RulesVersion() != b.srv.RulesVersion() {
		t.Fatalf("after the reload: %s %s", a.srv.RulesVersion(), b.srv.RulesVersion())
	}
	if l, _ := remaining(t, ca, "10.0.0.3"); l != 5 {
		t.Fatalf("after the reload the API rule is gone: limit %d", l)
	}
	_, _, list = do(t, "GET", "http://"+a.httpAddr+"/v1/rules", "", "")
	if u := findRule(t, list, "edge", "user"); u["limits"].([]any)[0].(map[string]any)["rate"] != 50.0 {
		t.Fatalf("the file's change: %v", u)
	}

	// Removing it on A brings the file's rule back on B.
	code, _, out = do(t, "DELETE", "http://"+a.httpAddr+"/v1/rules/edge/remote_address", aliceToken, "")
	if code != http.StatusOK || out["rule"].(map[string]any)["source"] != "file" || out["removed"].(map[string]any)["by"] != "alice" {
		t.Fatalf("DELETE: %d %v", code, out)
	}
	waitVersion(t, b.srv, a.srv.RulesVersion())
	if l, _ := remaining(t, cb, "10.0.0.4"); l != 3 {
		t.Fatalf("after DELETE, B's limit %d", l)
	}
	if code, _, out := do(t, "DELETE", "http://"+a.httpAddr+"/v1/rules/edge/remote_address", aliceToken, ""); code != http.StatusNotFound {
		t.Fatalf("DELETE again: %d %v", code, out)
	}

	// The audit, newest first, read on either instance.
	_, _, audit := do(t, "GET", "http://"+b.httpAddr+"/v1/audit?limit=10", "", "")
	recs := audit["records"].([]any)
	if len(recs) != 3 {
		t.Fatalf("audit: %v", audit)
	}
	del, put1 := recs[0].(map[string]any), recs[2].(map[string]any)
	if del["action"] != "delete" || del["token"] != "alice" || del["domain"] != "edge" || del["path"] != "remote_address" || del["new"] != nil {
		t.Fatalf("audit of the delete: %v", del)
	}
	if old := del["old"].(map[string]any); old["by"] != "alice" || old["rule"].(map[string]any)["limits"].([]any)[0].(map[string]any)["rate"] != 5.0 {
		t.Fatalf("audit of the delete, old rule: %v", old)
	}
	if put1["action"] != "put" || put1["old"] != nil || put1["new"].(map[string]any)["rule"] == nil || recs[1].(map[string]any)["token"] != "bob" {
		t.Fatalf("audit of the puts: %v", recs)
	}
	if _, err := time.Parse(time.RFC3339Nano, del["at"].(string)); err != nil {
		t.Fatalf("audit time: %v", del["at"])
	}
	if _, _, one := do(t, "GET", "http://"+b.httpAddr+"/v1/audit?limit=1", "", ""); len(one["records"].([]any)) != 1 {
		t.Fatalf("audit limit=1: %v", one)
	}

	// The log names the tokens, never shows them.
	if l := logs.String(); !strings.Contains(l, "token=alice") || !strings.Contains(l, "token=bob") || strings.Contains(l, aliceToken) || strings.Contains(l, bobToken) {
		t.Fatalf("log:\n%s", l)
	}
}

// redisInstance starts an instance on the Redis rs, as Run does.
func redisInstance(t *testing.T, rs *redistest.Server, cfg serve.Config) *testServer {
	t.Helper()
	rdb := rs.Client(t)
	store, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg.Store, cfg.RedisClient = store, rdb
	return start(t, cfg)
}

// waitSubscribers waits until n instances listen for the announcements
// of changes.
func waitSubscribers(t testing.TB, rs *redistest.Server, n int64) {
	t.Helper()
	rdb := rs.Client(t)
	deadline := time.Now().Add(30 * time.Second) // a failure bound, not a wait
	for {
		got, err := rdb.PubSubNumSub(t.Context(), "{redlimit:serve}:rules:changed").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got["{redlimit:serve}:rules:changed"] == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v subscribers, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAPIRulesMissedAnnouncement: a change whose announcement an
// instance missed is in force there after its next periodic check; a
// rule in the store that does not check out is skipped and logged, the
// others apply.
func TestAPIRulesMissedAnnouncement(t *testing.T) {
	rs := redistest.Start(t)
	logs := &syncbuf.Buffer{}
	ts := redisInstance(t, rs, serve.Config{Rules: "testdata/edge.yaml", RulesPoll: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	before := ts.srv.RulesVersion()
	rdb := rs.Client(t)
	// Written as another instance would, but never announced.
	good := `{"domain":"edge","path":"remote_address","rule":{"limits":[{"rate":9,"interval":"1m"}]},"by":"ops","at":"2026-11-23T10:00:00Z"}`
	bad := `{"domain":"edge","path":"user","rule":{"limits":[{"rate":-9,"interval":"1m"}]},"by":"ops","at":"2026-11-23T10:00:00Z"}`
	if err := rdb.HSet(t.Context(), "{redlimit:serve}:rules", "edge\x00remote_address", good, "edge\x00user", bad).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Incr(t.Context(), "{redlimit:serve}:rules:version").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a failure bound, not a wait
	for ts.srv.RulesVersion() == before {
		if time.Now().After(deadline) {
			t.Fatal("the change never came into force")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if l, _ := remaining(t, rlsClient(t, ts.grpcAddr), "10.0.0.1"); l != 9 {
		t.Fatalf("limit %d", l)
	}
	if l := logs.String(); !strings.Contains(l, "skipping a rule") || !strings.Contains(l, "limits[0].rate") {
		t.Fatalf("log:\n%s", l)
	}
	// /readyz names the skipped record; the instance stays ready.
	if code, body := get(t, "http://"+ts.httpAddr+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"api_rules_skipped":["\"edge/user\": `) {
		t.Fatalf("readyz %d %s", code, body)
	}

	// The API's rules cannot be read (the version key holds a hash):
	// /readyz says so, and the instance stays ready with the rules in
	// force; once readable again the error is gone.
	readyz := func(want func(body string) bool) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // a failure bound, not a wait
		for {
			code, body := get(t, "http://"+ts.httpAddr+"/readyz")
			if code != http.StatusOK {
				t.Fatalf("readyz %d %s", code, body)
			}
			if want(body) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("readyz %s", body)
			}
			time.Sleep(5 * time.Millisecond) // polled: the next periodic check
		}
	}
	if err := rdb.Del(t.Context(), "{redlimit:serve}:rules:version").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(t.Context(), "{redlimit:serve}:rules:version", "x", "1").Err(); err != nil {
		t.Fatal(err)
	}
	readyz(func(body string) bool { return strings.Contains(body, `"api_rules_error":"WRONGTYPE`) })
	if l, _ := remaining(t, rlsClient(t, ts.grpcAddr), "10.0.0.2"); l != 9 {
		t.Fatalf("limit %d while the API's rules cannot be read", l)
	}
	if err := rdb.Del(t.Context(), "{redlimit:serve}:rules:version").Err(); err != nil {
		t.Fatal(err)
	}
	readyz(func(body string) bool { return !strings.Contains(body, "api_rules_error") })
}

// TestAPIRulesMemory: without a shared Redis one instance keeps the API's
// rules in its memory.
func TestAPIRulesMemory(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", Tokens: testTokens})
	c := rlsClient(t, ts.grpcAddr)
	before := ts.srv.RulesVersion()
	code, _, out := do(t, "PUT", "http://"+ts.httpAddr+"/v1/rules/edge/remote_address", aliceToken, `{"limits":[{"rate":10,"interval":"1m"}],"shadow_mode":true}`)
	if code != http.StatusOK || out["version"] == before || out["version"] != ts.srv.RulesVersion() {
		t.Fatalf("PUT: %d %v", code, out)
	}
	if l, r := remaining(t, c, "10.0.0.1"); l != 10 || r != 9 {
		t.Fatalf("API rule: limit %d remaining %d", l, r)
	}
	code, _, out = do(t, "PUT", "http://"+ts.httpAddr+"/v1/rules/edge/remote_address", bobToken, `{"limits":[{"rate":20,"interval":"1m"}]}`)
	if prev := out["previous"].(map[string]any); code != http.StatusOK || prev["by"] != "alice" || out["set_by"] != "bob" {
		t.Fatalf("second PUT: %d %v", code, out)
	}
	code, _, out = do(t, "DELETE", "http://"+ts.httpAddr+"/v1/rules/edge/remote_address", aliceToken, "")
	if code != http.StatusOK || ts.srv.RulesVersion() != before {
		t.Fatalf("DELETE: %d %v; version %s, want %s", code, out, ts.srv.RulesVersion(), before)
	}
	if l, _ := remaining(t, c, "10.0.0.1"); l != 3 {
		t.Fatalf("file rule back: limit %d", l)
	}
	_, _, audit := do(t, "GET", "http://"+ts.httpAddr+"/v1/audit", "", "")
	if recs := audit["records"].([]any); len(recs) != 3 || recs[0].(map[string]any)["action"] != "delete" || recs[1].(map[string]any)["old"].(map[string]any)["by"] != "alice" {
		t.Fatalf("audit: %v", audit)
	}
}

// TestAPIWritesNeedToken: no token configured turns writes off; a
// missing or unknown token is refused; reads stay open.
func TestAPIWritesNeedToken(t *testing.T) {
	off := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	for _, m := range []string{"PUT", "DELETE"} {
		code, _, out := do(t, m, "http://"+off.httpAddr+"/v1/rules/edge/remote_address", aliceToken, `{"limits":[{"rate":1,"interval":"1s"}]}`)
		if code != http.StatusForbidden || !strings.Contains(out["detail"].(string), "writes are off") {
			t.Fatalf("%s without tokens: %d %v", m, code, out)
		}
	}
	logs := &syncbuf.Buffer{}
	on := start(t, serve.Config{Rules: "testdata/edge.yaml", Tokens: testTokens, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	url := "http://" + on.httpAddr + "/v1/rules/edge/remote_address"
	for _, tok := range []string{"", "not-a-token-at-all-xx", aliceToken + "x", aliceToken[:len(aliceToken)-1]} {
		code, h, out := do(t, "PUT", url, tok, `{"limits":[{"rate":1,"interval":"1s"}]}`)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || h.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("token %q: %d %v %v", tok, code, h, out)
		}
	}
	req, _ := http.NewRequest("PUT", url, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Basic "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Basic: %d", resp.StatusCode)
	}
	if code, _, _ := do(t, "GET", "http://"+on.httpAddr+"/v1/rules", "", ""); code != http.StatusOK {
		t.Fatalf("a read without a token: %d", code)
	}
	if code, _, out := do(t, "PUT", url, bobToken, `{"limits":[{"rate":1,"interval":"1s"}]}`); code != http.StatusOK {
		t.Fatalf("bob: %d %v", code, out)
	}
	if l := logs.String(); !strings.Contains(l, `"token":"bob"`) || strings.Contains(l, bobToken) || strings.Contains(l, aliceToken) {
		t.Fatalf("log:\n%s", l)
	}
}

// TestAPIRulesBadInput: each mistake is a 400 naming the field, and
// nothing changes.
func TestAPIRulesBadInput(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", Tokens: testTokens, MaxRequestBytes: 1024})
	before := ts.srv.RulesVersion()
	base := "http://" + ts.httpAddr + "/v1/rules/edge/"
	for _, tc := range []struct {
		path, body, field, detail string
	}{
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s"}`, "", "not a rule as JSON"},
		{"remote_address", `{"limits":[{"rate":"ten","interval":"1s"}]}`, "limits.rate", "not a rule as JSON"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s","unit":"second"}]}`, "", "unknown field"},
		{"remote_address", `{} {}`, "", "more than one"},
		{"remote_address", `{}`, "limits", "at least one limit"},
		{"remote_address", `{"limits":[{"rate":-1,"interval":"1s"}]}`, "limits[0].rate", "negative"},
		{"remote_address", `{"limits":[{"interval":"1s"}]}`, "limits[0].rate", "missing"},
		{"remote_address", `{"limits":[{"rate":1}]}`, "limits[0].interval", "missing"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"soon"}]}`, "limits[0].interval", "Go duration"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s","algorithm":"magic"}]}`, "limits[0].algorithm", "magic"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s"},{"rate":0,"interval":"1h"}]}`, "limits[1].rate", "0"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s"}],"unlimited":true}`, "limits", "unlimited"},
		{"remote_address", `{"limits":[{"rate":1,"interval":"1s","algorithm":"token-bucket","burst":-4}]}`, "limits[0].burst", ""},
		{"=x", `{"limits":[{"rate":1,"interval":"1s"}]}`, "path", "empty key"},
		{"k=", `{"limits":[{"rate":1,"interval":"1s"}]}`, "path", "empty value"},
		{"k=%41", `{"limits":[{"rate":1,"interval":"1s"}]}`, "path", "canonical"},
	} {
		code, _, out := do(t, "PUT", base+strings.ReplaceAll(tc.path, "%", "%25"), aliceToken, tc.body)
		detail, _ := out["detail"].(string)
		if code != http.StatusBadRequest || (tc.field != "" && out["field"] != tc.field) || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s %s: %d %v", tc.path, tc.body, code, out)
		}
	}
	code, _, out := do(t, "PUT", base+"remote_address", aliceToken, `{"limits":[{"rate":1,"interval":"1s","name":"`+strings.Repeat("x", 2000)+`"}]}`)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize body: %d %v", code, out)
	}
	code, _, out = do(t, "PUT", "http://"+ts.httpAddr+"/v1/rules/"+strings.Repeat("d", 101)+"/k", aliceToken, `{"unlimited":true}`)
	if detail, _ := out["detail"].(string); code != http.StatusBadRequest || out["field"] != "domain" || !strings.Contains(detail, "at most 100") {
		t.Errorf("long domain: %d %v", code, out)
	}
	if code, _, out := do(t, "GET", "http://"+ts.httpAddr+"/v1/audit?limit=0", "", ""); code != http.StatusBadRequest || out["field"] != "limit" {
		t.Errorf("audit limit=0: %d %v", code, out)
	}
	if ts.srv.RulesVersion() != before {
		t.Errorf("bad input changed the rules")
	}
}

// TestAPIKeys inspects a key without charging it.
func TestAPIKeys(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	c := rlsClient(t, ts.grpcAddr)
	remaining(t, c, "10.0.0.9")
	remaining(t, c, "10.0.0.9")
	url := "http://" + ts.httpAddr + "/v1/keys/edge?descriptor=remote_address=10.0.0.9"
	for range 2 { // looking charges nothing
		code, _, out := do(t, "GET", url, "", "")
		lim := out["limits"].([]any)
		if code != http.StatusOK || out["remaining"] != 1.0 || out["allowed"] != true || len(lim) != 1 || lim[0].(map[string]any)["limit"] != 3.0 || out["reset_ms"].(float64) <= 0 {
			t.Fatalf("%d %v", code, out)
		}
		if s := out["summary"].(string); !strings.Contains(s, "1 of 3 left") || !strings.Contains(s, "would be granted") {
			t.Fatalf("summary: %s", s)
		}
		if out["rule"].(map[string]any)["path"] != "remote_address" {
			t.Fatalf("rule: %v", out["rule"])
		}
	}
	remaining(t, c, "10.0.0.9")
	if _, _, out := do(t, "GET", url, "", ""); out["allowed"] != false || !strings.Contains(out["summary"].(string), "would be refused") {
		t.Fatalf("used up: %v", out)
	}
	if code, _, out := do(t, "GET", "http://"+ts.httpAddr+"/v1/keys/edge?descriptor=nothing=here", "", ""); code != http.StatusOK || out["rule"] != nil || !strings.Contains(out["summary"].(string), "No rule") {
		t.Fatalf("no rule: %d %v", code, out)
	}
	// Named limits are shown by their names.
	if _, _, out := do(t, "GET", "http://"+ts.httpAddr+"/v1/keys/edge?descriptor=tenant=acme", "", ""); out["limits"].([]any)[0].(map[string]any)["name"] != "per-second" || !strings.Contains(out["summary"].(string), "2 of 2 left under per-second (2/1s") {
		t.Fatalf("named limits: %v", out)
	}
	// Escaped: a ',' and '=' in a value.
	if _, _, out := do(t, "GET", "http://"+ts.httpAddr+"/v1/keys/edge?descriptor=remote_address=a%2Cb%3Dc", "", ""); out["descriptor"].([]any)[0].(map[string]any)["value"] != "a,b=c" {
		t.Fatalf("escaped: %v", out)
	}
	for _, q := range []string{"", "=v", "a=1,,b=2", "a=%zz"} {
		if code, _, out := do(t, "GET", "http://"+ts.httpAddr+"/v1/keys/edge?descriptor="+q, "", ""); code != http.StatusBadRequest || out["field"] != "descriptor" {
			t.Fatalf("descriptor %q: %d %v", q, code, out)
		}
	}
}

// TestTokenFile reads tokens from a file given by flag; a bad file is an
// error naming its line, never the token.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte("# who may write\n\ncarol: carol-secret-0123456789\n  dave:dave-secret-0123456789  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg serve.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--rules", "testdata/edge.yaml", "--token-file", good}); err != nil {
		t.Fatal(err)
	}
	ts := start(t, cfg)
	for _, tok := range []string{"carol-secret-0123456789", "dave-secret-0123456789"} {
		if code, _, out := do(t, "PUT", "http://"+ts.httpAddr+"/v1/rules/edge/k", tok, `{"unlimited":true}`); code != http.StatusOK {
			t.Fatalf("%d %v", code, out)
		}
	}
	for _, tc := range []struct{ content, want string }{
		{"carol carol-secret-0123456789\n", ":1: want name:token"},
		{"# ok\ncarol:short\n", `"carol" is 5 bytes`},
		{"carol:carol-secret-0123456789\ncarol:carol-secret-9876543210\n", `:2: the name "carol" is also given`},
		{"carol:carol-secret-0123456789\ndave:carol-secret-0123456789\n", "the same token"},
	} {
		bad := filepath.Join(dir, "bad")
		if err := os.WriteFile(bad, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := serve.New(t.Context(), serve.Config{Rules: "testdata/edge.yaml", TokenFile: bad})
		if !errors.Is(err, redlimit.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: %v", tc.content, err)
		}
	}
	shared := filepath.Join(dir, "shared")
	if err := os.WriteFile(shared, []byte("carol:carol-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	if _, err := serve.New(t.Context(), serve.Config{Rules: "testdata/edge.yaml", TokenFile: shared, Logger: slog.New(slog.NewTextHandler(logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "readable by others") || strings.Contains(l, "secret") {
		t.Errorf("log of a token file others can read:\n%s", l)
	}
	if _, err := serve.New(t.Context(), serve.Config{Rules: "testdata/edge.yaml", TokenFile: filepath.Join(dir, "missing")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestAPIRulesOnCluster: the API's keys share one slot, so the write
// script runs on a Redis Cluster, and its announcement reaches an
// instance subscribed through another node.
func TestAPIRulesOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, file, apiRulesFile)
	instance := func() *testServer {
		rdb := cl.Client(t)
		store, err := redisstore.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return start(t, serve.Config{Rules: file, Store: store, RedisClient: rdb, Tokens: testTokens})
	}
	a, b := instance(), instance()
	code, _, out := do(t, "PUT", "http://"+a.httpAddr+"/v1/rules/edge/remote_address", aliceToken, `{"limits":[{"algorithm":"token-bucket","rate":6,"interval":"1h"}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %v", code, out)
	}
	waitVersion(t, b.srv, a.srv.RulesVersion())
	if l, r := remaining(t, rlsClient(t, b.grpcAddr), "10.0.0.1"); l != 6 || r != 5 {
		t.Fatalf("on B: limit %d remaining %d", l, r)
	}
	if _, _, audit := do(t, "GET", "http://"+b.httpAddr+"/v1/audit", "", ""); len(audit["records"].([]any)) != 1 {
		t.Fatalf("audit: %v", audit)
	}
}
