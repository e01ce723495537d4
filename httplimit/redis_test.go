package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestRedisOutage kills a real redis-server under the middleware: the
// policy's failure policy answers, visibly. FailOpen lets the request
// through with the degraded header and no RateLimit header (there is no
// count to show), counted as allowed and degraded; FailClosed answers 503
// with a Retry-After.
func TestRedisOutage(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy redlimit.FailurePolicy
		status int
	}{{"FailOpen", redlimit.FailOpen, 200}, {"FailClosed", redlimit.FailClosed, http.StatusServiceUnavailable}} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			// No refusal cache: it would answer the key's repeated
			// refusal locally, for up to its MaxStale, not seeing the outage.
			rs, err := redisstore.New(rdb, redisstore.WithRefusalCache(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() }) // its policy subscription, before the client
			p, err := redlimit.NewPolicy(rs, "api", []redlimit.Config{redlimit.PerMinute(1)}, redlimit.WithFailurePolicy(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}},
				httplimit.WithDegradedHeader("RateLimit-Degraded"))
			web := serve(t, mw)
			if r := get(t, web); r.status != 200 || r.header.Get("RateLimit") != `"api";r=0;t=60` || r.header.Get("RateLimit-Degraded") != "" {
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
				if r.header.Get("RateLimit-Degraded") != "?1" || r.header.Get("RateLimit") != "" || s.Degraded != 1 || s.Allowed != 2 || s.Refused != 1 {
					t.Errorf("fail open: %v, stats %+v", r.header, s)
				}
			} else if pb := readProblem(t, r); pb.Detail != "the rate limiter is unavailable" || r.header.Get("Retry-After") != "1" || s.StoreErrors != 1 {
				t.Errorf("fail closed: %+v %v, stats %+v", pb, r.header, s)
			}
		})
	}
}
