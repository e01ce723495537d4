package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
)

// outage is the memory store with an outage switch: no PolicyStore that
// can really fail (redisstore's) is in this tree yet, so a store failure
// is the one answer the failure policies react to, ErrUnavailable.
type outage struct {
	*memstore.Store
	down atomic.Bool
}

func (o *outage) AcquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	if o.down.Load() {
		return redlimit.PolicyDecision{}, fmt.Errorf("%w: connection refused", redlimit.ErrUnavailable)
	}
	return o.Store.AcquireKey(ctx, k, known, n, maxWait)
}

func TestStoreFailure(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy redlimit.FailurePolicy
		status int
	}{{"FailOpen", redlimit.FailOpen, 200}, {"FailClosed", redlimit.FailClosed, http.StatusServiceUnavailable}} {
		t.Run(c.name, func(t *testing.T) {
			store := &outage{Store: memstore.New()}
			p, err := redlimit.NewPolicy(store, "api", []redlimit.Config{redlimit.PerMinute(10)}, redlimit.WithFailurePolicy(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}},
				httplimit.WithDegradedHeader("RateLimit-Degraded"))
			srv := serve(t, mw)
			if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit-Degraded") != "" || r.header.Get("RateLimit") == "" {
				t.Fatalf("store up: %d %v", r.status, r.header)
			}
			store.down.Store(true)
			r := get(t, srv)
			if r.status != c.status {
				t.Fatalf("store down: %d %q", r.status, r.body)
			}
			s := mw.Stats()
			if c.policy == redlimit.FailOpen {
				if r.header.Get("RateLimit-Degraded") != "?1" || r.header.Get("RateLimit") != "" || s.Degraded != 1 || s.Allowed != 2 {
					t.Errorf("fail open: %v, stats %+v", r.header, s)
				}
			} else {
				if pb := readProblem(t, r); pb.Detail != "the rate limiter is unavailable" || r.header.Get("Retry-After") != "1" || s.StoreErrors != 1 {
					t.Errorf("fail closed: %+v %v, stats %+v", pb, r.header, s)
				}
			}
		})
	}
}
