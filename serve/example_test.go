package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"

	"github.com/redlimit/redlimit/serve"
)

// The HTTP API answers envoy's request as JSON; Run serves it (and the
// gRPC service) on real listeners.
func ExampleServer_Handler() {
	srv, err := serve.New(context.Background(), serve.Config{
		Rules:  "rules/testdata/envoy/edge_proxy_per_ip.yaml",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := srv.Handler()
	for _, ip := range []string{"10.0.0.1", "50.0.0.5"} {
		body := `{"domain": "edge_proxy_per_ip", "descriptors": [{"entries": [{"key": "remote_address", "value": "` + ip + `"}]}]}`
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/json", strings.NewReader(body)))
		fmt.Println(ip, w.Code, strings.Contains(w.Body.String(), `"overallCode":"OK"`))
	}
	// Output:
	// 10.0.0.1 200 true
	// 50.0.0.5 429 false
}

// A rule set through the API takes the place of the file's until it is
// removed; writes need a token of Config.Tokens (or Config.TokenFile).
func ExampleConfig_Tokens() {
	srv, err := serve.New(context.Background(), serve.Config{
		Rules:  "rules/testdata/envoy/edge_proxy_per_ip.yaml",
		Tokens: map[string]string{"ops": "ops-token-0123456789abcdef"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := srv.Handler()
	write := func(method, token, body string) {
		r := httptest.NewRequest(method, "/v1/rules/edge_proxy_per_ip/remote_address", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(method, w.Code, strings.Contains(w.Body.String(), `"source":"api"`))
	}
	write("PUT", "wrong-token-0123456789", `{"limits":[{"rate":100,"interval":"1s"}]}`)
	write("PUT", "ops-token-0123456789abcdef", `{"limits":[{"rate":100,"interval":"1s"}]}`)
	write("DELETE", "ops-token-0123456789abcdef", "")
	// Output:
	// PUT 401 false
	// PUT 200 true
	// DELETE 200 false
}
