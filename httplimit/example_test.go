package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
)

// policy makes a policy on a fresh memory store (redisstore.New(client)
// shares it between instances).
func policy(name string, limits ...redlimit.Config) *redlimit.Policy {
	p, err := redlimit.NewPolicy(memstore.New(), name, limits)
	if err != nil {
		log.Fatal(err)
	}
	return p
}

func perIP() httplimit.KeyFunc {
	k, err := httplimit.ClientIP(httplimit.ClientIPConfig{})
	if err != nil {
		log.Fatal(err)
	}
	return k
}

// show serves h on loopback, sends a GET per header list (name, value,
// ...) and prints each response's status and the named fields.
func show(h http.Handler, fields []string, requests ...[]string) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, hdr := range requests {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode)
		for _, f := range fields {
			if v := resp.Header.Get(f); v != "" {
				fmt.Printf(" %s: %s", f, v)
			}
		}
		fmt.Println()
	}
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })

func Example() {
	// 2 requests a minute per client IP.
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(2)), Key: perIP()}})
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"RateLimit-Policy", "RateLimit", "Retry-After"}, nil, nil, nil)
	// Output:
	// 200 RateLimit-Policy: "api";q=2;w=60 RateLimit: "api";r=1;t=60
	// 200 RateLimit-Policy: "api";q=2;w=60 RateLimit: "api";r=0;t=60
	// 429 RateLimit-Policy: "api";q=2;w=60 RateLimit: "api";r=0;t=60 Retry-After: 60
}

// Two rules: per client IP and per API key; requests without a key are
// counted per IP on the second rule too.
func ExampleNew() {
	mw, err := httplimit.New([]httplimit.Rule{
		{Policy: policy("ip", redlimit.PerMinute(100)), Key: perIP()},
		{Policy: policy("key", redlimit.PerMinute(1)), Key: httplimit.Header("X-Api-Key"), OnKeyError: perIP()},
	})
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"RateLimit"}, []string{"X-Api-Key", "k1"}, []string{"X-Api-Key", "k1"}, nil)
	// Output:
	// 200 RateLimit: "ip";r=99;t=60, "key";r=0;t=60
	// 429 RateLimit: "ip";r=98;t=60, "key";r=0;t=60
	// 200 RateLimit: "ip";r=98;t=60, "key";r=0;t=60
}

func ExampleClientIP() {
	// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
	key, err := httplimit.ClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:41000"
	r.Header.Set("X-Forwarded-For", "203.0.113.1, 2001:db8:1:2::77") // the left entry is the client's claim
	fmt.Println(key(r))
	// Output: 2001:db8:1:2::/64 <nil>
}

func ExampleJoin() {
	// Each client IP has a limit per route: 1 a minute on /items/{id},
	// whatever the id. The middleware wraps each route's handler, so that
	// Route sees the ServeMux pattern (around the whole mux it would see
	// the path).
	mw, err := httplimit.New([]httplimit.Rule{{
		Policy: policy("route", redlimit.PerMinute(1)),
		Key:    httplimit.Join(perIP(), httplimit.Route()),
	}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw.Handler(hello))
	mux.Handle("GET /users/{id}", mw.Handler(hello))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{"/items/1", "/items/2", "/users/1"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode)
	}
	// Output:
	// /items/1 200
	// /items/2 429
	// /users/1 200
}

func ExampleWithCost() {
	// An export costs 5 of the 10 permits a minute.
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(10)), Key: perIP()}}, httplimit.WithCost(5))
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"RateLimit"}, nil, nil, nil)
	// Output:
	// 200 RateLimit: "api";r=5;t=60
	// 200 RateLimit: "api";r=0;t=60
	// 429 RateLimit: "api";r=0;t=60
}

func ExampleWithCostFunc() {
	// A batch costs one permit per item it holds.
	cost := httplimit.WithCostFunc(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("items"), 10, 64)
	})
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(10)), Key: perIP()}}, cost)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(hello))
	defer srv.Close()
	for _, items := range []string{"8", "3", "2", "none"} {
		resp, err := srv.Client().Get(srv.URL + "/batch?items=" + items)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(items, resp.StatusCode)
	}
	// Output:
	// 8 200
	// 3 429
	// 2 200
	// none 400
}

func ExampleWithAllowList() {
	// Health checks from the load balancer are never limited.
	allow := httplimit.WithAllowList(func(r *http.Request) bool { return r.Header.Get("User-Agent") == "lb-health" })
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(1)), Key: perIP()}}, allow)
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), nil, []string{"User-Agent", "lb-health"}, []string{"User-Agent", "lb-health"}, nil, nil)
	fmt.Printf("%+v\n", mw.Stats())
	// Output:
	// 200
	// 200
	// 200
	// 429
	// {Allowed:1 Refused:1 ShadowRefused:0 AllowListed:2 Degraded:0 BadRequests:0 StoreErrors:0 HandBackErrors:0}
}

func ExampleWithShadow() {
	// Try a limit out: every request passes, the would-be refusals are logged.
	shadow := httplimit.WithShadow(func(r *http.Request, d *httplimit.Decision) {
		fmt.Printf("would refuse %s (%v), retry in %v\n", d.Rules[0].Key, d.Violated(), d.RetryAfter.Round(time.Minute))
	})
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(1)), Key: perIP()}}, shadow)
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"RateLimit"}, nil, nil)
	fmt.Println("shadow refusals:", mw.Stats().ShadowRefused)
	// Output:
	// 200
	// would refuse 127.0.0.1 ([api]), retry in 1m0s
	// 200
	// shadow refusals: 1
}

func ExampleWithWait() {
	// Shaping: a request over the rate waits for its turn, up to 1 s,
	// instead of being refused.
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerInterval(1, 50*time.Millisecond)), Key: perIP()}},
		httplimit.WithWait(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), nil, nil, nil, nil)
	// Output:
	// 200
	// 200
	// 200
}

func ExampleWithRefusalHandler() {
	// A plain-text refusal; the RateLimit and Retry-After fields are set.
	refuse := httplimit.WithRefusalHandler(func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "slow down: %v\n", d.Violated())
	})
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(1)), Key: perIP()}}, refuse)
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"Content-Type", "Retry-After"}, nil, nil)
	// Output:
	// 200 Content-Type: text/plain; charset=utf-8
	// 429 Content-Type: text/plain; charset=utf-8 Retry-After: 60
}

func ExampleWithErrorHandler() {
	// Requests without an API key are unauthorized, not bad.
	onError := httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		switch {
		case errors.Is(err, httplimit.ErrNoKey):
			http.Error(w, "an API key is needed", http.StatusUnauthorized)
		case errors.Is(err, httplimit.ErrBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default: // the store failed and the policy fails closed
			http.Error(w, "try again later", http.StatusServiceUnavailable)
		}
	})
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(1)), Key: httplimit.Header("X-Api-Key")}}, onError)
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), nil, nil, []string{"X-Api-Key", "k1"})
	// Output:
	// 401
	// 200
}

func ExampleWithLegacyHeaders() {
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(5)), Key: perIP()}}, httplimit.WithLegacyHeaders())
	if err != nil {
		log.Fatal(err)
	}
	show(mw.Handler(hello), []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}, nil)
	// Output:
	// 200 X-RateLimit-Limit: 5 X-RateLimit-Remaining: 4 X-RateLimit-Reset: 60
}

func ExampleWithPartitionKey() {
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy("api", redlimit.PerMinute(5)), Key: httplimit.Header("X-Api-Key")}}, httplimit.WithPartitionKey())
	if err != nil {
		log.Fatal(err)
	}
	// pk is a digest of the policy and key: the same for every request
	// of one key, and not the key.
	show(mw.Handler(hello), []string{"RateLimit"}, []string{"X-Api-Key", "k1"}, []string{"X-Api-Key", "k1"})
	// Output:
	// 200 RateLimit: "api";r=4;t=60;pk=:+ASA5w2P8Ug=:
	// 200 RateLimit: "api";r=3;t=60;pk=:+ASA5w2P8Ug=:
}

func ExampleWithDegradedHeader() {
	// A courtesy limit: when Redis cannot be reached, requests pass, marked
	// "RateLimit-Degraded: ?1", and Stats().Degraded counts them.
	p, err := redlimit.NewPolicy(memstore.New(), "api", []redlimit.Config{redlimit.PerMinute(100)}, redlimit.WithFailurePolicy(redlimit.FailOpen))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Policy: p, Key: perIP()}}, httplimit.WithDegradedHeader("RateLimit-Degraded"))
	if err != nil {
		log.Fatal(err)
	}
	_ = http.ListenAndServe // http.ListenAndServe("127.0.0.1:8080", mw.Handler(mux))
	_ = context.Background
	fmt.Println(mw.Stats().Degraded)
	// Output: 0
}
