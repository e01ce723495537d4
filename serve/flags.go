package serve

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts the environment variable of every flag RegisterFlags
// defines: REDLIMIT_RULES for --rules, REDLIMIT_MAX_ENTRIES for
// --max-entries.
const EnvPrefix = "REDLIMIT_"

// DefaultGCPercent is --gc-percent's default (Config.GCPercent).
const DefaultGCPercent = 400

// DefaultGRPCWorkers is --grpc-workers' default (Config.GRPCWorkers):
// the calls in flight of a busy instance (64 Envoy workers, each
// waiting on Redis).
const DefaultGRPCWorkers = 64

// RegisterFlags defines on fs a flag for every setting of c a command
// line can give, bound to c and with c's defaults, so that every command
// serving redlimit offers the same flags with the same help. Fields
// without a flag (Store, Logger, the callbacks) stay the caller's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Rules, "rules", "", "rules `file or directory` (envoyproxy/ratelimit YAML plus redlimit's extensions); reloads on change (required)")
	fs.StringVar(&c.Redis, "redis", "", "`URL` of the Redis keeping the limits, shared by every instance on it (redis://host:6379/0, rediss://, redis+sentinel://, redis+cluster://; default $REDIS_URL); empty: process memory, one instance")
	fs.StringVar(&c.GRPCAddr, "grpc", "127.0.0.1:8081", "`address` of Envoy's rate-limit service (gRPC); - turns it off")
	fs.StringVar(&c.HTTPAddr, "http", "127.0.0.1:8080", "`address` of the HTTP API (POST /json, /healthz, /readyz, /rules); - turns it off")
	fs.BoolVar(&c.Decide.AllOrNothing, "all-or-nothing", false, "hand back the other descriptors' charges when a request is over a limit")
	fs.BoolVar(&c.Decide.FailOpen, "fail-open", false, "answer OK when the store is unavailable (default: an error, Envoy's failure_mode_deny decides)")
	fs.IntVar(&c.GRPCWorkers, "grpc-workers", DefaultGRPCWorkers, "goroutines kept to answer gRPC calls, saving each call a new goroutine and its stack growth (more calls in flight get a goroutine each); -1: none")
	fs.BoolVar(&c.ResponseHeaders, "response-headers", false, "add RateLimit-Policy, RateLimit and Retry-After headers to Envoy's answers")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", 64<<10, "largest gRPC message or HTTP body accepted, in `bytes`")
	fs.IntVar(&c.Decide.MaxDescriptors, "max-descriptors", 64, "most descriptors in one request")
	fs.IntVar(&c.Decide.MaxEntries, "max-entries", 16, "most entries in one descriptor")
	fs.StringVar(&c.TokenFile, "token-file", "", "`file` of name:token lines, the bearer tokens that may change rules through the API (none: writes are off)")
	fs.DurationVar(&c.RulesPoll, "rules-poll", time.Second, "how often to check the version of the rules set through the API, bounding how late a missed change takes effect")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take to finish at shutdown")
	fs.DurationVar(&c.HeartbeatTTL, "heartbeat-ttl", 15*time.Second, "how long an instance stays in the registry of the instances sharing its Redis (GET /v1/instances) after its last heartbeat; it beats every third of it")
	fs.StringVar(&c.Prefix, "key-prefix", DefaultPrefix, "`prefix` of serve's own keys in Redis (registry, rules set through the API); keep one {hash tag} for Redis Cluster")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "certificate `file` (PEM, chain first): with --tls-key, both ports serve TLS only; read again when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", "", "private key `file` (PEM) of --tls-cert")
	fs.Var(notFlag{&c.NoMetrics}, "metrics", "serve Prometheus metrics on GET /metrics of the HTTP port (--metrics=false turns them off)")
	fs.BoolVar(&c.Dashboard, "dashboard", false, "serve the web dashboard at /dashboard/ on the HTTP port")
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "the Go garbage collector's target `percent` (GOGC) while serving: higher spends memory to save CPU per decision; 0 keeps the runtime's; $GOGC, when set, wins")
	fs.Var(notFlag{&c.NoTraffic}, "traffic", "count the traffic per policy in Redis for GET /v1/traffic and the dashboard (--traffic=false turns it off)")
	fs.Var(notFlag{&c.NoTrafficKeys}, "traffic-keys", "with --traffic, also count each policy's hottest keys (GET /v1/traffic/top, the dashboard); --traffic-keys=false keeps keys that are personal data (addresses, user ids) out of Redis and the dashboard")
}

// notFlag is a boolean flag that sets the opposite of its value in p.
type notFlag struct{ p *bool }

// String is "false" for the zero notFlag: the flag package prints a
// default only where it differs from the zero value's, and these are on
// by default ("(default true)" in --help).
func (f notFlag) String() string {
	if f.p == nil {
		return "false"
	}
	return strconv.FormatBool(!*f.p)
}

func (f notFlag) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*f.p = !b
	return nil
}

func (f notFlag) IsBoolFlag() bool { return true }

// ApplyEnv sets every flag of fs not given on the command line (call it
// after fs.Parse) from its environment variable, EnvPrefix and the
// flag's name in capitals with '-' as '_', read through getenv; an empty
// variable counts as unset. A flag on the command line wins.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s: %w", name, serr)
			}
		}
	})
	return err
}

// EnvName is the environment variable of the flag named flagName.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
