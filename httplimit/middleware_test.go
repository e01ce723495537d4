package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// env is a memory store and the fake clock it decides at.
type env struct {
	clk   *clock.Fake
	store *memstore.Store
}

func newEnv() *env {
	clk := clock.NewFake(t0)
	return &env{clk: clk, store: memstore.New(memstore.WithTimeSource(clk))}
}

func (e *env) policy(t *testing.T, name string, limits ...redlimit.Config) *redlimit.Policy {
	t.Helper()
	p, err := redlimit.NewPolicy(e.store, name, limits, redlimit.WithClock(e.clk))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve starts a real server on loopback with mw in front of a handler
// that answers 200 "ok".
func serve(t *testing.T, mw *httplimit.Middleware) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, srv *httptest.Server, header ...string) response {
	t.Helper()
	r, err := fetch(srv, header...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fetch is get for other goroutines than the test's.
func fetch(srv *httptest.Server, header ...string) (response, error) {
	req, err := http.NewRequest("GET", srv.URL+"/items", nil)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(body)}, err
}

func mustNew(t *testing.T, rules []httplimit.Rule, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	mw, err := httplimit.New(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func clientIP(t *testing.T, cfg httplimit.ClientIPConfig) httplimit.KeyFunc {
	t.Helper()
	k, err := httplimit.ClientIP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

func readProblem(t *testing.T, r response) problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if p.Status != r.status {
		t.Errorf("problem status %d, response %d", p.Status, r.status)
	}
	return p
}

func TestGrantsThenRefuses(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(2))
	mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}}, httplimit.WithLegacyHeaders())
	srv := serve(t, mw)

	for i, want := range []string{`"api";r=1;t=60`, `"api";r=0;t=60`} {
		r := get(t, srv)
		if r.status != 200 || r.body != "ok" {
			t.Fatalf("request %d: %d %q", i+1, r.status, r.body)
		}
		if got := r.header.Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i+1, got, want)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"api";q=2;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on a grant", i+1)
		}
	}
	e.clk.Advance(20*time.Second + time.Millisecond)
	r := get(t, srv)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %q", r.status, r.body)
	}
	// The first permit leaves the window 60 s after it was granted: in
	// 39.999 s, rounded up.
	if got := r.header.Get("Retry-After"); got != "40" {
		t.Errorf("Retry-After %q, want 40", got)
	}
	// Both permits leave the window at once, 60 s after they were granted.
	if got := r.header.Get("RateLimit"); got != `"api";r=0;t=40` {
		t.Errorf("RateLimit on the refusal %q", got)
	}
	for k, want := range map[string]string{"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "40"} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	pb := readProblem(t, r)
	if pb.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || len(pb.Violated) != 1 || pb.Violated[0] != "api" {
		t.Errorf("problem %+v", pb)
	}
	// Retry-After is not early: a request then is granted, a moment
	// before it is not.
	e.clk.Advance(40*time.Second - time.Millisecond - 1)
	if r := get(t, srv); r.status != http.StatusTooManyRequests {
		t.Errorf("just before Retry-After: %d", r.status)
	}
	e.clk.Advance(1)
	if r := get(t, srv); r.status != 200 {
		t.Errorf("at Retry-After: %d", r.status)
	}
	if s := mw.Stats(); s.Allowed != 3 || s.Refused != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestMultiLimitPolicyHeaders(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerSecond(2), redlimit.TokenBucketConfig(3, time.Minute, 3))
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-Api-Key")}}, httplimit.WithPartitionKey()))

	r := get(t, srv, "X-Api-Key", "k1")
	if r.status != 200 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	pol := r.header.Get("RateLimit-Policy")
	want := `"api:2/1s";q=2;w=1;pk=:`
	if len(pol) < len(want) || pol[:len(want)] != want {
		t.Errorf("RateLimit-Policy %q", pol)
	}
	for range 2 {
		e.clk.Advance(time.Second)
		get(t, srv, "X-Api-Key", "k1")
	}
	e.clk.Advance(time.Second)
	r = get(t, srv, "X-Api-Key", "k1")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d", r.status)
	}
	if pb := readProblem(t, r); len(pb.Violated) != 1 || pb.Violated[0] != "api:3/1m,token-bucket" {
		t.Errorf("violated %v", pb.Violated)
	}
	// One token comes back every 20 s; 3 s have passed since the first.
	if got := r.header.Get("Retry-After"); got != "17" {
		t.Errorf("Retry-After %q, want 17", got)
	}
}

func TestRefusalHandsBackOtherRules(t *testing.T) {
	e := newEnv()
	perIP := e.policy(t, "ip", redlimit.PerMinute(10))
	perKey := e.policy(t, "key", redlimit.PerMinute(1))
	mw := mustNew(t, []httplimit.Rule{
		{Policy: perIP, Key: clientIP(t, httplimit.ClientIPConfig{})},
		{Policy: perKey, Key: httplimit.Header("X-Api-Key")},
	})
	srv := serve(t, mw)
	if r := get(t, srv, "X-Api-Key", "k1"); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	r := get(t, srv, "X-Api-Key", "k1")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second: %d", r.status)
	}
	if got := r.header.Get("RateLimit"); got != `"ip";r=8;t=60, "key";r=0;t=60` {
		t.Errorf("RateLimit %q", got)
	}
	if pb := readProblem(t, r); len(pb.Violated) != 1 || pb.Violated[0] != "key" {
		t.Errorf("violated %v", pb.Violated)
	}
	// The per-IP permit of the refused request was handed back.
	st, err := perIP.Key("127.0.0.1").Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 9 {
		t.Errorf("per-IP remaining %d after the refusal, want 9", st.Remaining)
	}
	if r := get(t, srv, "X-Api-Key", "k2"); r.status != 200 {
		t.Errorf("another key: %d", r.status)
	}
}

func TestKeyErrors(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-Api-Key")}}))
	r := get(t, srv)
	if r.status != http.StatusBadRequest {
		t.Fatalf("no key: %d", r.status)
	}
	readProblem(t, r)
	if r := get(t, srv, "X-Api-Key", fmt.Sprintf("%01025d", 0)); r.status != http.StatusBadRequest {
		t.Errorf("a key too long: %d", r.status)
	}

	// With a fallback, requests without a key are limited per IP.
	fb := e.policy(t, "fallback", redlimit.PerMinute(1))
	mw := mustNew(t, []httplimit.Rule{{Policy: fb, Key: httplimit.Header("X-Api-Key"), OnKeyError: clientIP(t, httplimit.ClientIPConfig{})}})
	srv = serve(t, mw)
	if r := get(t, srv); r.status != 200 {
		t.Errorf("fallback first: %d", r.status)
	}
	if r := get(t, srv); r.status != http.StatusTooManyRequests {
		t.Errorf("fallback second: %d", r.status)
	}
	if r := get(t, srv, "X-Api-Key", "k"); r.status != 200 {
		t.Errorf("with a key: %d", r.status)
	}
}

func TestTrustedProxy(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	key := clientIP(t, httplimit.ClientIPConfig{TrustedProxies: []string{"127.0.0.0/8", "::1"}})
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: key}}))
	if r := get(t, srv, "X-Forwarded-For", "198.51.100.1"); r.status != 200 {
		t.Fatalf("client 1: %d", r.status)
	}
	if r := get(t, srv, "X-Forwarded-For", "198.51.100.2"); r.status != 200 {
		t.Fatalf("client 2: %d", r.status)
	}
	// A client spoofing an entry on the left is still itself.
	if r := get(t, srv, "X-Forwarded-For", "203.0.113.9, 198.51.100.1"); r.status != http.StatusTooManyRequests {
		t.Errorf("spoofed leftmost entry: %d", r.status)
	}
}

func TestCost(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(5))
	ip := clientIP(t, httplimit.ClientIPConfig{})
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: ip}}, httplimit.WithCost(3)))
	if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit") != `"api";r=2;t=60` {
		t.Fatalf("first: %d %q", r.status, r.header.Get("RateLimit"))
	}
	if r := get(t, srv); r.status != http.StatusTooManyRequests {
		t.Fatalf("second: %d", r.status)
	}

	q := e.policy(t, "batch", redlimit.PerMinute(5))
	cost := httplimit.WithCostFunc(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("X-Batch"), 10, 64)
	})
	mw := mustNew(t, []httplimit.Rule{{Policy: q, Key: ip}}, cost)
	srv = serve(t, mw)
	for _, c := range []struct {
		batch  string
		status int
	}{{"4", 200}, {"2", 429}, {"1", 200}, {"x", 400}, {"0", 400}, {"6", 400}} {
		if r := get(t, srv, "X-Batch", c.batch); r.status != c.status {
			t.Errorf("batch %s: %d, want %d", c.batch, r.status, c.status)
		}
	}
	if s := mw.Stats(); s.BadRequests != 3 {
		t.Errorf("stats %+v", s)
	}
}

func TestAllowList(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}},
		httplimit.WithAllowList(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" }))
	srv := serve(t, mw)
	for range 3 {
		r := get(t, srv, "X-Internal", "yes")
		if r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("allow-listed: %d %v", r.status, r.header)
		}
	}
	if r := get(t, srv); r.status != 200 {
		t.Errorf("first counted request: %d", r.status)
	}
	if s := mw.Stats(); s.AllowListed != 3 || s.Allowed != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestShadow(t *testing.T) {
	e := newEnv()
	perIP := e.policy(t, "ip", redlimit.PerMinute(5))
	perKey := e.policy(t, "key", redlimit.PerMinute(1))
	var reported atomic.Int64
	mw := mustNew(t, []httplimit.Rule{
		{Policy: perIP, Key: clientIP(t, httplimit.ClientIPConfig{})},
		{Policy: perKey, Key: httplimit.Header("X-Api-Key")},
	}, httplimit.WithShadow(func(r *http.Request, d *httplimit.Decision) {
		if !d.Allowed && d.Violated()[0] == "key" && d.RetryAfter == time.Minute {
			reported.Add(1)
		}
	}))
	srv := serve(t, mw)
	for range 3 {
		r := get(t, srv, "X-Api-Key", "k")
		if r.status != 200 || r.header.Get("RateLimit") != "" || r.header.Get("Retry-After") != "" {
			t.Fatalf("shadow: %d %v", r.status, r.header)
		}
	}
	if r := get(t, srv); r.status != 200 {
		t.Errorf("shadow without a key: %d", r.status)
	}
	if s := mw.Stats(); s.Allowed != 1 || s.ShadowRefused != 2 || s.BadRequests != 1 || reported.Load() != 2 {
		t.Errorf("stats %+v, reported %d", s, reported.Load())
	}
	// Shadow refusals hand back as enforcing would: only the first
	// request's per-IP permit counts (the keyless one's is handed back
	// too, as a bad request's).
	if st, err := perIP.Key("127.0.0.1").Status(context.Background()); err != nil || st.Remaining != 4 {
		t.Errorf("per-IP remaining %d, %v; want 4", st.Remaining, err)
	}
}

func TestWait(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	ip := clientIP(t, httplimit.ClientIPConfig{})
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: ip}}, httplimit.WithWait(time.Hour)))
	if r := get(t, srv); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	done := waitingRequest(t, e, srv)
	e.clk.Advance(time.Minute)
	if r := <-done; r.status != 200 {
		t.Errorf("after waiting: %d", r.status)
	}

	// A wait longer than the bound is refused at once.
	short := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: ip}}, httplimit.WithWait(time.Second)))
	r := get(t, short)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "60" {
		t.Fatalf("beyond the bound: %d, Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	if pb := readProblem(t, r); pb.Detail != "the wait would be too long; retry in 60 s" {
		t.Errorf("detail %q", pb.Detail)
	}
}

func TestNewErrors(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	ok := []httplimit.Rule{{Policy: p, Key: httplimit.Route()}}
	for name, c := range map[string]struct {
		rules []httplimit.Rule
		opts  []httplimit.Option
	}{
		"no rules":        {nil, nil},
		"no policy":       {[]httplimit.Rule{{Key: httplimit.Route()}}, nil},
		"no key":          {[]httplimit.Rule{{Policy: p}}, nil},
		"cost 0":          {ok, []httplimit.Option{httplimit.WithCost(0)}},
		"nil cost func":   {ok, []httplimit.Option{httplimit.WithCostFunc(nil)}},
		"nil allow list":  {ok, []httplimit.Option{httplimit.WithAllowList(nil)}},
		"zero wait":       {ok, []httplimit.Option{httplimit.WithWait(0)}},
		"nil refusal":     {ok, []httplimit.Option{httplimit.WithRefusalHandler(nil)}},
		"nil error":       {ok, []httplimit.Option{httplimit.WithErrorHandler(nil)}},
		"degraded header": {ok, []httplimit.Option{httplimit.WithDegradedHeader("")}},
	} {
		if _, err := httplimit.New(c.rules, c.opts...); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestCustomHandlers(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "api", redlimit.PerMinute(1))
	mw := mustNew(t, []httplimit.Rule{{Policy: p, Key: httplimit.Header("X-Api-Key")}},
		httplimit.WithRefusalHandler(func(w http.ResponseWriter, r *http.Request, d *httplimit.Decision) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "slow down")
		}),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, httplimit.ErrNoKey) && errors.Is(err, httplimit.ErrBadRequest) {
				w.WriteHeader(http.StatusUnauthorized)
			}
		}))
	srv := serve(t, mw)
	if r := get(t, srv); r.status != http.StatusUnauthorized {
		t.Errorf("no key: %d", r.status)
	}
	get(t, srv, "X-Api-Key", "k")
	r := get(t, srv, "X-Api-Key", "k")
	if r.status != http.StatusServiceUnavailable || r.body != "slow down" || r.header.Get("Retry-After") != "60" {
		t.Errorf("refusal: %d %q %v", r.status, r.body, r.header)
	}
}

func TestWaitQueueFull(t *testing.T) {
	e := newEnv()
	p := e.policy(t, "queue", redlimit.LeakyBucketConfig(1, time.Minute, 2))
	srv := serve(t, mustNew(t, []httplimit.Rule{{Policy: p, Key: clientIP(t, httplimit.ClientIPConfig{})}}, httplimit.WithWait(time.Hour)))
	first := get(t, srv)
	done := waitingRequest(t, e, srv)
	r := get(t, srv)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("with the queue full: %d (first %d)", r.status, first.status)
	}
	if pb := readProblem(t, r); len(pb.Violated) != 1 || pb.Violated[0] != "queue" || pb.Detail[:18] != "the queue is full;" {
		t.Errorf("problem %+v", pb)
	}
	e.clk.Advance(time.Hour)
	if r := <-done; r.status != 200 {
		t.Errorf("the queued request: %d", r.status)
	}
}

// waitingRequest sends a request in the background and returns once the
// middleware waits for its turn on e's clock; its response comes on the
// channel.
func waitingRequest(t *testing.T, e *env, srv *httptest.Server) <-chan response {
	t.Helper()
	done, finished := make(chan response, 1), make(chan struct{})
	go func() {
		r, err := fetch(srv)
		if err != nil {
			r.body = err.Error()
		}
		done <- r
		close(finished)
	}()
	if !e.clk.WaitForTimers(1, finished) {
		t.Fatalf("the request did not wait: %+v", <-done)
	}
	return done
}
