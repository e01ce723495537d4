package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/serve/dashboard"
)

// TestServesEmbeddedPage: the page and its bundle come from the binary,
// with a policy that keeps the page to its own server.
func TestServesEmbeddedPage(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("/dashboard", dashboard.Handler()))
	defer srv.Close()
	for path, want := range map[string]string{"/dashboard/": "<title>redlimit dashboard</title>", "/dashboard/app.js": "EventSource", "/dashboard/app.css": ".u-legend"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		// Nothing fetched from another host at run time.
		if strings.Contains(string(body), "https://") && path == "/dashboard/" {
			t.Errorf("%s refers to another host", path)
		}
	}
}
