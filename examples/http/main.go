// Command http is a runnable server guarding one route per client IP with
// package httplimit: the README's "Protect an HTTP API".
//
//	go run . --addr 127.0.0.1:8080 --limit 10/1s --limit 100/1m
//	go run . --redis redis://localhost:6379/0 --limit 10/1s
//
// `/` answers "hello" within the limits (memory store, or Redis with
// --redis, so that every instance shares them); `/metrics` serves the
// Prometheus metrics, unlimited: the middleware's counts and redlimit's
// own (package redlimitprom: decisions by limit, store latency, errors).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
	redlimitprom "github.com/redlimit/redlimit/prometheus"
	"github.com/redlimit/redlimit/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
}

// listFlag collects repeated string values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// run serves until ctx ends, then shuts down gracefully. It prints the
// address it listens on to stdout (with --addr 127.0.0.1:0, the port
// chosen).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "the `host:port` to listen on")
	redisURL := fs.String("redis", "", "a Redis `URL` (redis://, redis+sentinel://, redis+cluster://); default: the memory store")
	policyName := fs.String("policy", "http-example", "the policy's `name` in the store")
	var limitSpecs listFlag
	fs.Var(&limitSpecs, "limit", "a limit per client IP, `RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N]` (repeatable; default 10/1s)")
	var proxies listFlag
	fs.Var(&proxies, "trusted-proxy", "a `CIDR` of proxies whose X-Forwarded-For is believed (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(limitSpecs) == 0 {
		limitSpecs = listFlag{"10/1s"}
	}
	var limits []redlimit.Config
	var names []string
	for _, s := range limitSpecs {
		c, err := redlimit.ParseLimit(s)
		if err != nil {
			return err
		}
		limits, names = append(limits, c), append(names, redlimit.LimitName(c))
	}

	store, closeStore, err := openStore(*redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := redlimitprom.New(redlimitprom.Options{})
	reg.MustRegister(metrics)
	if rs, ok := store.(*redisstore.Store); ok {
		metrics.WatchStore("redis", rs)
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	policy, err := redlimit.NewPolicy(store, *policyName, limits, redlimit.WithLogger(logger), redlimit.WithObserver(metrics))
	if err != nil {
		return err
	}
	key, err := httplimit.ClientIP(httplimit.ClientIPConfig{TrustedProxies: proxies})
	if err != nil {
		return err
	}
	mw, err := httplimit.New([]httplimit.Rule{{Policy: policy, Key: key}}, httplimit.WithDegradedHeader("RateLimit-Degraded"))
	if err != nil {
		return err
	}
	registerStats(reg, mw)

	mux := http.NewServeMux()
	mux.Handle("GET /{$}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           http.MaxBytesHandler(mux, 1<<20),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "listening on http://%s (limits per client IP: %s)\n", ln.Addr(), strings.Join(names, " and "))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openStore returns the memory store, or a Redis store for url.
func openStore(url string) (redlimit.PolicyStore, func(), error) {
	if url == "" {
		return memstore.New(), func() {}, nil
	}
	rdb, err := redisstore.OpenURL(url)
	if err != nil {
		return nil, nil, err
	}
	rs, err := redisstore.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return rs, func() {
		rs.Close() // the store's policy subscription, before the client
		rdb.Close()
	}, nil
}

// registerStats exports the middleware's counts.
func registerStats(reg prometheus.Registerer, mw *httplimit.Middleware) {
	for _, c := range []struct {
		result string
		get    func(httplimit.Stats) int64
	}{
		{"allowed", func(s httplimit.Stats) int64 { return s.Allowed }},
		{"refused", func(s httplimit.Stats) int64 { return s.Refused }},
		{"allow_listed", func(s httplimit.Stats) int64 { return s.AllowListed }},
		{"bad_request", func(s httplimit.Stats) int64 { return s.BadRequests }},
		{"store_error", func(s httplimit.Stats) int64 { return s.StoreErrors }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "httplimit_requests_total",
			Help:        "Requests the rate-limit middleware answered, by result.",
			ConstLabels: prometheus.Labels{"result": c.result},
		}, func() float64 { return float64(c.get(mw.Stats())) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "httplimit_degraded_total",
		Help: "Requests answered by the failure policy because the store could not be reached.",
	}, func() float64 { return float64(mw.Stats().Degraded) }))
}
