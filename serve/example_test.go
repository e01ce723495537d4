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
