package serve

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
)

// Config configures a Server. Only Rules is required.
type Config struct {
	// Rules is the rules file, or a directory of *.yaml/*.yml files, one
	// domain each (package rules). It reloads when it changes.
	Rules string
	// Store keeps the limits' state; nil: Redis when Redis is set, else
	// a memory store (one instance only, for trying the service out).
	Store redlimit.PolicyStore
	// Redis is the URL of the Redis that Run keeps the state in when
	// Store is nil (redisstore.OpenURL: redis://, rediss://,
	// redis+sentinel://, redis+cluster://); Run closes it at the end and
	// /readyz pings it. Every instance on one Redis shares the limits.
	Redis string
	// RedisClient is the shared Redis of the instances that serve one
	// set of limits: the instance registry and the rules set through the
	// API live there. Run sets it to its client of Redis; nil: this
	// instance keeps both to itself.
	RedisClient redis.UniversalClient
	// GRPCAddr and HTTPAddr are where Run listens; default
	// "127.0.0.1:8081" and "127.0.0.1:8080". "-" turns one off.
	GRPCAddr, HTTPAddr string
	// Decide tunes the decisions (all-or-nothing, fail-open, bounds).
	Decide decide.Options
	// MaxRequestBytes bounds one request, gRPC message or HTTP body;
	// default 64 KiB.
	MaxRequestBytes int
	// ResponseHeaders adds RateLimit-Policy, RateLimit and (when over the
	// limit) Retry-After headers to gRPC answers, for Envoy to pass on
	// to the client, from the descriptor with the least remaining.
	ResponseHeaders bool
	// Ping, when set, is called by /readyz to check the store.
	Ping func(context.Context) error
	// Logger receives reloads and failures; default slog.Default().
	Logger *slog.Logger
	// OnReload, when set, is called after every attempt to reload the
	// rules that found new content, good or bad, in order.
	OnReload func(Reload)
	// OnListen, when set, is called by Run with the addresses bound (nil
	// for one turned off), before serving.
	OnListen func(grpc, http net.Addr)
	// ShutdownTimeout bounds the drain of in-flight calls when the
	// context given to Serve or Run ends; default 10s.
	ShutdownTimeout time.Duration
}

// Reload reports an attempt to reload the rules.
type Reload struct {
	// Digest identifies the content read (rules.Set.Digest); empty when
	// it could not be read.
	Digest string
	// Err is why the new content was not put in force (the previous
	// rules stay); nil when it was.
	Err error
	// At is when the attempt ended.
	At time.Time
}

func (c *Config) setDefaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:8081"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
}
