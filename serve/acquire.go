package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
)

// maxHits bounds the hits one REST acquire may ask for, as Envoy's
// uint32 hits_addend does.
const maxHits = 1<<32 - 1

// requestTimeout bounds the store's answer to one REST call.
const requestTimeout = 5 * time.Second

// acquireView is the answer of POST /v1/acquire/{domain}.
type acquireView struct {
	Domain     string      `json:"domain"`
	Descriptor []entryView `json:"descriptor"`
	// Code is "OK" or "OVER_LIMIT", as Envoy's answer names it.
	Code    string `json:"code"`
	Allowed bool   `json:"allowed"`
	// Rule is the path of the rule that applied; empty when none did.
	Rule string `json:"rule,omitempty"`
	// Shadowed: over a shadow-mode limit, answered OK all the same.
	Shadowed     bool           `json:"shadowed,omitempty"`
	Unlimited    bool           `json:"unlimited,omitempty"`
	Remaining    *int64         `json:"remaining,omitempty"`
	ResetMS      int64          `json:"reset_ms"`
	RetryAfterMS int64          `json:"retry_after_ms,omitempty"`
	Limits       []keyLimitView `json:"limits"`
}

// handleAcquire is POST /v1/acquire/{domain}?descriptor=k1=v1,k2=v2&hits=N:
// one descriptor charged N hits (default 1; 0 checks without charging),
// for clients that do not speak Envoy's request shape. 200 when granted,
// 429 with Retry-After when over the limit; the RateLimit-Policy and
// RateLimit headers as the gRPC answers carry them.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	domain := r.PathValue("domain")
	q := r.URL.Query()
	entries, err := parseDescriptor(rawQuery(r.URL.RawQuery, "descriptor"))
	if err != nil {
		problemField(w, http.StatusBadRequest, "descriptor", "descriptor: "+err.Error())
		return
	}
	hits := uint64(1)
	if v := q.Get("hits"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > maxHits {
			problemField(w, http.StatusBadRequest, "hits", fmt.Sprintf("hits: %q is not a whole number from 0 to %d", v, uint64(maxHits)))
			return
		}
		hits = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	resp, err := s.dec.Decide(ctx, decide.Request{Domain: domain, Hits: 1, Descriptors: []decide.Descriptor{{Entries: entries, Hits: &hits}}})
	s.countRequest(domain, resp.Overall, err)
	if err != nil {
		decisionProblem(w, err)
		return
	}
	st := &resp.Statuses[0]
	out := acquireView{Domain: domain, Descriptor: entriesView(entries), Code: "OK", Allowed: resp.Overall != decide.OverLimit,
		Shadowed: st.Shadowed, Unlimited: st.Unlimited, Limits: []keyLimitView{}}
	if !out.Allowed {
		out.Code = "OVER_LIMIT"
	}
	if st.Rule != nil {
		out.Rule = st.Rule.Path
	}
	if st.Limit != nil {
		rem := st.Remaining
		out.Remaining = &rem
		out.ResetMS, out.RetryAfterMS = st.ResetAfter.Milliseconds(), st.RetryAfter.Milliseconds()
		for i := range st.Result.Limits {
			out.Limits = append(out.Limits, limitViewOf(st.Rule, &st.Result.Limits[i]))
		}
	}
	for _, h := range headers(&resp) {
		w.Header().Set(h.Key, h.Value)
	}
	code := http.StatusOK
	if !out.Allowed {
		code = http.StatusTooManyRequests
	}
	writeJSON(w, code, out)
}

// decisionProblem answers a decision's or an inspection's error: 400 for
// a bad request, else 503 (the store did not answer in time).
func decisionProblem(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, redlimit.ErrInvalidArgument) {
		code = http.StatusBadRequest
	}
	problem(w, code, err.Error())
}
