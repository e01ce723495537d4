package serve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
)

// Handler returns the HTTP API:
//
//	POST /json     envoy's RateLimitRequest as JSON (protojson, as
//	               envoyproxy/ratelimit's HTTP port takes it); answers the
//	               RateLimitResponse as JSON, 200 when OK, 429 when over
//	               the limit
//	GET  /healthz  200 while the process serves (also /healthcheck, as
//	               envoyproxy/ratelimit names it)
//	GET  /readyz   200 when rules are in force and the store answers
//	               (Config.Ping), else 503; says why, and what failed
//	               in reading the rules set through the API
//	GET  /rules    the rules in force, where each comes from
//	POST /v1/acquire/{domain}?descriptor=k=v,...&hits=N
//	               one descriptor charged N hits (default 1, 0 checks):
//	               200 granted, 429 over the limit, with RateLimit headers
//	GET  /v1/instances  the instances sharing this one's Redis (Instances)
//	GET  /metrics  Prometheus text (unless Config.NoMetrics)
//
// Errors are application/problem+json: 400 for a bad request, 413 for a
// body over MaxRequestBytes, 503 when the store is unavailable.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.handleJSON)
	alive := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK\n")
	}
	mux.HandleFunc("GET /healthz", alive)
	mux.HandleFunc("GET /healthcheck", alive) // envoyproxy/ratelimit's name, for probes moved over
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.HandleFunc("GET /rules", s.handleRules)
	mux.HandleFunc("POST /v1/acquire/{domain}", s.handleAcquire)
	s.extraRoutes(mux) // GET /v1/instances, GET /metrics
	s.apiRoutes(mux)   // the /v1/ API (apirules.go)
	s.handleViews(mux)
	return mux
}

func (s *Server) handleJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxRequestBytes)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "the request body is over the limit of "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
			return
		}
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		problem(w, http.StatusBadRequest, "the body is not a RateLimitRequest as JSON: "+err.Error())
		return
	}
	resp, err := s.shouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, redlimit.ErrInvalidArgument):
			code = http.StatusBadRequest
		case errors.Is(err, redlimit.ErrUnavailable), errors.Is(err, decide.ErrNoRules):
			code = http.StatusServiceUnavailable
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			code = http.StatusServiceUnavailable
		}
		problem(w, code, err.Error())
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for _, h := range resp.ResponseHeadersToAdd {
		w.Header().Set(h.Key, h.Value)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	set := s.dec.Rules()
	out := map[string]any{"ready": true}
	code := http.StatusOK
	if set == nil {
		out["ready"], code = false, http.StatusServiceUnavailable
		out["rules"] = "no rules loaded"
	} else {
		out["rules_digest"] = set.Digest
		out["domains"] = set.Domains()
	}
	if err := s.LastReloadError(); err != nil {
		out["last_reload_error"] = err.Error()
	}
	// The API's rules failing to read leaves the instance ready: it keeps
	// those in force, as every instance sharing the store does.
	lastErr, skipped := s.apiHealth()
	if lastErr != "" {
		out["api_rules_error"] = lastErr
	}
	if len(skipped) > 0 {
		out["api_rules_skipped"] = skipped
	}
	if s.cfg.Ping != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Ping(ctx); err != nil {
			out["ready"], code = false, http.StatusServiceUnavailable
			out["store"] = err.Error()
		}
	}
	writeJSON(w, code, out)
}

// ruleView is a rule as GET /rules shows it.
type ruleView struct {
	Domain     string      `json:"domain"`
	Path       string      `json:"path"`
	Name       string      `json:"name,omitempty"`
	Limits     []limitView `json:"limits,omitempty"`
	Unlimited  bool        `json:"unlimited,omitempty"`
	Blocked    bool        `json:"blocked,omitempty"`
	ShadowMode bool        `json:"shadow_mode,omitempty"`
	Replaces   []string    `json:"replaces,omitempty"`
	Source     string      `json:"source"`
}

type limitView struct {
	Name  string `json:"name,omitempty"`
	Limit string `json:"limit"`
}

func (s *Server) handleRules(w http.ResponseWriter, _ *http.Request) {
	set := s.dec.Rules()
	if set == nil {
		problem(w, http.StatusServiceUnavailable, "no rules loaded")
		return
	}
	views := []ruleView{}
	for _, r := range set.Rules() {
		v := ruleView{Domain: r.Domain, Path: r.Path, Name: r.Name, Unlimited: r.Unlimited, Blocked: r.Blocked, ShadowMode: r.ShadowMode, Replaces: r.Replaces, Source: sourceOf(r)}
		for _, l := range r.Limits {
			v.Limits = append(v.Limits, limitView{Name: l.Name, Limit: redlimit.LimitName(l.Config)})
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"digest": set.Digest, "rules": views})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// problem writes an RFC 9457 problem.
func problem(w http.ResponseWriter, code int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(code), "status": code, "detail": detail})
}
