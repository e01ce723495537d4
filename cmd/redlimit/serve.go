package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/redlimit/redlimit/serve"
)

// serveCmd is "redlimit serve". Its flags are the service's own
// ((*serve.Config).RegisterFlags), so that a setting added to the service
// appears here, in its help and in doc.go without a word in this file.
var serveCmd = &command{
	name:     "serve",
	summary:  "run the rate-limit service: Envoy's RLS v3 on gRPC, JSON on HTTP, rules in YAML",
	synopsis: "--rules FILE|DIR [--redis URL] [--grpc 127.0.0.1:8081] [--http 127.0.0.1:8080] [--log-json] ...",
	noStore:  true,
	run:      cmdServe,
	help: `
Runs redlimit's rate-limit service (package serve) until SIGINT or SIGTERM:
Envoy's rate-limit service (RLS v3) on gRPC, and the same request as JSON on
HTTP (POST /json), with the limits of --rules, a file or directory in
envoyproxy/ratelimit's YAML format (reloaded when it changes). The limits
live in Redis with --redis (every instance on it shares them), else in
process memory (one instance). It prints the addresses it listens on, one
line, then logs to stderr (text, or JSON lines with --log-json).

Every flag can also be set in the environment as REDLIMIT_<NAME>, the
flag's name in capitals with '-' as '_' (--max-entries: REDLIMIT_MAX_ENTRIES);
a flag on the command line wins. --redis defaults to $REDLIMIT_REDIS, then
$REDIS_URL.`,
}

// cmdServe is "redlimit serve": the service until ctx ends.
func cmdServe(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := newFlagSet(cmd)
	var cfg serve.Config
	cfg.RegisterFlags(fs)
	logJSON := fs.Bool("log-json", false, "log as JSON lines (default: text)")
	// parse sets --redis from $REDIS_URL when the command line does not;
	// ApplyEnv then prefers REDLIMIT_REDIS, as it only skips flags given
	// on the command line.
	if _, code, ok := c.parse(fs, cmd, args); !ok {
		return code
	}
	if err := serve.ApplyEnv(fs, c.getenv); err != nil {
		return c.usageError(cmd, err.Error())
	}
	if cfg.Rules == "" {
		return c.usageError(cmd, "--rules is required (or $"+serve.EnvName("rules")+")")
	}
	var h slog.Handler = slog.NewTextHandler(c.stderr, nil)
	if *logJSON {
		h = slog.NewJSONHandler(c.stderr, nil)
	}
	cfg.Logger = slog.New(h)
	cfg.OnListen = func(grpcAddr, httpAddr net.Addr) {
		fmt.Fprintf(c.stdout, "listening grpc=%s http=%s\n", addrString(grpcAddr), addrString(httpAddr))
	}
	// Run returns nil once ctx ends (SIGINT, SIGTERM) and its calls are
	// drained; an error is a failure to start or to keep serving.
	if err := serve.Run(ctx, cfg); err != nil {
		return c.fail(cmd, err)
	}
	return exitOK
}

// addrString is a listener's address, or "-" for one turned off.
func addrString(a net.Addr) string {
	if a == nil {
		return "-"
	}
	return a.String()
}
