package serve_test

import (
	"net/http"
	"testing"

	"github.com/redlimit/redlimit/serve"
)

// TestRESTAcquire charges one descriptor through POST /v1/acquire: granted
// while the rule's 3 a minute last, then 429 with Retry-After and the
// RateLimit fields; hits=0 looks without charging; several limits each
// report; bad input is a 400 naming the field.
func TestRESTAcquire(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml"})
	base := "http://" + ts.httpAddr + "/v1/acquire/edge?descriptor="
	for want := 2.0; want >= 0; want-- {
		code, h, out := do(t, "POST", base+"remote_address=10.1.1.1", "", "")
		if code != http.StatusOK || out["allowed"] != true || out["code"] != "OK" || out["remaining"] != want || out["rule"] != "remote_address" {
			t.Fatalf("grant leaving %v: %d %v", want, code, out)
		}
		if h.Get("RateLimit-Policy") == "" || h.Get("RateLimit") == "" {
			t.Fatalf("no RateLimit fields: %v", h)
		}
	}
	code, h, out := do(t, "POST", base+"remote_address=10.1.1.1", "", "")
	if code != http.StatusTooManyRequests || out["allowed"] != false || out["code"] != "OVER_LIMIT" || out["retry_after_ms"].(float64) <= 0 || h.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %v %v", code, out, h)
	}
	// hits=0 checks: another address keeps its 3.
	for range 2 {
		if code, _, out := do(t, "POST", base+"remote_address=10.1.1.2&hits=0", "", ""); code != http.StatusOK || out["remaining"] != 3.0 {
			t.Fatalf("hits=0: %d %v", code, out)
		}
	}
	if code, _, out := do(t, "POST", base+"remote_address=10.1.1.2&hits=3", "", ""); code != http.StatusOK || out["remaining"] != 0.0 {
		t.Fatalf("hits=3: %d %v", code, out)
	}
	// Two limits: both reported, by name.
	_, _, out = do(t, "POST", base+"tenant=acme", "", "")
	if lim := out["limits"].([]any); len(lim) != 2 || lim[0].(map[string]any)["name"] != "per-second" || lim[1].(map[string]any)["name"] != "per-10-minutes" {
		t.Fatalf("limits: %v", out)
	}
	// No rule: granted, unlimited by nothing.
	if code, _, out := do(t, "POST", base+"nothing=here", "", ""); code != http.StatusOK || out["allowed"] != true || out["rule"] != nil {
		t.Fatalf("no rule: %d %v", code, out)
	}
	for q, field := range map[string]string{"": "descriptor", "a=%zz": "descriptor", "a=1&hits=-1": "hits", "a=1&hits=x": "hits", "a=1&hits=4294967296": "hits"} {
		if code, _, out := do(t, "POST", base+q, "", ""); code != http.StatusBadRequest || out["field"] != field {
			t.Fatalf("%q: %d %v", q, code, out)
		}
	}
	if code, _, _ := do(t, "POST", "http://"+ts.httpAddr+"/v1/acquire/nodomain?descriptor=a=1", "", ""); code != http.StatusOK {
		t.Fatalf("unknown domain: %d", code)
	}
}
