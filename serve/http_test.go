package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redlimit/redlimit/serve"
)

func post(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
	}
	return resp.StatusCode, resp.Header, out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestHTTPJSON(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", ResponseHeaders: true})
	url := "http://" + ts.httpAddr + "/json"
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for _, remaining := range []float64{2, 1, 0} {
		code, h, out := post(t, url, body)
		st := out["statuses"].([]any)[0].(map[string]any)
		left, _ := st["limitRemaining"].(float64) // protojson leaves out zeros
		if code != http.StatusOK || out["overallCode"] != "OK" || left != remaining || st["durationUntilReset"] != "40s" {
			t.Fatalf("%d %v", code, out)
		}
		if cl := st["currentLimit"].(map[string]any); cl["requestsPerUnit"] != 3.0 || cl["unit"] != "MINUTE" {
			t.Fatalf("current limit %v", cl)
		}
		if h.Get("RateLimit-Policy") != `"default";q=3;w=60` {
			t.Fatalf("headers %v", h)
		}
	}
	code, h, out := post(t, url, body)
	if code != http.StatusTooManyRequests || out["overallCode"] != "OVER_LIMIT" || h.Get("Retry-After") != "40" {
		t.Fatalf("over: %d %v %v", code, out, h)
	}
	// The JSON field names of the proto file are taken too.
	code, _, out = post(t, url, `{"domain": "edge", "hits_addend": 2, "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.9"}]}]}`)
	if st := out["statuses"].([]any)[0].(map[string]any); code != http.StatusOK || st["limitRemaining"] != 1.0 {
		t.Fatalf("hits_addend: %d %v", code, out)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", MaxRequestBytes: 1024})
	url := "http://" + ts.httpAddr + "/json"
	for name, c := range map[string]struct {
		body string
		code int
	}{
		"not JSON":       {`{"domain": `, http.StatusBadRequest},
		"unknown field":  {`{"domain": "edge", "colour": 1}`, http.StatusBadRequest},
		"no descriptors": {`{"domain": "edge"}`, http.StatusBadRequest},
		"no domain":      {`{"descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`, http.StatusBadRequest},
		"too large":      {`{"domain": "` + strings.Repeat("d", 2000) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		code, h, out := post(t, url, c.body)
		if code != c.code || h.Get("Content-Type") != "application/problem+json" || out["status"] != float64(c.code) || out["detail"] == "" {
			t.Errorf("%s: %d %v %v", name, code, h.Get("Content-Type"), out)
		}
	}
	if code, _ := get(t, url); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d", code)
	}
}

func TestHTTPHealthReadyRules(t *testing.T) {
	var pingErr atomic.Pointer[error]
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", Ping: func(context.Context) error {
		if p := pingErr.Load(); p != nil {
			return *p
		}
		return nil
	}})
	base := "http://" + ts.httpAddr
	for _, path := range []string{"/healthz", "/healthcheck"} {
		if code, body := get(t, base+path); code != http.StatusOK || body != "OK\n" {
			t.Errorf("%s %d %q", path, code, body)
		}
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"domains":["edge"]`) {
		t.Errorf("readyz %d %s", code, body)
	}
	storeDown := errors.New("store down")
	pingErr.Store(&storeDown)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "store down") {
		t.Errorf("readyz with the store down %d %s", code, body)
	}
	code, body := get(t, base+"/rules")
	if code != http.StatusOK || !strings.Contains(body, `"path":"tenant"`) || !strings.Contains(body, `"limit":"2/1s,fixed-window"`) || !strings.Contains(body, `"source":"file testdata/edge.yaml:15"`) {
		t.Errorf("rules %d %s", code, body)
	}
}
