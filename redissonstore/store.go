// Package redissonstore is a redlimit.Store that keeps its limiters in the
// keys and encodings of Redisson's RRateLimiter (Java), so that a Go service
// and a Java service using Redisson share one limit on one Redis.
//
//	store, _ := redissonstore.New(rdb, redissonstore.WithLayout(redissonstore.Current))
//	l, _ := redlimit.New(store, "myRateLimiter") // the name Java passes to getRateLimiter
//	r, err := l.TryAcquire(ctx, 1)
//
// The keys are Redisson's: the hash NAME (rate, interval, type and, in the
// current layout, keepAliveTime), the counter {NAME}:value and the sorted
// set {NAME}:permits with one member per grant (PER_CLIENT: :value:<id> and
// :permits:<id>). A name that already holds a '{' is used as Redisson uses
// it: NAME:value, NAME:permits. Two layouts exist (see Layout): pick the one
// of the Redisson version the Java side runs.
//
// What sharing costs, compared with package redisstore:
//
//   - Time is the caller's clock (Redisson passes System.currentTimeMillis()
//     to its scripts): clients whose clocks disagree disagree on the window.
//     WithTimeSource injects the clock (tests pass a *clock.Fake).
//   - Waiting polls as Redisson does: try, sleep the delay the script
//     returned, try again. Nothing is reserved, so waiters are not served in
//     order, and a bounded wait may end refused after sleeping.
//   - One sorted-set member per grant: memory grows with the rate.
//   - Only the sliding log (redlimit.SlidingLog) can be expressed.
//
// Every error is typed (redlimit.ErrInvalidArgument, ErrPermitsExceedRate,
// ErrNotInitialized, ErrCorrupt, ErrUnavailable); the scripts never raise a
// Lua error. Inspect decodes a limiter for people; Migrate moves one to a
// native redisstore limiter. docs/redisson.md is the guide.
package redissonstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redisclient"
	"github.com/redlimit/redlimit/internal/rediserr"
)

// Layout is the generation of Redisson's data a store reads and writes.
type Layout int

const (
	// Current is the layout of Redisson since late 3.16.x, through the 3.2x
	// and 3.3x series to 4.x: members are struct 'Bc0I' (a length byte, the
	// random bytes, the permits as a 4-byte unsigned int), a refused request
	// is told to wait 3 + interval - (now - oldest grant) ms, a counter that
	// would exceed rate is recounted from the log, and the state keys take
	// the config hash's TTL on every acquire. Since late 2024 the hash may
	// also carry keepAliveTime, which then renews every key's TTL instead.
	Current Layout = iota
	// Legacy is the layout of Redisson up to 3.16.x, the one an article
	// quotes: members are struct 'fI' (the random long as a 4-byte float,
	// the permits as a 4-byte unsigned int), a refused request is told to
	// wait until the nearest grant in the window ages out, and nothing
	// expires unless expire() is called.
	Legacy
)

// String returns "current" or "legacy".
func (l Layout) String() string {
	switch l {
	case Current:
		return "current"
	case Legacy:
		return "legacy"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// ParseLayout reads "current" or "legacy".
func ParseLayout(s string) (Layout, error) {
	switch strings.ToLower(s) {
	case "current":
		return Current, nil
	case "legacy":
		return Legacy, nil
	}
	return 0, &redlimit.ArgumentError{Arg: "layout", Value: s, Reason: `must be "current" or "legacy"`, Kind: redlimit.ErrInvalidArgument}
}

// MaxPermits is the most permits one grant can record: Redisson packs them
// into a 4-byte unsigned int.
const MaxPermits int64 = 1<<32 - 1

var (
	//go:embed scripts/lib.lua
	libLua string
	//go:embed scripts/tryacquire.lua
	tryAcquireLua string
	//go:embed scripts/available.lua
	availableLua string
	//go:embed scripts/giveback.lua
	giveBackLua string
	//go:embed scripts/setrate.lua
	setRateLua string

	tryAcquireScript = redis.NewScript(libLua + tryAcquireLua)
	availableScript  = redis.NewScript(libLua + availableLua)
	giveBackScript   = redis.NewScript(libLua + giveBackLua)
	setRateScript    = redis.NewScript(libLua + setRateLua)
)

// Store is a redlimit.Store on Redisson's RRateLimiter data. It is safe for
// concurrent use.
type Store struct {
	rdb redis.UniversalClient
	// scripter runs the scripts: rdb, or on a Cluster rdb following MOVED,
	// ASK, TRYAGAIN and CLUSTERDOWN itself (it is built to resend nothing).
	scripter  redis.Scripter
	layout    Layout
	clock     clock.Clock
	clientID  string        // "" : each Key.Client is a client of its own
	keepAlive time.Duration // current layout: keepAliveTime written with configs
	// allowRetries: New accepts a client that retries commands.
	allowRetries bool

	// hook, when set (tests), sees every script decision of Acquire.
	hook func(attempt)
}

// attempt is one tryAcquire script run inside Acquire.
type attempt struct {
	granted bool
	delay   time.Duration
	now     time.Time
}

var _ redlimit.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store) error

// WithLayout sets the layout (default Current).
func WithLayout(l Layout) Option {
	return func(s *Store) error {
		if l != Current && l != Legacy {
			return &redlimit.ArgumentError{Arg: "layout", Value: l.String(), Reason: "unknown", Kind: redlimit.ErrInvalidArgument}
		}
		s.layout = l
		return nil
	}
}

// WithTimeSource sets the clock whose time the scripts use, as Redisson uses
// System.currentTimeMillis(), and on which waits sleep. The default is
// clock.Real. Every client of a limiter, Java or Go, must agree on the time:
// a client whose clock runs ahead sees grants age out early and takes permits
// the others still count as used.
func WithTimeSource(c clock.Clock) Option {
	return func(s *Store) error {
		if c == nil {
			return &redlimit.ArgumentError{Arg: "clock", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
		}
		s.clock = c
		return nil
	}
}

// WithClientID makes the store act as one Redisson client with this id
// (Redisson's PER_CLIENT keys are {name}:value:<id> and {name}:permits:<id>,
// the id being the RedissonClient's). Every Limiter on the store then shares
// that client's PER_CLIENT limit, as every RRateLimiter of one RedissonClient
// does, and the client ids of redlimit.Key are ignored; SetRate with
// ResetState and Delete also reach this client's keys. Without it each
// Key.Client (redlimit.WithClientID, or a random id per Limiter) is a client.
func WithClientID(id string) Option {
	return func(s *Store) error {
		if err := (redlimit.Key{Client: id}).ValidateClient(); err != nil {
			return err
		}
		s.clientID = id
		return nil
	}
}

// WithKeepAlive sets the keepAliveTime written with every config this store
// sets (Current layout only; Redisson reads it since late 2024): every acquire renews
// the TTL of the limiter's keys to it, so an idle limiter disappears after
// it. Zero (the default) means none. Like Redisson, a SetConfig refuses a
// keepAliveTime shorter than the interval.
func WithKeepAlive(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 || d%time.Millisecond != 0 {
			return &redlimit.ArgumentError{Arg: "keepAliveTime", Value: d.String(), Reason: "must be a non-negative whole number of milliseconds", Kind: redlimit.ErrInvalidArgument}
		}
		s.keepAlive = d
		return nil
	}
}

// AllowRetries makes New accept a client that retries commands, for a
// caller who accepts that a retried call may grant twice (see
// redisstore.ErrUnsafeClient).
func AllowRetries() Option {
	return func(s *Store) error { s.allowRetries = true; return nil }
}

// New returns a store on rdb. Like redisstore.New, it refuses a client that
// retries commands (an error matching redisstore.ErrUnsafeClient and
// redlimit.ErrInvalidArgument) unless AllowRetries is given: build it with
// MaxRetries: -1, and a ClusterClient with MaxRedirects: -1 too (the store
// follows MOVED and ASK itself, as redisstore does).
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	if rdb == nil {
		return nil, &redlimit.ArgumentError{Arg: "redis client", Reason: "must not be nil", Kind: redlimit.ErrInvalidArgument}
	}
	s := &Store{rdb: rdb, layout: Current, clock: clock.Real}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if !s.allowRetries {
		if err := redisclient.Check(rdb, "redissonstore.AllowRetries()"); err != nil {
			return nil, err
		}
	}
	s.scripter = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		s.scripter = redisclient.NewRedirecting(cc, nil)
	}
	if s.keepAlive != 0 && s.layout != Current {
		return nil, &redlimit.ArgumentError{Arg: "keepAliveTime", Value: s.keepAlive.String(), Reason: "exists in the current layout only", Kind: redlimit.ErrInvalidArgument}
	}
	return s, nil
}

// Layout returns the store's layout.
func (s *Store) Layout() Layout { return s.layout }

// Client returns the Redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// ClientID returns the id set by WithClientID, or "".
func (s *Store) ClientID() string { return s.clientID }

// Keys are the Redis keys of one Redisson rate limiter.
type Keys struct {
	Config, Value, Permits string
}

// KeysOf returns Redisson's keys for the limiter called name: the name
// itself for the config hash, and the name as a Cluster hash tag for the
// state ({name}:value, {name}:permits), unless the name already holds a '{',
// in which case Redisson appends to it as it is (name:value, name:permits).
func KeysOf(name string) Keys {
	return Keys{Config: name, Value: suffixName(name, "value"), Permits: suffixName(name, "permits")}
}

// ClientValue returns the PER_CLIENT counter key of client id.
func (k Keys) ClientValue(id string) string { return suffixName(k.Value, id) }

// ClientPermits returns the PER_CLIENT log key of client id.
func (k Keys) ClientPermits(id string) string { return suffixName(k.Permits, id) }

// suffixName is Redisson's rule for a derived key name.
func suffixName(name, suffix string) string {
	if strings.Contains(name, "{") {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// client returns the PER_CLIENT id the store uses for key.
func (s *Store) client(key redlimit.Key) string {
	if s.clientID != "" {
		return s.clientID
	}
	return key.Client
}

// scriptKeys lists the five KEYS every script takes, for client id (empty:
// no client known; the Overall keys stand in so all keys share one slot).
func scriptKeys(name, id string) []string {
	k := KeysOf(name)
	if id == "" {
		return []string{k.Config, k.Value, k.Value, k.Permits, k.Permits}
	}
	return []string{k.Config, k.Value, k.ClientValue(id), k.Permits, k.ClientPermits(id)}
}

func (s *Store) nowMillis() int64 { return s.clock.Now().UnixMilli() }

// knownArgs are the ARGV describing a config the caller knows, written when
// the store lost its own; empty when unknown or not expressible.
func (s *Store) knownArgs(known redlimit.Config) []any {
	c, err := known.Normalize()
	if known.Rate == 0 || err != nil || c.Algorithm != redlimit.SlidingLog || s.checkKeepAlive(c) != nil {
		return []any{"", "", "", ""}
	}
	return []any{c.Rate, c.Interval.Milliseconds(), typeArg(c.Mode), s.keepAlive.Milliseconds()}
}

func typeArg(m redlimit.Mode) string {
	if m == redlimit.PerClient {
		return "1"
	}
	return "0"
}

// checkKeepAlive applies Redisson's rule: keepAliveTime is 0 or at least
// the interval.
func (s *Store) checkKeepAlive(c redlimit.Config) error {
	if s.keepAlive != 0 && s.keepAlive < c.Interval {
		return &redlimit.ArgumentError{Arg: "keepAliveTime", Value: s.keepAlive.String(), Reason: "must be at least the interval " + c.Interval.String() + " (Redisson refuses shorter ones)", Kind: redlimit.ErrInvalidArgument}
	}
	return nil
}

// checkConfig says whether Redisson can hold cfg (already normalized).
func (s *Store) checkConfig(c redlimit.Config) error {
	if c.Algorithm != redlimit.SlidingLog {
		return &redlimit.ArgumentError{Arg: "algorithm", Value: string(c.Algorithm), Reason: "Redisson's RRateLimiter is a sliding log: only sliding-log can be stored", Kind: redlimit.ErrInvalidArgument}
	}
	return s.checkKeepAlive(c)
}

// randomParts returns four candidate random parts of a member: decimal
// longs (legacy, as Redisson's ThreadLocalRandom.nextLong) or 16 random
// bytes (current, as Redisson's generateIdArray).
func (s *Store) randomParts() []any {
	out := make([]any, 4)
	for i := range out {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if s.layout == Legacy {
			out[i] = strconv.FormatInt(int64(binary.LittleEndian.Uint64(b[:8])), 10)
		} else {
			out[i] = string(b[:])
		}
	}
	return out
}

// wrap gives a Redis error its redlimit meaning (internal/rediserr),
// keeping the cause.
func wrap(err error) error { return rediserr.Wrap(err) }

// toInt reads a reply element holding an integer (as a Redis integer or a
// decimal string).
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// scriptReply is a decoded reply {code, a[, b[, c]], rate, interval, type, keepAliveTime}.
type scriptReply struct {
	code, a, b, c int64
	cfg           redlimit.Config
}

// run runs one of the scripts and decodes its reply; codes -1, -3 and -5
// become errors here (-5 with its code, for SetConfig's wording), -2 and -4
// are left to the caller.
func (s *Store) run(ctx context.Context, sc *redis.Script, name string, keys []string, args []any, nvals int) (scriptReply, error) {
	raw, err := sc.Run(ctx, s.scripter, keys, append([]any{s.layout.String()}, args...)...).Result()
	if err != nil {
		return scriptReply{}, wrap(err)
	}
	r, ok := raw.([]any)
	if !ok || len(r) == 0 {
		return scriptReply{}, fmt.Errorf("%w: unexpected script reply %T", redlimit.ErrCorrupt, raw)
	}
	code, ok := toInt(r[0])
	if !ok {
		return scriptReply{}, fmt.Errorf("%w: script reply code %v", redlimit.ErrCorrupt, r[0])
	}
	switch code {
	case -1:
		return scriptReply{}, fmt.Errorf("%w: Redisson rate limiter %q has no rate, interval or type (RateLimiter is not initialized)", redlimit.ErrNotInitialized, name)
	case -3:
		return scriptReply{}, fmt.Errorf("%w: config hash of Redisson rate limiter %q (rate, interval, type) is not a valid config", redlimit.ErrCorrupt, name)
	case -4:
		return scriptReply{code: code}, nil
	case -5:
		detail := ""
		if len(r) > 1 {
			detail, _ = r[1].(string)
		}
		return scriptReply{code: code}, s.unreadable(name, detail)
	}
	if len(r) != nvals+5 {
		return scriptReply{}, fmt.Errorf("%w: script reply has %d elements, want %d", redlimit.ErrCorrupt, len(r), nvals+5)
	}
	out := scriptReply{code: code}
	vals := []*int64{&out.a, &out.b, &out.c}
	for i := 0; i < nvals; i++ {
		if *vals[i], ok = toInt(r[1+i]); !ok {
			return scriptReply{}, fmt.Errorf("%w: script reply element %d is %v", redlimit.ErrCorrupt, 1+i, r[1+i])
		}
	}
	cfg, _, err := decodeConfig(name, r[1+nvals:])
	if err != nil {
		return scriptReply{}, err
	}
	out.cfg = cfg
	return out, nil
}

// unreadable explains state the layout cannot read, naming the layout the
// offending member looks like when it looks like one.
func (s *Store) unreadable(name, detail string) error {
	if m, err := DecodeMember([]byte(detail), s.layout); err == nil && m.Encoding != s.layout.encoding() {
		return fmt.Errorf("%w: Redisson rate limiter %q holds members encoded %s, not %s: the Java side runs another Redisson generation (open the store with the matching Layout, or reset the limiter)", redlimit.ErrCorrupt, name, m.Encoding, s.layout.encoding())
	}
	return fmt.Errorf("%w: state of Redisson rate limiter %q is unreadable in the %s layout (%q)", redlimit.ErrCorrupt, name, s.layout, detail)
}

// decodeConfig reads {rate, interval, type, keepAliveTime} as the scripts
// and the hash hold them.
func decodeConfig(name string, v []any) (redlimit.Config, time.Duration, error) {
	text := make([]string, 4)
	for i, x := range v {
		switch x := x.(type) {
		case string:
			text[i] = x
		case int64:
			text[i] = strconv.FormatInt(x, 10)
		case nil:
			if i < 3 {
				return redlimit.Config{}, 0, fmt.Errorf("%w: Redisson rate limiter %q has no %s (RateLimiter is not initialized)", redlimit.ErrNotInitialized, name, hashFields[i])
			}
			text[i] = "0"
		default:
			return redlimit.Config{}, 0, fmt.Errorf("%w: config field %s is %T", redlimit.ErrCorrupt, hashFields[i], x)
		}
	}
	rate, err1 := strconv.ParseInt(text[0], 10, 64)
	interval, err2 := strconv.ParseInt(text[1], 10, 64)
	keep, err3 := strconv.ParseInt(text[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || (text[2] != "0" && text[2] != "1") || keep < 0 {
		return redlimit.Config{}, 0, fmt.Errorf("%w: config hash of Redisson rate limiter %q holds rate %q, interval %q, type %q, keepAliveTime %q", redlimit.ErrCorrupt, name, text[0], text[1], text[2], text[3])
	}
	c := redlimit.Config{Algorithm: redlimit.SlidingLog, Mode: redlimit.Overall, Rate: rate}
	if text[2] == "1" {
		c.Mode = redlimit.PerClient
	}
	if interval > 0 && interval <= int64(algorithm.MaxInterval/time.Millisecond) {
		c.Interval = time.Duration(interval) * time.Millisecond
	}
	if _, err := c.Normalize(); err != nil {
		return redlimit.Config{}, 0, fmt.Errorf("%w: Redisson rate limiter %q: rate %d per %d ms cannot be a redlimit config: %w", redlimit.ErrCorrupt, name, rate, interval, err)
	}
	return c, time.Duration(keep) * time.Millisecond, nil
}

var hashFields = []string{"rate", "interval", "type", "keepAliveTime"}
