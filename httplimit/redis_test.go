package httplimit_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestRedisOutage kills a real redis-server under the middleware: the
// policy's failure policy answers, visibly. It needs redisstore's keyed
// policies (redlimit.PolicyStore); until they are in the tree,
// TestStoreFailure covers the same paths with an outage switch.
func TestRedisOutage(t *testing.T) {
	var probe any = (*redisstore.Store)(nil)
	if _, ok := probe.(redlimit.PolicyStore); !ok {
		t.Skip("redisstore does not implement redlimit.PolicyStore in this tree")
	}
	for _, c := range []struct {
		name   string
		policy redlimit.FailurePolicy
		status int
	}{{"FailOpen", redlimit.FailOpen, 200}, {"FailClosed", redlimit.FailClosed, http.StatusServiceUnavailable}} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			rs, err := redisstore.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			var store any = rs
			if c, ok := store.(io.Closer); ok { // its policy subscription
				t.Cleanup(func() { c.Close() })
			}
			p, err := redlimit.NewPolicy(store.(redlimit.PolicyStore), "api", []redlimit.Config{redlimit.PerMinute(1)}, redlimit.WithFailurePolicy(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}},
				httplimit.WithDegradedHeader("RateLimit-Degraded"))
			web := serve(t, mw)
			if r := get(t, web); r.status != 200 || r.header.Get("RateLimit") != `"api";r=0;t=60` {
				t.Fatalf("first: %d %v", r.status, r.header)
			}
			if r := get(t, web); r.status != http.StatusTooManyRequests {
				t.Fatalf("second, Redis up: %d", r.status)
			}
			srv.Kill()
			r := get(t, web)
			if r.status != c.status {
				t.Fatalf("Redis down: %d %q", r.status, r.body)
			}
			s := mw.Stats()
			if c.policy == redlimit.FailOpen {
				if r.header.Get("RateLimit-Degraded") != "?1" || s.Degraded != 1 {
					t.Errorf("fail open: %v, stats %+v", r.header, s)
				}
			} else if s.StoreErrors != 1 || readProblem(t, r).Detail != "the rate limiter is unavailable" {
				t.Errorf("fail closed: stats %+v", s)
			}
		})
	}
}
