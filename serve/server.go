package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
	"github.com/redlimit/redlimit/serve/traffic"
)

// Server is the service: its rules, its decisions and the handlers that
// serve them. Make one with New, then Serve (or use Run).
type Server struct {
	cfg Config
	dec *decide.Decider

	reloadMu   sync.Mutex // serializes Reload
	lastDigest string     // content last attempted
	watching   chan struct{}
	lastErr    atomic.Pointer[error]
	failures   atomic.Int64
	api        apiRules // the rules set through the API (apirules.go)

	extras                      // registry, TLS, metrics
	traffic   *traffic.Recorder // nil with NoTraffic
	draining  chan struct{}     // closed when Serve starts to drain
	drainOnce sync.Once
}

// New loads the rules and puts them in force; a bad rules file is an
// error matching rules.ErrInvalid.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if cfg.Rules == "" {
		return nil, &redlimit.ArgumentError{Arg: "rules", Reason: "a rules file or directory is required", Kind: redlimit.ErrInvalidArgument}
	}
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	x, err := newExtras(&cfg)
	if err != nil {
		return nil, err
	}
	tr, err := newTraffic(&cfg)
	if err != nil {
		return nil, err
	}
	dec, err := decide.New(cfg.Store, cfg.Decide)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, dec: dec, watching: make(chan struct{}), extras: x, traffic: tr, draining: make(chan struct{})}
	s.extras.setup(s)
	if err := s.initAPI(); err != nil {
		return nil, err
	}
	set, err := rules.Load(cfg.Rules)
	if err != nil {
		return nil, err
	}
	if err := s.setFileRules(ctx, set); err != nil {
		return nil, err
	}
	s.lastDigest = set.Digest
	cfg.Logger.Info("redlimit serve: rules loaded", "rules", cfg.Rules, "domains", set.Domains(), "digest", short(set.Digest))
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	s.reportSync(ctx, s.syncAPI(sctx, true)) // else the file's alone, until the store answers
	return s, nil
}

// Decider returns the server's decision core.
func (s *Server) Decider() *decide.Decider { return s.dec }

// ReloadFailures counts the reloads whose new rules were refused.
func (s *Server) ReloadFailures() int64 { return s.failures.Load() }

// LastReloadError is the error of the latest reload attempt (nil after a
// good one).
func (s *Server) LastReloadError() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload reads the rules again and puts them in force if they are good
// and new; bad rules leave the rules in force, are logged, counted and
// returned. Content already attempted (same digest) is skipped: it
// reports nothing and returns the attempt's error.
func (s *Server) Reload(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	digest, err := rules.Digest(s.cfg.Rules)
	if err == nil && digest == s.lastDigest {
		return s.LastReloadError()
	}
	if err != nil {
		// Unreadable: report it once per distinct error.
		if last := s.LastReloadError(); last != nil && last.Error() == err.Error() {
			return err
		}
	}
	var set *rules.Set
	old := s.dec.Rules()
	if err == nil {
		s.lastDigest = digest
		set, err = rules.Load(s.cfg.Rules)
	}
	if err == nil {
		s.lastDigest = set.Digest
		if err = s.setFileRules(ctx, set); err != nil {
			s.lastDigest = "" // the store failed: try again at the next event
		}
	}
	if err == nil {
		s.lastErr.Store(nil)
		added, changed, removed := diff(old, s.dec.Rules())
		s.cfg.Logger.Info("redlimit serve: rules reloaded", "rules", s.cfg.Rules, "domains", set.Domains(), "digest", short(digest), "added", added, "changed", changed, "removed", removed)
	} else {
		s.lastErr.Store(&err)
		s.failures.Add(1)
		s.cfg.Logger.Error("redlimit serve: new rules refused, keeping the rules in force", "rules", s.cfg.Rules, "err", err)
	}
	s.rulesChanged(err)
	if s.cfg.OnReload != nil {
		s.cfg.OnReload(Reload{Digest: digest, Err: err, At: time.Now()})
	}
	return err
}

// diff counts the rules (by Rule.ID) that b adds to a, changes and
// removes from it.
func diff(a, b *rules.Set) (added, changed, removed int) {
	before := map[string]*rules.Rule{}
	if a != nil {
		for _, r := range a.Rules() {
			before[r.ID()] = r
		}
	}
	for _, r := range b.Rules() {
		old, ok := before[r.ID()]
		delete(before, r.ID())
		switch {
		case !ok:
			added++
		case !sameRule(old, r):
			changed++
		}
	}
	return added, changed, len(before)
}

// sameRule reports whether two rules decide alike (where they were
// written aside).
func sameRule(a, b *rules.Rule) bool {
	if a.Name != b.Name || a.Unlimited != b.Unlimited || a.Blocked != b.Blocked || a.BlockedInterval != b.BlockedInterval ||
		a.ShadowMode != b.ShadowMode || a.QuotaMode != b.QuotaMode || !slices.Equal(a.Replaces, b.Replaces) {
		return false
	}
	return slices.Equal(a.Limits, b.Limits)
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// Serve answers gRPC on grpcLis and HTTP on httpLis (either may be nil)
// and watches the rules until ctx ends, then stops taking calls, lets
// those in flight finish within ShutdownTimeout and returns nil. It
// returns early with the error of a listener that fails.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)

	var gs *grpc.Server
	var hc *health.Server
	if grpcLis != nil {
		gs = grpc.NewServer(s.grpcOptions()...)
		gs.RegisterService(&rlsServiceDesc, rls{s: s})
		// gRPC's standard health service, for Kubernetes' and Envoy's
		// gRPC health checks: SERVING while rules are in force.
		hc = health.NewServer()
		hc.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hc.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(gs, hc)
		wg.Go(func() {
			if err := gs.Serve(grpcLis); err != nil {
				errc <- fmt.Errorf("serve: gRPC: %w", err)
			}
		})
	}
	var hs *http.Server
	if httpLis != nil {
		hs = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		wg.Go(func() {
			if err := s.serveHTTP(hs, httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve: HTTP: %w", err)
			}
		})
	}
	watching := make(chan error, 1)
	wg.Go(func() { watching <- s.watch(ctx) })
	leave := s.startRegistry(ctx, grpcLis, httpLis)
	wg.Go(func() { s.followAPI(ctx) })
	if s.traffic != nil {
		wg.Go(func() { s.traffic.Run(ctx) })
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case err = <-watching:
	}
	cancel()
	leave()                                      // out of the registry before draining
	s.drainOnce.Do(func() { close(s.draining) }) // ends the event streams, which never go idle
	if hc != nil {
		hc.Shutdown() // NOT_SERVING while draining
	}
	s.shutdown(gs, hs)
	wg.Wait()
	return err
}

// shutdown drains both servers within ShutdownTimeout, then closes them.
func (s *Server) shutdown(gs *grpc.Server, hs *http.Server) {
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	if gs != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-sctx.Done():
				gs.Stop()
				<-done
			}
		})
	}
	if hs != nil {
		wg.Go(func() {
			if hs.Shutdown(sctx) != nil {
				hs.Close()
			}
		})
	}
	wg.Wait()
}

// Run starts a Server from cfg on cfg's addresses (opening cfg.Redis if
// set) and serves until ctx ends (see Serve), with the garbage
// collector's target at cfg.GCPercent meanwhile.
func Run(ctx context.Context, cfg Config) error {
	if cfg.GCPercent > 0 && os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(cfg.GCPercent))
	}
	if cfg.Store == nil && cfg.Redis != "" {
		store, rdb, ping, closeStore, err := openRedis(cfg.Redis)
		if err != nil {
			return err
		}
		defer closeStore()
		cfg.Store = store
		if cfg.RedisClient == nil {
			cfg.RedisClient = rdb
		}
		if cfg.Ping == nil {
			cfg.Ping = ping
		}
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	cfg = s.cfg
	listen := func(addr string) (net.Listener, error) {
		if addr == "-" {
			return nil, nil
		}
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", addr)
	}
	gl, err := listen(cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hl, err := listen(cfg.HTTPAddr)
	if err != nil {
		if gl != nil {
			gl.Close()
		}
		return fmt.Errorf("serve: %w", err)
	}
	if cfg.OnListen != nil {
		cfg.OnListen(addrOf(gl), addrOf(hl))
	}
	return s.Serve(ctx, gl, hl)
}

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}
