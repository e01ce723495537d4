package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/grpclimit"
)

// details returns a refusal's RetryInfo and QuotaFailure, failing t when
// err is no ResourceExhausted status carrying both.
func details(t *testing.T, err error) (time.Duration, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if ri == nil || qf == nil {
		t.Fatalf("refusal details %v: want RetryInfo and QuotaFailure", st.Details())
	}
	return ri.GetRetryDelay().AsDuration(), qf
}

// recorder keeps the reports of a Limiter.
type recorder struct {
	mu sync.Mutex
	rs []grpclimit.Report
}

func (r *recorder) report(_ context.Context, rep grpclimit.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rs = append(r.rs, rep)
}

func (r *recorder) all() []grpclimit.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.rs)
}

func newLimiter(t *testing.T, rules []grpclimit.Rule, opts ...grpclimit.Option) *grpclimit.Limiter {
	t.Helper()
	l, err := grpclimit.New(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRefusalCarriesRetryInfoAndQuotaFailure(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "per-ip", "2/1m", "10/1h")}})
	c := serveLimited(t, l)
	for i := range 2 {
		if err := check(ctx, c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := check(ctx, c)
	delay, qf := details(t, err)
	if delay != time.Minute {
		t.Errorf("retry delay %v, want 1m (the sliding log's first grant leaves the window then)", delay)
	}
	if len(qf.Violations) != 1 || qf.Violations[0].Subject != "policy:per-ip" || qf.Violations[0].QuotaId != "2/1m" || qf.Violations[0].QuotaValue != 2 {
		t.Errorf("violations %v, want one naming policy:per-ip and limit 2/1m", qf.Violations)
	}
	// Waiting the delay is enough.
	f.clk.Advance(delay)
	if err := check(ctx, c); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
	if s := l.Stats(); s.Allowed != 3 || s.Refused != 1 {
		t.Errorf("stats %+v, want 3 allowed and 1 refused", s)
	}
}

// A retry delay is never earlier than the real retry-after: a token
// bucket's fractional wait is rounded up to the millisecond.
func TestRetryDelayNeverEarly(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	rec := &recorder{}
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "tb", "3/1s,algorithm=token-bucket")}}, grpclimit.WithReport(rec.report))
	c := serveLimited(t, l)
	for range 3 {
		if err := check(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	delay, _ := details(t, check(ctx, c))
	reps := rec.all()
	real := reps[len(reps)-1].Result.RetryAfter
	if real <= 0 || delay < real || delay-real >= time.Millisecond || delay%time.Millisecond != 0 {
		t.Fatalf("retry delay %v for a real retry-after of %v: want it rounded up to the millisecond", delay, real)
	}
	f.clk.Advance(delay)
	if err := check(ctx, c); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {1, time.Millisecond}, {time.Millisecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond}, {333333333, 334 * time.Millisecond},
	} {
		if got := grpclimit.RetryDelay(tc.in); got != tc.want {
			t.Errorf("RetryDelay(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A stream is charged once, when it opens; a refused stream's first
// receive carries the refusal.
func TestStreamServerInterceptor(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "watch", "1/1m"), Methods: []string{watchMethod}}})
	c := serveLimited(t, l)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first stream: %v, %v", r, err)
	}
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w2.Recv()
	if delay, _ := details(t, err); delay != time.Minute {
		t.Errorf("retry delay %v, want 1m", delay)
	}
	// The rule names Watch only: Check is not limited.
	for range 3 {
		if err := check(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMetadataKeys(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	apiKey := func(k string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", k)
	}
	t.Run("reject", func(t *testing.T) {
		l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "per-key", "1/1m"), Key: grpclimit.Metadata("X-Api-Key")}})
		c := serveLimited(t, l)
		if err := check(apiKey("a"), c); err != nil {
			t.Fatal(err)
		}
		details(t, check(apiKey("a"), c))
		if err := check(apiKey("b"), c); err != nil {
			t.Fatalf("another key: %v", err)
		}
		if err := check(ctx, c); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no key: %v, want InvalidArgument", err)
		}
		long := strings.Repeat("a", 1025)
		if err := check(apiKey(long), c); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a key over 1024 bytes: %v, want InvalidArgument", err)
		}
		if s := l.Stats(); s.KeyErrors != 2 {
			t.Errorf("stats %+v, want 2 key errors", s)
		}
	})
	t.Run("skip", func(t *testing.T) {
		l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "per-key-skip", "1/1m"), Key: grpclimit.Metadata("x-api-key"), OnKeyError: grpclimit.SkipRule}})
		c := serveLimited(t, l)
		for range 3 {
			if err := check(ctx, c); err != nil {
				t.Fatalf("no key, rule skipped: %v", err)
			}
		}
	})
	t.Run("fallback", func(t *testing.T) {
		rec := &recorder{}
		l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "key-or-ip", "5/1m"), Key: grpclimit.First(grpclimit.Metadata("x-api-key"), grpclimit.PeerIP())}}, grpclimit.WithReport(rec.report))
		c := serveLimited(t, l)
		if err := check(apiKey("k1"), c); err != nil {
			t.Fatal(err)
		}
		if err := check(ctx, c); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range rec.all() {
			keys = append(keys, r.Key)
		}
		if !slices.Equal(keys, []string{"k1", "127.0.0.1"}) {
			t.Errorf("keys %q, want the API key, then the peer's IP", keys)
		}
	})
	t.Run("join", func(t *testing.T) {
		rec := &recorder{}
		l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "key-method", "1/1m"), Key: grpclimit.Join(grpclimit.Metadata("x-api-key"), grpclimit.FullMethod())}}, grpclimit.WithReport(rec.report))
		c := serveLimited(t, l)
		if err := check(apiKey("j"), c); err != nil {
			t.Fatal(err)
		}
		details(t, check(apiKey("j"), c))
		if got := rec.all()[0].Key; got != `"j","`+checkMethod+`"` {
			t.Errorf("key %q", got)
		}
	})
}

// Every IPv6 address of one /64 shares a limit by default.
func TestPeerIPGroupsIPv6(t *testing.T) {
	ctx := t.Context()
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	} else {
		ln.Close()
	}
	f := newFixture()
	rec := &recorder{}
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "per-ip6", "5/1m")}}, grpclimit.WithReport(rec.report))
	c := serve(t, "tcp6", grpc.UnaryInterceptor(l.UnaryServerInterceptor()))
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := rec.all()[0].Key; got != "::/64" {
		t.Errorf("key of ::1 is %q, want ::/64", got)
	}
	k, err := grpclimit.PeerIPPrefix(24, 128)
	if err != nil {
		t.Fatal(err)
	}
	l2 := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "per-ip6-whole", "5/1m"), Key: k}}, grpclimit.WithReport(rec.report))
	c2 := serve(t, "tcp6", grpc.UnaryInterceptor(l2.UnaryServerInterceptor()))
	if err := check(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if got := rec.all()[1].Key; got != "::1" {
		t.Errorf("key of ::1 with /128 is %q, want ::1", got)
	}
	if _, err := grpclimit.PeerIPPrefix(0, 64); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("PeerIPPrefix(0, 64): %v, want ErrInvalidArgument", err)
	}
	if _, err := grpclimit.PeerIPPrefix(32, 129); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("PeerIPPrefix(32, 129): %v, want ErrInvalidArgument", err)
	}
}

// When one rule refuses, what the rules before it granted is handed back.
func TestRefusalHandsBackOtherGrants(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	perKey := f.policy(t, "per-key-hb", "5/1m")
	global := f.policy(t, "global-hb", "1/1m")
	l := newLimiter(t, []grpclimit.Rule{
		{Policy: perKey, Key: grpclimit.Metadata("x-api-key")},
		{Policy: global, Key: grpclimit.FullMethod()},
	})
	c := serveLimited(t, l)
	mctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", "k")
	if err := check(mctx, c); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, qf := details(t, check(mctx, c))
		if qf.Violations[0].Subject != "policy:global-hb" {
			t.Errorf("violation %v, want the global policy", qf.Violations[0])
		}
	}
	left, err := perKey.Key("k").AvailablePermits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left != 4 {
		t.Errorf("per-key policy has %d left, want 4: only the served call is charged", left)
	}
}

func TestCosts(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "cost", "5/1m")}}, grpclimit.WithCost(checkMethod, 3), grpclimit.WithCost(watchMethod, 0))
	c := serveLimited(t, l)
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	details(t, check(ctx, c)) // 2 left, 3 asked
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("a method of cost 0 is not limited: %v", err)
	}
	if _, err := grpclimit.New([]grpclimit.Rule{{Policy: f.policy(t, "cost2", "5/1m")}}, grpclimit.WithCost(checkMethod, -1)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("a negative cost: %v, want ErrInvalidArgument", err)
	}
	// A cost no interval can grant is a misconfiguration.
	l2 := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "cost3", "5/1m")}}, grpclimit.WithCost(checkMethod, 6))
	if err := check(ctx, serveLimited(t, l2)); status.Code(err) != codes.Internal {
		t.Errorf("cost above the rate: %v, want Internal", err)
	}
}

func TestAllowList(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	for name, allow := range map[string]func(context.Context, string) bool{
		"peers":   grpclimit.AllowPeers(netip.MustParsePrefix("127.0.0.0/8")),
		"methods": grpclimit.AllowMethods("/grpc.health.v1.Health/"),
	} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "allow-"+name, "1/1m")}}, grpclimit.WithAllow(allow))
			c := serveLimited(t, l)
			for range 3 {
				if err := check(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			if s := l.Stats(); s.Exempt != 3 {
				t.Errorf("stats %+v, want 3 exempt", s)
			}
		})
	}
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "allow-other", "1/1m")}}, grpclimit.WithAllow(grpclimit.AllowPeers(netip.MustParsePrefix("10.0.0.0/8"))), grpclimit.WithAllow(grpclimit.AllowMethods("/other.Service/Call")))
	c := serveLimited(t, l)
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	details(t, check(ctx, c))
}

func TestShadowOnlyReports(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	rec := &recorder{}
	l := newLimiter(t, []grpclimit.Rule{
		{Policy: f.policy(t, "shadow", "1/1m")},
		{Policy: f.policy(t, "shadow-key", "1/1m"), Key: grpclimit.Metadata("x-api-key")},
	}, grpclimit.WithShadow(), grpclimit.WithReport(rec.report))
	c := serveLimited(t, l)
	for range 3 {
		if err := check(ctx, c); err != nil {
			t.Fatalf("shadow mode refused: %v", err)
		}
	}
	if s := l.Stats(); s.Allowed != 3 || s.ShadowRefused != 3 || s.Refused != 0 {
		t.Errorf("stats %+v, want 3 allowed, 3 shadow-refused", s)
	}
	var shadowed int
	for _, r := range rec.all() {
		if r.Shadow {
			shadowed++
		}
	}
	if shadowed != 5 { // 3 missing keys, 2 refusals
		t.Errorf("%d shadow reports, want 5", shadowed)
	}
}

// WithWait makes a call wait for its turn, up to the bound.
func TestWait(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "wait", "1/1s,algorithm=token-bucket")}}, grpclimit.WithWait(2*time.Second))
	c := serveLimited(t, l)
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- check(ctx, c) }()
	if !f.clk.WaitForTimers(1, nil) {
		t.Fatal("the call did not wait")
	}
	f.clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("waited call: %v", err)
	}
	short := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "wait-short", "1/1s,algorithm=token-bucket")}}, grpclimit.WithWait(500*time.Millisecond))
	c2 := serveLimited(t, short)
	if err := check(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if delay, _ := details(t, check(ctx, c2)); delay != time.Second {
		t.Errorf("retry delay %v, want 1s", delay)
	}
	if _, err := grpclimit.New([]grpclimit.Rule{{Policy: f.policy(t, "wait-bad", "1/1s")}}, grpclimit.WithWait(-1)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("a negative wait: %v, want ErrInvalidArgument", err)
	}
}

func TestNewValidates(t *testing.T) {
	f := newFixture()
	for name, rules := range map[string][]grpclimit.Rule{
		"none":      nil,
		"no policy": {{}},
		"action":    {{Policy: f.policy(t, "v", "1/1s"), OnKeyError: 7}},
	} {
		if _, err := grpclimit.New(rules); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// A call whose deadline comes before its turn is refused at once, as a
// refusal (ResourceExhausted), not a timeout.
func TestWaitWithinDeadline(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "wait-dl", "1/1m,algorithm=token-bucket")}}, grpclimit.WithWait(time.Hour))
	c := serveLimited(t, l)
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if delay, _ := details(t, check(dctx, c)); delay != time.Minute {
		t.Errorf("retry delay %v, want 1m", delay)
	}
	if s := l.Stats(); s.Refused != 1 || s.Failed != 0 {
		t.Errorf("stats %+v, want 1 refused", s)
	}
}

// A caller that gives up while waiting gets Canceled, its reserved turn is
// handed back, and the store is not counted as failing.
func TestWaitCanceled(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	ended := make(chan grpclimit.Report, 1)
	p := f.policy(t, "wait-cancel", "1/1s,algorithm=token-bucket")
	l := newLimiter(t, []grpclimit.Rule{{Policy: p}}, grpclimit.WithWait(time.Minute), grpclimit.WithReport(func(_ context.Context, r grpclimit.Report) {
		if r.Err != nil {
			ended <- r
		}
	}))
	c := serveLimited(t, l)
	if err := check(ctx, c); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- check(cctx, c) }()
	if !f.clk.WaitForTimers(1, nil) {
		t.Fatal("the call did not wait")
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("canceled call: %v", err)
	}
	if r := <-ended; !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("server saw %v, want context.Canceled", r.Err)
	}
	f.clk.Advance(time.Second)
	if left, err := p.Key("127.0.0.1").AvailablePermits(ctx); err != nil || left != 1 {
		t.Errorf("after a second, %d permits (%v), want 1: the canceled turn is handed back", left, err)
	}
	if s := l.Stats(); s.Failed != 0 {
		t.Errorf("stats %+v, want no failure", s)
	}
}

// Behind a trusted proxy the client's address comes from x-forwarded-for,
// read right to left: a forged leftmost entry changes nothing.
func TestForwardedIP(t *testing.T) {
	ctx := t.Context()
	f := newFixture()
	run := func(trusted []netip.Prefix, xff ...string) (string, error) {
		t.Helper()
		rec := &recorder{}
		l := newLimiter(t, []grpclimit.Rule{{Policy: f.policy(t, "fwd", "100/1m"), Key: grpclimit.ForwardedIP(trusted...)}}, grpclimit.WithReport(rec.report))
		c := serveLimited(t, l)
		cctx := ctx
		for _, v := range xff {
			cctx = metadata.AppendToOutgoingContext(cctx, "x-forwarded-for", v)
		}
		err := check(cctx, c)
		reps := rec.all()
		if len(reps) != 1 {
			t.Fatalf("%d reports", len(reps))
		}
		return reps[0].Key, err
	}
	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	proxies := append(loop, netip.MustParsePrefix("10.0.0.0/8"))
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		xff     []string
		want    string
	}{
		{"untrusted peer", nil, []string{"203.0.113.9"}, "127.0.0.1"},
		{"one proxy", loop, []string{"203.0.113.9"}, "203.0.113.9"},
		{"forged leftmost", loop, []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"two proxies", proxies, []string{"198.51.100.1, 203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"several entries", proxies, []string{"198.51.100.1", "203.0.113.9,10.1.2.3"}, "203.0.113.9"},
		{"ipv6 by /64", loop, []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64"},
		{"all trusted", proxies, []string{"10.0.0.1"}, "10.0.0.1"},
		{"no header", loop, nil, "127.0.0.1"},
	} {
		got, err := run(tc.trusted, tc.xff...)
		if err != nil || got != tc.want {
			t.Errorf("%s: key %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := run(loop, "198.51.100.1, bogus"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bogus entry: %v, want InvalidArgument", err)
	}
}
