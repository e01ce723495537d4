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
	// Tokens are the bearer tokens that may write through the API, by
	// name (what the log and the audit show; the token itself is never
	// shown). None, and no TokenFile: every write is refused (403).
	Tokens map[string]string
	// TokenFile adds the tokens of a file of "name:token" lines ('#'
	// starts a comment), read by New; a bad file is an error.
	TokenFile string
	// RulesPoll is how often an instance checks the version of the rules
	// set through the API, in case it missed an announcement of a
	// change; default 1s.
	RulesPoll time.Duration
	// GRPCAddr and HTTPAddr are where Run listens; default
	// "127.0.0.1:8081" and "127.0.0.1:8080". "-" turns one off.
	GRPCAddr, HTTPAddr string
	// Decide tunes the decisions (all-or-nothing, fail-open, bounds).
	Decide decide.Options
	// MaxRequestBytes bounds one request, gRPC message or HTTP body;
	// default 64 KiB.
	MaxRequestBytes int
	// GRPCWorkers is how many goroutines answer gRPC calls, each kept
	// with the stack a decision grew, so that a call neither starts a
	// goroutine nor grows its stack; calls beyond them in flight get a
	// goroutine each, as without workers. Default DefaultGRPCWorkers;
	// negative: none.
	GRPCWorkers int
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

	// Prefix starts every key serve keeps in RedisClient; its one hash
	// tag keeps them in one slot of a Redis Cluster. Default
	// "{redlimit:serve}:".
	Prefix string
	// HeartbeatTTL is how long this instance stays in the registry
	// (GET /v1/instances) after its last heartbeat; it beats every
	// third of it. Default 15s, at least 100ms. Failed heartbeats are
	// counted and logged at most once a minute (by Decide.Clock).
	HeartbeatTTL time.Duration
	// Version is the version the registry shows for this instance;
	// default redlimit's module version from the build information.
	Version string
	// TLSCert and TLSKey are PEM files: when set (both, or neither), the
	// gRPC and HTTP ports serve TLS only. The files are read again when
	// they change, for certificates renewed in place.
	TLSCert, TLSKey string
	// NoMetrics turns off GET /metrics (Prometheus text).
	NoMetrics bool
	// Dashboard serves the web dashboard at /dashboard/ on the HTTP port.
	Dashboard bool
	// NoTraffic stops counting the traffic per policy (package traffic)
	// that /v1/traffic and the dashboard show; counted by default, in
	// RedisClient so that every instance's calls add up.
	NoTraffic bool
	// NoTrafficKeys counts the traffic without its hottest keys, for
	// keys that are personal data (addresses, user ids): they then reach
	// neither Redis nor the dashboard.
	NoTrafficKeys bool
	// GCPercent, when above 0, is the garbage collector's target (as
	// GOGC sets it) that Run puts in force for the process while it
	// serves, unless the GOGC environment variable is set. Every decision
	// allocates a little (gRPC's stream, the store's reply) while the
	// heap a server keeps stays small, so the runtime's default of 100
	// collects many times a second: a higher target trades a larger
	// heap for less CPU per decision. 0 leaves the runtime's setting.
	GCPercent int
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
	if c.GRPCWorkers == 0 {
		c.GRPCWorkers = DefaultGRPCWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RulesPoll <= 0 {
		c.RulesPoll = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.HeartbeatTTL <= 0 {
		c.HeartbeatTTL = 15 * time.Second
	}
	if c.Version == "" {
		c.Version = buildVersion()
	}
}
