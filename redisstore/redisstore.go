// Package redisstore keeps limiters in Redis, so that every process using the
// same Redis shares their limits. It takes any go-redis v9 UniversalClient:
// one server, Sentinel (a failover client) or Cluster.
//
// Each call is one round trip: Lua (embedded from scripts/*.lua) that reads
// the time from Redis itself, so clients whose clocks disagree still share
// one timeline. The limiter's Lua runs as a function on Redis 7+ (loaded by
// the store on first use and again whenever Redis lost it; FCALL), else as a
// script (EVALSHA, falling back to EVAL when Redis lost its script cache).
// Both write, so they always run on the primary.
//
// Keys: PREFIX{name}, a small hash holding the config and the Overall state,
// which persists until Delete or Expire; PREFIX{name}:log, the Overall
// sliding-log list; PREFIX{name}:client:CLIENT and PREFIX{name}:log:CLIENT
// (PerClient). Keys that hold only state expire on their own once idle long
// enough that forgetting them changes no answer.
//
// Keyed policies (redlimit.Policy; policy.go): PREFIX{POLICY}:policy holds
// a policy's limits, the only key of a policy without a TTL; each key's
// state is one string, PREFIX{POLICY%:KEY}, that expires once it can no
// longer change an answer, and whose hash tag holds the key, so a policy's
// keys spread over a Cluster's slots. A keyed call is one script run that
// carries the policy as the client knows it; clients learn of a change by
// pub/sub, at the latest after WithPolicyMaxAge, and at once on a key
// whose state was written under a newer version. Close ends the
// subscription.
//
// Time is Redis TIME to the microsecond: the fixed window, the sliding
// counter and the buckets keep their state in µs (the sliding log in ms, an
// entry per ms). Their state carries a mark of that encoding: state written
// in ms by an earlier redlimit is read as gone, as a reset would leave it,
// never misread; configs are stored as before (the interval in whole ms).
//
// Calls made while others are in flight go together: those on one limiter
// share one load and save of its state, and on one server (not a Cluster)
// those on different limiters share one script run. Keyed calls do the
// same (keyedbatch.go): on one server the calls of any keys share a run;
// on a Cluster a run of several keys is one pipeline, a command per key,
// one round trip to each primary.
//
// A caller that gives up (its context ends) while its call is in flight
// gets its context's error at once, wrapped in redlimit.ErrUnavailable;
// the call itself is seen through in the background, and if Redis granted
// it, the store hands the grant back (Stats: Abandoned, HandedBack). A
// hand-back (Cancel, Release) whose caller stops waiting while it is
// queued behind a busy limiter's runs is still made, in its turn: the
// limiter's own hand-back of a reservation is bounded in time, and
// thousands of waiters giving up at once queue that long. With a
// client that stops at a context's deadline itself (ContextTimeoutEnabled)
// a reply cut off that way never arrives: the reservation then holds its
// permits at most until the caller's deadline, which bounded how far ahead
// it could be booked (redlimit.WithMaxWait bounds it without a deadline).
package redisstore

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redisclient"
	"github.com/redlimit/redlimit/internal/rediserr"
	"github.com/redlimit/redlimit/refusalcache"
)

var (
	// limiterLua is the limiter library: its files (limiterFiles) joined
	// into the one chunk that one FCALL or EVAL runs.
	limiterLua    = joinScripts(limiterFiles()...)
	limiterScript = redis.NewScript(limiterLua + "\nreturn main(KEYS, ARGV)\n")
	// limiterLoneScript runs the library's lone: one acquire on an
	// Overall limiter, in fewer arguments (runLone).
	limiterLoneScript = redis.NewScript(limiterLua + "\nreturn lone(KEYS, ARGV)\n")
	// limiterFunction names the library and the function limiterLua is
	// loaded as on Redis 7+ (FUNCTION LOAD): its definitions are made once
	// there, not on every run. The name carries the library's hash, so that
	// versions of redlimit sharing one Redis each call their own.
	limiterFunction = fmt.Sprintf("redlimit_%x", sha1.Sum([]byte(limiterLua)))[:21]
	limiterLibrary  = "#!lua name=" + limiterFunction + "\n" + limiterLua +
		"\nredis.register_function('" + limiterFunction + "', main)\n" +
		"redis.register_function('" + limiterFunction + "_p', policy_main)\n" +
		"redis.register_function('" + limiterFunction + "_b', policy_batch)\n" +
		"redis.register_function('" + limiterFunction + "_1', lone)\n"

	configLua    = mustRead("config.lua")
	configScript = redis.NewScript(configLua)

	setConfigLua    = mustRead("setconfig.lua")
	setConfigScript = redis.NewScript(setConfigLua)
)

// Store is a redlimit.Store on Redis. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	clock  clock.Clock // nil: Redis TIME
	// bounded: the client itself stops waiting at the context's deadline
	// (go-redis's ContextTimeoutEnabled); otherwise the store does.
	bounded bool
	// acks replicas must confirm each change within ackTimeout (WAIT).
	acks       int
	ackTimeout time.Duration
	// scripts run through this: rdb, or its auto-pipeliner.
	scripter redis.Scripter
	autoPipe bool
	// batch makes the calls on limiters in shared script runs (batch.go;
	// nil: WithoutBatching, each call is a run of its own).
	batch      *batcher
	noBatching bool
	// cache answers calls on exhausted limiters locally (refusals.go);
	// nil when refusalTTL is not positive.
	cache      *refusalcache.Store
	refusalTTL time.Duration
	calls      counter
	runs       counter
	lastArg    atomic.Pointer[encodedConfig] // see encoded
	lastKeys   atomic.Pointer[lastKeySet]    // see keySetOf
	// functionsOff: until then (unix ns) the Lua library runs as a script: this
	// Redis could not run it as a function (before 7.0, an ACL without FCALL
	// or FUNCTION LOAD, a proxy that does not pass them). Tried again later.
	functionsOff atomic.Int64
	// allowRetries: New accepts a client that retries commands.
	allowRetries bool
	// dials ends the calls in flight when Redis refuses a connection
	// (refused.go).
	dials dialSignals
	// hb counts the calls abandoned by their callers and sees them through
	// (handback.go).
	hb handBackStats
	// pol caches keyed policies (policy.go).
	pol policyCache
	// runSizes counts the runs of 2 calls or more, by size (Stats.RunSizes
	// from its second bucket on).
	runSizes [RunSizeBuckets - 1]atomic.Int64
	// runCalls is the calls the runs carried (Stats.RunCalls).
	runCalls counter
	// keyBatch makes keyed calls in shared runs (keyedbatch.go; nil:
	// WithoutBatching); keyRuns and keyRunCalls count the runs of keyed
	// calls and the calls they carried (Stats).
	keyBatch             *keyBatcher
	keyRuns, keyRunCalls counter
	// keyNodes, on a Cluster, puts each primary's keys in a batcher of
	// their own (keyedbatch.go).
	keyNodes keyNodes
}

var _ redlimit.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the prefix of every key (default "redlimit:"). It must not
// contain '{' or '}', which would change the keys' Cluster hash slot.
func WithPrefix(p string) Option {
	return func(s *Store) error {
		if strings.ContainsAny(p, "{}") || len(p) > 256 {
			return &redlimit.ArgumentError{Arg: "prefix", Value: p, Reason: "must be at most 256 bytes without '{' or '}'", Kind: redlimit.ErrInvalidArgument}
		}
		s.prefix = p
		return nil
	}
}

// WithTimeSource makes the scripts use c's time instead of Redis TIME. It exists
// for tests (and for sharing a timeline with a store that has no clock of
// its own); keys then expire a minute later than the times computed with c,
// since Redis expires them by its own clock.
func WithTimeSource(c clock.Clock) Option {
	return func(s *Store) error { s.clock = c; return nil }
}

// WithReplicaAck makes every change wait (Redis WAIT, in the same round
// trip) until replicas replicas hold it, at most timeout. A change they do
// not confirm in time is reported as ErrUnavailable, never as a grant: so a
// failover to a replica that confirmed loses no grant the callers acted on
// (Redis replicates asynchronously, and without this a failover can forget
// up to one full allowance of grants: the rate, or a token bucket's
// burst). It costs the replication latency per call.
//
// Ask for every replica the primary has. With fewer, a failover that
// leaves the old primary up (SENTINEL FAILOVER) can still lose the grants
// a replica that was not promoted acknowledged before Sentinel moved it.
// With every replica, the new primary grants again only once it has that
// many replicas: with one replica, when Sentinel has turned the old
// primary into its replica, which Sentinel does about ten seconds after
// the promotion (its own delays, not configurable).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(s *Store) error {
		if replicas < 1 || timeout < time.Millisecond {
			return &redlimit.ArgumentError{Arg: "replica ack", Value: fmt.Sprint(replicas, " ", timeout), Reason: "needs at least 1 replica and 1ms", Kind: redlimit.ErrInvalidArgument}
		}
		s.acks, s.ackTimeout = replicas, timeout
		return nil
	}
}

// WithAutoPipeline batches the scripts of concurrent calls into pipelines
// (go-redis's AutoPipeline): one round trip carries many decisions, so a
// busy process makes many more decisions per second for the same Redis
// work. A lone call still takes one round trip. It needs a *redis.Client
// (Sentinel's failover client is one) or a *redis.ClusterClient. Calls keep
// their context deadlines (the store enforces them).
func WithAutoPipeline() Option {
	return func(s *Store) error { s.autoPipe = true; return nil }
}

// WithoutBatching turns batching off: every call is a script run of its
// own. By default, calls on one limiter (one log) made while another is in
// flight go together in the next script run, which loads and saves the
// state once for all of them, so a busy limiter makes many decisions for
// the Redis work of one (token bucket, 64 callers, 2 cores: 60k -> 330k
// decisions/s). Calls keep their order, and their decisions are those of
// the same calls made one by one at the run's instant (TestBatchDifferential);
// a lone call goes at once, with no delay.
func WithoutBatching() Option {
	return func(s *Store) error { s.noBatching = true; return nil }
}

// ErrUnsafeClient: New was given a go-redis client that retries commands
// (MaxRetries other than -1 on a *redis.Client, which go-redis defaults to
// 3 retries; above 0 on a ClusterClient or a Ring). A limiter script whose
// reply is lost to a network error or a timeout may have run; sent again,
// it grants the same permits twice. It is also a redlimit.ErrInvalidArgument.
// Set MaxRetries: -1 (OpenURL does), or pass AllowRetries.
var ErrUnsafeClient = redisclient.ErrUnsafe

// AllowRetries makes New accept a client that retries commands, for a
// caller who accepts that a retried call may grant twice (see
// ErrUnsafeClient).
func AllowRetries() Option {
	return func(s *Store) error { s.allowRetries = true; return nil }
}

// New returns a store on rdb. It refuses a client that retries commands
// (ErrUnsafeClient) unless AllowRetries is given: build it with MaxRetries:
// -1, and a ClusterClient with MaxRedirects: -1 too (go-redis resends a
// command after a lost reply within its redirect budget). The store itself
// resends a script the Cluster turned down without running it (MOVED,
// ASK, TRYAGAIN, CLUSTERDOWN), up to five times within the call's context.
// Clients other than go-redis's Client, ClusterClient and Ring cannot be
// inspected and are accepted as they are. On a *redis.Client (one
// server, or Sentinel's failover client) it adds a dial hook to rdb: when
// Redis refuses a connection, the store's calls in flight fail at once with
// ErrUnavailable instead of waiting while go-redis dials again until their
// deadline. The hook changes nothing else the client does.
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	if rdb == nil {
		return nil, &redlimit.ArgumentError{Arg: "redis client", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	s := &Store{rdb: rdb, prefix: DefaultPrefix, refusalTTL: DefaultRefusalCache}
	s.pol.maxAge = DefaultPolicyMaxAge
	switch c := rdb.(type) {
	case *redis.Client:
		s.bounded = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		s.bounded = c.Options().ContextTimeoutEnabled
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if !s.allowRetries {
		if err := redisclient.Check(rdb, "redisstore.AllowRetries()"); err != nil {
			return nil, err
		}
	}
	s.hookRefusals(rdb)
	s.scripter = rdb
	if s.refusalTTL > 0 {
		s.cache, _ = refusalcache.New((*direct)(s), refusalcache.Settings{MaxStale: s.refusalTTL, Clock: s.clock})
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok && !s.autoPipe {
		// MOVED, ASK, TRYAGAIN and CLUSTERDOWN are followed here, as
		// the client, built with MaxRedirects -1, resends nothing.
		s.scripter = redisclient.NewRedirecting(cc, func(ctx context.Context, node *redis.Client) error {
			return node.FunctionLoadReplace(ctx, limiterLibrary).Err()
		})
	}
	if s.autoPipe {
		var ap *redis.AutoPipeliner
		var err error
		switch c := rdb.(type) {
		case *redis.Client:
			ap, err = c.AutoPipeline()
		case *redis.ClusterClient:
			ap, err = c.AutoPipeline()
		default:
			err = fmt.Errorf("auto-pipelining needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
		}
		if err != nil {
			return nil, &redlimit.ArgumentError{Arg: "redis client", Reason: err.Error(), Kind: redlimit.ErrInvalidArgument}
		}
		s.scripter, s.bounded = ap, false // queued commands ignore their contexts
	}
	if !s.noBatching {
		s.batch = s.newBatcher()
		s.keyBatch = s.newKeyBatcher()
	}
	return s, nil
}

// within runs f, failing at once if Redis refuses the connection
// (refused.go) and returning at ctx's end at the latest: a go-redis client
// without ContextTimeoutEnabled waits for a stalled server as long as its
// ReadTimeout (and retries), whatever the context says. A call abandoned
// that way may still be carried out by Redis; the limiter's calls are seen
// through (guarded, evalLimiter: what they were granted is handed back),
// the others' outcome is lost (never a permit granted twice).
func within[T any](s *Store, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return withinThen(s, ctx, f, nil)
}

// withinThen is within, with what to do if the caller leaves first
// (guarded).
func withinThen[T any](s *Store, ctx context.Context, f func(context.Context) (T, error), abandon func() func(T, error)) (T, error) {
	r := s.failFast(ctx)
	v, err := guarded(r, f, abandon)
	return v, r.done(err)
}

// mustGuard: a call within ctx needs within to return at ctx's end.
func (s *Store) mustGuard(ctx context.Context) bool {
	return !s.bounded && ctx.Done() != nil
}

// eval runs a script within ctx; a script that writes waits for the
// replicas' acknowledgement when WithReplicaAck asks for it.
func (s *Store) eval(ctx context.Context, sc *redis.Script, writes bool, keys []string, args ...any) (any, error) {
	return s.evalThen(ctx, sc, writes, nil, keys, args...)
}

// evalThen is eval, with what to do if the caller leaves first (guarded).
func (s *Store) evalThen(ctx context.Context, sc *redis.Script, writes bool, abandon func() func(any, error), keys []string, args ...any) (any, error) {
	return withinThen(s, ctx, func(ctx context.Context) (any, error) {
		if s.acks == 0 || !writes {
			return sc.Run(ctx, s.scripter, keys, args...).Result()
		}
		return s.evalAcked(ctx, sc, keys, args)
	}, abandon)
}

// doer sends a command built by hand: the clients and the auto-pipeliner.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// limiterCall is a run of the Lua library: the whole FCALL command, laid out as
// "FCALL name numkeys keys... args..." so that it is built once, not copied
// by the client; keys and args are views into it for the script fallback.
type limiterCall struct {
	cmd  []any
	keys []string
	args []any
	// lone: the call is the library's lone function (runLone), not main
	lone bool
}

var fcallName, limiterFunctionName, loneFunctionName any = "fcall", limiterFunction, limiterFunction + "_1"

// script is the script that does what c's FCALL does.
func (c *limiterCall) script() *redis.Script {
	if c.lone {
		return limiterLoneScript
	}
	return limiterScript
}

// evalLimiter runs the Lua library: as a function where Redis has it (loaded on
// first use, and again after Redis lost it), else as a script. A caller
// that leaves before the reply leaves the works' calls to the store, which
// hands back what they were granted (abandonRun).
func (s *Store) evalLimiter(ctx context.Context, writes bool, c *limiterCall, works []*work) (any, error) {
	d, ok := s.scripter.(doer)
	var abandon func() func(any, error)
	if s.mustGuard(ctx) {
		abandon = func() func(any, error) { return s.abandonRun(works) }
	}
	if off := s.functionsOff.Load(); !ok || off != 0 && time.Now().UnixNano() < off || (s.acks > 0 && writes) {
		return s.evalThen(ctx, c.script(), writes, abandon, c.keys, c.args...)
	}
	r := s.failFast(ctx)
	if r.watch == nil {
		// The client keeps to ctx (or it has no end: a run in the
		// background): no closure to allocate.
		v, err := s.fcall(r.ctx, d, c)
		return v, r.done(err)
	}
	v, err := guarded(r, func(ctx context.Context) (any, error) { return s.fcall(ctx, d, c) }, abandon)
	return v, r.done(err)
}

// fcall runs the Lua library as a function, loading the library when Redis
// lacks it, and as a script when Redis refuses functions.
func (s *Store) fcall(ctx context.Context, d doer, c *limiterCall) (any, error) {
	r, err := d.Do(ctx, c.cmd...).Result()
	if err == nil || !functionMissing(err) && !functionsRefused(err) {
		return r, err
	}
	if functionMissing(err) {
		err = s.loadLibrary(ctx, c.keys[0])
		if err == nil {
			return d.Do(ctx, c.cmd...).Result()
		}
		// A loss of the connection is the caller's error; any answer
		// of Redis refusing the library sends us to the script.
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return nil, err
		}
	}
	s.functionsOff.Store(time.Now().Add(functionsRetry).UnixNano())
	return c.script().Run(ctx, s.scripter, c.keys, c.args...).Result()
}

// functionsRetry is how long the Lua library runs as a script after Redis could
// not run it as a function, before functions are tried again.
const functionsRetry = time.Minute

// loadLibrary loads the Lua library as a function library on the primary that
// serves key.
func (s *Store) loadLibrary(ctx context.Context, key string) error {
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = n
	}
	return node.FunctionLoadReplace(ctx, limiterLibrary).Err()
}

// functionMissing: Redis does not have the function (never loaded, or lost
// by a restart or FUNCTION FLUSH).
func functionMissing(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "Function not found")
}

// functionsRefused: this Redis cannot run functions for us (too old, or the
// ACL forbids FCALL or FUNCTION LOAD).
func functionsRefused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "NOPERM")
}

// evalAcked sends the script and WAIT in one pipeline on the connection to
// the keys' primary.
func (s *Store) evalAcked(ctx context.Context, sc *redis.Script, keys []string, args []any) (any, error) {
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = n
	}
	run := func(withSource bool) (*redis.Cmd, *redis.Cmd, error) {
		var script, wait *redis.Cmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if withSource {
				script = sc.Eval(ctx, p, keys, args...)
			} else {
				script = sc.EvalSha(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "WAIT", s.acks, s.ackTimeout.Milliseconds())
			return nil
		})
		return script, wait, err
	}
	script, wait, err := run(false)
	if err != nil && redis.HasErrorPrefix(script.Err(), "NOSCRIPT") {
		script, wait, err = run(true)
	}
	if err != nil {
		return nil, err
	}
	if got, _ := wait.Int64(); got < int64(s.acks) {
		return nil, fmt.Errorf("%w: %d of %d replicas confirmed the change within %v", redlimit.ErrUnavailable, got, s.acks, s.ackTimeout)
	}
	return script.Result()
}

// Client returns the Redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) nowArg() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
}

// configArg is cfg as the Lua library stores it, "algorithm mode rate interval
// epoch burst capacity" (interval in ms); "" when it is unknown.
func configArg(cfg redlimit.Config) string {
	if cfg.Rate == 0 {
		return ""
	}
	b := make([]byte, 0, 80)
	b = append(b, cfg.Algorithm...)
	b = append(b, ' ')
	b = append(b, cfg.Mode.String()...)
	for _, v := range [...]int64{cfg.Rate, cfg.Interval.Milliseconds(), cfg.Epoch, cfg.Burst, cfg.Capacity} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// encodedConfig is a config a client sent and its configArg. Replies that
// find this config stored point to it, so it is never changed once made.
type encodedConfig struct {
	cfg redlimit.Config
	arg any
}

func encode(cfg redlimit.Config) *encodedConfig {
	return &encodedConfig{cfg: cfg, arg: configArg(cfg)}
}

// encoded is cfg encoded, kept for the config encoded last: callers of one
// limiter send the same config on every call.
func (s *Store) encoded(cfg redlimit.Config) *encodedConfig {
	if e := s.lastArg.Load(); e != nil && e.cfg.Equal(&cfg) {
		return e
	}
	e := encode(cfg)
	s.lastArg.Store(e)
	return e
}

// setConfig is SetConfig without the refusal cache.
func (s *Store) setConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, false, err
	}
	c, err := cfg.Normalize()
	if err != nil {
		return redlimit.Config{}, false, err
	}
	if err := how.Validate(); err != nil {
		return redlimit.Config{}, false, err
	}
	h := how.String()
	k := limiterKeys(s.prefix, name)
	c = c.WithNewEpoch()
	raw, err := s.eval(ctx, setConfigScript, true, []string{k.limiter, k.log}, h, configArg(c), s.nowArg())
	if err != nil {
		return redlimit.Config{}, false, wrap(err)
	}
	r, err := asArray(raw, 2)
	if err != nil {
		return redlimit.Config{}, false, err
	}
	stored, err := decodeConfig(r[1])
	if err != nil {
		return redlimit.Config{}, false, err
	}
	if spec := algorithm.Lookup(string(stored.Algorithm)); how == redlimit.SetKeepState && r[0] == int64(1) &&
		stored.Mode == redlimit.Overall && spec != nil && spec.Since {
		// An Overall state that counts time at the config it was last
		// changed under (Spec.Since: the buckets), up to the instant a new
		// one took effect: bring it to the change now (a release of
		// nothing), so that another change before any call does not lose
		// this one. Best effort: the next call does the same.
		_, _ = s.runOne(ctx, redlimit.Key{Name: name, Client: "set-rate"}, encode(stored), call{op: opRelease})
	}
	if how == redlimit.SetResetState {
		// A fresh start for every client, those whose keys hold foreign
		// data included (foreign.go).
		if err := s.clearForeignIn(ctx, name); err != nil {
			return redlimit.Config{}, false, wrap(err)
		}
	}
	return stored, r[0] == int64(1), nil
}

// Config implements redlimit.Store.
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, err
	}
	raw, err := s.eval(ctx, configScript, false, []string{limiterKeys(s.prefix, name).limiter})
	if errors.Is(err, redis.Nil) {
		return redlimit.Config{}, redlimit.ErrNotInitialized
	}
	if err != nil {
		return redlimit.Config{}, wrap(err)
	}
	return decodeConfig(raw)
}

// reply is the Lua library's answer; wait and now are in µs. code: 1 granted (or
// done), 0 refused, 2 refused by a full leaky-bucket queue, -2 more permits
// than grantable.
type reply struct {
	code, value, wait, now int64
	// cfg is the stored config, shared by the replies of one work.
	cfg *redlimit.Config
}

// at is when a grant is made: now + wait.
func (r reply) at() int64 { return r.now + r.wait }

func (s *Store) run(ctx context.Context, key redlimit.Key, known redlimit.Config, o op, n int64, arg3 int64) (reply, error) {
	if err := key.Validate(); err != nil {
		return reply{}, err
	}
	if known.Rate != 0 {
		var err error
		if known, err = known.Normalize(); err != nil {
			return reply{}, err
		}
	}
	c := call{op: o, n: n, arg: arg3}
	s.calls.Add(1)
	kc := s.encoded(known)
	var out reply
	var err error
	if s.batch != nil {
		out, err = s.batched(ctx, key, kc, c)
	} else {
		out, err = s.runOne(ctx, key, kc, c)
	}
	if err != nil {
		return reply{}, err
	}
	if out.code == -2 {
		return reply{}, out.cfg.ValidatePermits(n)
	}
	return out, nil
}

// acquire is Acquire without the refusal cache.
func (s *Store) acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	if err := (redlimit.Config{}).ValidatePermits(n); err != nil {
		return redlimit.Decision{}, err
	}
	wait := int64(-1)
	if maxWait >= 0 {
		wait = maxWait.Microseconds()
	}
	r, err := s.run(ctx, key, known, opAcquire, n, wait)
	if err != nil {
		return redlimit.Decision{}, err
	}
	d := redlimit.Decision{Granted: r.code == 1, Remaining: r.value, Wait: time.Duration(r.wait) * time.Microsecond, Now: time.UnixMicro(r.now), Config: *r.cfg, Full: r.code == 2}
	if d.Granted {
		d.At = time.UnixMicro(r.at())
	}
	return d, nil
}

// cancel is Cancel without the refusal cache.
func (s *Store) cancel(ctx context.Context, key redlimit.Key, known redlimit.Config, at time.Time, n int64) (int64, error) {
	if n <= 0 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	r, err := s.run(ctx, key, known, opCancel, n, at.UnixMicro())
	return r.value, err
}

// release is Release without the refusal cache.
func (s *Store) release(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, upTo time.Time) (int64, error) {
	if n <= 0 {
		return 0, (redlimit.Config{}).ValidatePermits(n)
	}
	bound := int64(-1) // no bound
	if !upTo.IsZero() {
		bound = max(upTo.UnixMicro(), 0)
	}
	r, err := s.run(ctx, key, known, opRelease, n, bound)
	return r.value, err
}

// Available implements redlimit.Store.
func (s *Store) Available(ctx context.Context, key redlimit.Key, known redlimit.Config) (int64, redlimit.Config, error) {
	r, err := s.run(ctx, key, known, opAvailable, 0, 0)
	if err != nil {
		return 0, redlimit.Config{}, err
	}
	return r.value, *r.cfg, nil
}

// delete is Delete without the refusal cache.
func (s *Store) delete(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	k := limiterKeys(s.prefix, name)
	existed, err := within(s, ctx, func(ctx context.Context) (bool, error) {
		var exists *redis.IntCmd
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			exists = p.Exists(ctx, k.limiter)
			p.Del(ctx, k.limiter, k.log)
			return nil
		})
		return err == nil && exists.Val() == 1, err
	})
	if err == nil {
		err = s.clearForeignIn(ctx, name)
	}
	if err != nil {
		return false, wrap(err)
	}
	return existed, nil
}

// expire is Expire without the refusal cache.
func (s *Store) expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateTTL(ttl); err != nil {
		return false, err
	}
	ok, err := within(s, ctx, func(ctx context.Context) (bool, error) {
		return s.rdb.PExpire(ctx, limiterKeys(s.prefix, name).limiter, ttl).Result()
	})
	if err != nil {
		return false, wrap(err)
	}
	return ok, nil
}

// clearExpire is ClearExpire without the refusal cache.
func (s *Store) clearExpire(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	ok, err := within(s, ctx, func(ctx context.Context) (bool, error) {
		return s.rdb.Persist(ctx, limiterKeys(s.prefix, name).limiter).Result()
	})
	if err != nil {
		return false, wrap(err)
	}
	return ok, nil
}

// wrap gives a Redis error its redlimit meaning (internal/rediserr),
// keeping the cause.
func wrap(err error) error { return rediserr.Wrap(err) }

// asArray checks that raw is an array of at least min elements.
func asArray(raw any, min int) ([]any, error) {
	r, ok := raw.([]any)
	if !ok || len(r) < min {
		return nil, fmt.Errorf("%w: unexpected script reply %T", redlimit.ErrCorrupt, raw)
	}
	return r, nil
}

// decodeConfig reads a config as the Lua library stores it, "algorithm mode
// rate interval epoch burst capacity" exactly, and checks it.
func decodeConfig(raw any) (redlimit.Config, error) {
	text, ok := raw.(string)
	if !ok {
		return redlimit.Config{}, fmt.Errorf("%w: config is %T", redlimit.ErrCorrupt, raw)
	}
	f := strings.Split(text, " ")
	if len(f) != 7 {
		return redlimit.Config{}, fmt.Errorf("%w: config %q", redlimit.ErrCorrupt, text)
	}
	mode, err := redlimit.ParseMode(f[1])
	if err != nil {
		return redlimit.Config{}, fmt.Errorf("%w: mode %q", redlimit.ErrCorrupt, f[1])
	}
	var nums [5]int64
	for i := range nums {
		if nums[i], err = strconv.ParseInt(f[i+2], 10, 64); err != nil {
			return redlimit.Config{}, fmt.Errorf("%w: config %q", redlimit.ErrCorrupt, text)
		}
	}
	rate, interval, epoch, burst, capacity := nums[0], nums[1], nums[2], nums[3], nums[4]
	if interval < 0 || interval > int64(algorithm.MaxInterval/time.Millisecond) {
		return redlimit.Config{}, fmt.Errorf("%w: interval %d ms", redlimit.ErrCorrupt, interval)
	}
	c := redlimit.Config{Algorithm: redlimit.Algorithm(f[0]), Mode: mode, Rate: rate, Interval: time.Duration(interval) * time.Millisecond, Epoch: epoch, Burst: burst, Capacity: capacity}
	if _, err := c.Normalize(); err != nil {
		return redlimit.Config{}, fmt.Errorf("%w: %w", redlimit.ErrCorrupt, err)
	}
	// Only the form redlimit writes: the Lua library compares configs as
	// strings, and anything else was written by someone else.
	if configArg(c) != text {
		return redlimit.Config{}, fmt.Errorf("%w: config %q", redlimit.ErrCorrupt, text)
	}
	return c, nil
}
