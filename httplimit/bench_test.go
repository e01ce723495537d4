package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
)

// BenchmarkMiddleware measures the middleware in process (no network): a
// granted request per client IP on the memory store, headers included.
func BenchmarkMiddleware(b *testing.B) {
	p, err := redlimit.NewPolicy(memstore.New(), "api", []redlimit.Config{redlimit.PerSecond(1 << 30)})
	if err != nil {
		b.Fatal(err)
	}
	key, err := httplimit.ClientIP(httplimit.ClientIPConfig{})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Policy: p, Key: key}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reqs := make([]*http.Request, 256)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = "192.0.2." + strconv.Itoa(i) + ":1234"
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
