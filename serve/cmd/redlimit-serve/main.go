// Command redlimit-serve runs redlimit's rate-limit service (package
// serve): Envoy's rate-limit service over gRPC and the same request as
// JSON over HTTP, from a rules file in envoyproxy/ratelimit's format.
//
//	redlimit-serve --rules ./ratelimit.yaml --redis redis://127.0.0.1:6379/0 --grpc 127.0.0.1:8081 --http 127.0.0.1:8080
//
// Flags may also be given as environment variables: REDLIMIT_RULES,
// REDLIMIT_GRPC, REDLIMIT_HTTP and so on (the flag's name in capitals,
// '-' as '_'); a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlimit/redlimit/serve"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "redlimit-serve:", err)
		}
		stop()
		os.Exit(2)
	}
}

// run parses args (and the environment through getenv) and serves until
// ctx ends. It prints the addresses it listens on to stdout, one line.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redlimit-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg serve.Config
	cfg.RegisterFlags(fs)
	logJSON := fs.Bool("log-json", false, "log as JSON lines (default: text)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: redlimit-serve --rules FILE_OR_DIR [flags]\n\nredlimit's rate-limit service: Envoy's RLS v3 on gRPC, JSON on HTTP.\nThe limits live in Redis with --redis (every instance on it shares them), else in process memory (one instance).\nEvery flag can be set as REDLIMIT_<NAME> in the environment.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := serve.ApplyEnv(fs, getenv); err != nil {
		return err
	}
	redisSet := false
	fs.Visit(func(f *flag.Flag) { redisSet = redisSet || f.Name == "redis" })
	if cfg.Redis == "" && !redisSet {
		cfg.Redis = getenv("REDIS_URL")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.Rules == "" {
		fs.Usage()
		return errors.New("--rules is required")
	}
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if *logJSON {
		h = slog.NewJSONHandler(stderr, nil)
	}
	cfg.Logger = slog.New(h)
	cfg.OnListen = func(g, hh net.Addr) {
		fmt.Fprintf(stdout, "listening grpc=%s http=%s\n", addr(g), addr(hh))
	}
	return serve.Run(ctx, cfg)
}

func addr(a net.Addr) string {
	if a == nil {
		return "-"
	}
	return a.String()
}
