package serve

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// DefaultPrefix is Config.Prefix's default: one hash tag, so that a
// Redis Cluster keeps every key of serve in one slot.
const DefaultPrefix = "{redlimit:serve}:"

// Instance is one running server as the registry shows it.
type Instance struct {
	// ID is random, chosen by New and kept while the Server lives.
	ID string `json:"id"`
	// GRPCAddr and HTTPAddr are the addresses the instance bound, empty
	// for a port turned off.
	GRPCAddr string `json:"grpc_addr"`
	HTTPAddr string `json:"http_addr"`
	// Version is the instance's redlimit version (Config.Version).
	Version string `json:"version"`
	// RulesVersion is the instance's RulesVersion at its last heartbeat.
	RulesVersion  string    `json:"rules_version"`
	StartedAt     time.Time `json:"started_at"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// TTL is how long after LastHeartbeat the instance drops out of the
	// registry unless it beats again.
	TTL time.Duration `json:"-"`
}

// instanceJSON is an Instance as JSON: the TTL in milliseconds.
type instanceJSON struct {
	instanceFields
	TTLMillis int64 `json:"ttl_ms"`
}

type instanceFields Instance

// MarshalJSON writes the TTL as ttl_ms.
func (in Instance) MarshalJSON() ([]byte, error) {
	return json.Marshal(instanceJSON{instanceFields(in), in.TTL.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (in *Instance) UnmarshalJSON(b []byte) error {
	var j instanceJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*in = Instance(j.instanceFields)
	in.TTL = time.Duration(j.TTLMillis) * time.Millisecond
	return nil
}

// minHeartbeatTTL bounds Config.HeartbeatTTL below: Redis expires keys
// by the millisecond.
const minHeartbeatTTL = 100 * time.Millisecond

func checkRegistry(cfg *Config) error {
	if cfg.HeartbeatTTL < minHeartbeatTTL {
		return &redlimit.ArgumentError{Arg: "HeartbeatTTL", Reason: "must be at least " + minHeartbeatTTL.String(), Kind: redlimit.ErrInvalidArgument}
	}
	return nil
}

// registry keeps this instance in the shared Redis: a key per instance
// (JSON, expiring HeartbeatTTL after the last heartbeat) and a sorted set
// of the ids (score: last heartbeat, Unix ms) through which they are
// found without SCAN, which a Cluster would need on every node. The key's
// expiry is the truth; ids whose key is gone are pruned when listing.
type registry struct {
	rdb    redis.UniversalClient // nil: this instance alone
	index  string
	prefix string
	ttl    time.Duration
	log    *slog.Logger
	rules  func() string // the rules version in force
	clock  clock.Clock   // paces the error log

	mu   sync.Mutex
	self Instance

	kick     chan struct{} // a heartbeat now (the rules changed)
	failures atomic.Int64  // heartbeats that failed
	seen     atomic.Int64  // instances listed at the last heartbeat

	logMu      sync.Mutex
	lastLogged time.Time
	unlogged   int64 // failures since lastLogged
	failing    bool
}

func newRegistry(cfg *Config, rulesVersion func() string) *registry {
	now := time.Now()
	return &registry{
		rdb: cfg.RedisClient, index: cfg.Prefix + "instances", prefix: cfg.Prefix + "instance:",
		ttl: cfg.HeartbeatTTL, log: cfg.Logger, rules: rulesVersion, kick: make(chan struct{}, 1), clock: cmp.Or(cfg.Decide.Clock, clock.Real),
		self: Instance{ID: newInstanceID(), Version: cfg.Version, StartedAt: now.UTC(), TTL: cfg.HeartbeatTTL},
	}
}

// newInstanceID is the host's name and random hex, for a person to tell
// the instances apart.
func newInstanceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	if len(host) > 32 {
		host = host[:32]
	}
	if host == "" {
		return hex.EncodeToString(b)
	}
	return host + "-" + hex.EncodeToString(b)
}

// buildVersion is redlimit's module version in the build information:
// the main module's when it is redlimit's, else the dependency's;
// "(devel)" when built from a source tree.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	v := ""
	if strings.HasPrefix(info.Main.Path, "github.com/redlimit/redlimit") {
		v = info.Main.Version
	}
	for _, d := range info.Deps {
		if v == "" && d.Path == "github.com/redlimit/redlimit" && d.Replace == nil {
			v = d.Version
		}
	}
	if v == "" {
		v = "(devel)"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && v == "(devel)" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// snapshot is this instance now.
func (r *registry) snapshot() Instance {
	r.mu.Lock()
	in := r.self
	r.mu.Unlock()
	in.RulesVersion = r.rules()
	in.LastHeartbeat = time.Now().UTC()
	return in
}

// bound records the addresses Serve listens on.
func (r *registry) bound(grpcAddr, httpAddr net.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.self.GRPCAddr, r.self.HTTPAddr = "", ""
	if grpcAddr != nil {
		r.self.GRPCAddr = grpcAddr.String()
	}
	if httpAddr != nil {
		r.self.HTTPAddr = httpAddr.String()
	}
}

// changed asks for a heartbeat now, carrying a new rules version.
func (r *registry) changed() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run beats every third of the TTL, and at once when the rules change,
// until ctx ends.
func (r *registry) run(ctx context.Context) {
	if r.rdb == nil {
		return
	}
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		r.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// beat writes this instance with a fresh expiry and counts the live ones.
func (r *registry) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.ttl/3)
	defer cancel()
	in := r.snapshot()
	data, err := json.Marshal(in)
	if err == nil {
		_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, r.prefix+in.ID, data, r.ttl)
			p.ZAdd(ctx, r.index, redis.Z{Score: float64(in.LastHeartbeat.UnixMilli()), Member: in.ID})
			return nil
		})
	}
	var list []Instance
	if err == nil {
		list, err = r.list(ctx)
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return // shutting down
		}
		r.failed(err)
		return
	}
	r.seen.Store(int64(len(list)))
	r.recovered()
}

// failed counts a heartbeat's error and logs it, at most once a minute.
func (r *registry) failed(err error) {
	r.failures.Add(1)
	r.logMu.Lock()
	defer r.logMu.Unlock()
	r.unlogged++
	now := r.clock.Now()
	if r.failing && now.Sub(r.lastLogged) < time.Minute {
		return
	}
	r.log.Error("redlimit serve: registry heartbeat failed; other instances may not list this one", "err", err, "failures", r.unlogged, "ttl", r.ttl)
	r.failing, r.lastLogged, r.unlogged = true, now, 0
}

func (r *registry) recovered() {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.failing {
		r.log.Info("redlimit serve: registry heartbeat recovered", "failures", r.unlogged)
		r.failing, r.unlogged = false, 0
	}
}

// deregister removes this instance, for a graceful shutdown.
func (r *registry) deregister() {
	if r.rdb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	id := r.snapshot().ID
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.prefix+id)
		p.ZRem(ctx, r.index, id)
		return nil
	})
	if err != nil {
		r.log.Warn("redlimit serve: leaving the registry failed; this instance stays listed until its TTL ends", "err", err, "ttl", r.ttl)
	}
}

// pruneScript removes from the index (KEYS[1]) each id (ARGV[i]) whose
// key (KEYS[i+1]) is gone, atomically so that an instance beating again
// meanwhile stays. Reply: the number removed.
var pruneScript = redis.NewScript(`
local n = 0
for i, id in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    n = n + redis.call('ZREM', KEYS[1], id)
  end
end
return n
`)

// maxListed bounds what one listing reads.
const maxListed = 1000

// list reads the live instances, oldest first.
func (r *registry) list(ctx context.Context) ([]Instance, error) {
	ids, err := r.rdb.ZRevRange(ctx, r.index, 0, maxListed-1).Result()
	if err != nil || len(ids) == 0 {
		return []Instance{}, err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.prefix + id
	}
	vals, err := r.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(ids))
	var goneKeys []string
	var gone []any
	for i, v := range vals {
		s, ok := v.(string)
		var in Instance
		if !ok || json.Unmarshal([]byte(s), &in) != nil || in.ID != ids[i] {
			if v == nil {
				goneKeys, gone = append(goneKeys, keys[i]), append(gone, ids[i])
			}
			continue
		}
		out = append(out, in)
	}
	if len(gone) > 0 {
		if err := pruneScript.Run(ctx, r.rdb, append([]string{r.index}, goneKeys...), gone...).Err(); err != nil {
			return nil, fmt.Errorf("pruning the registry: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b Instance) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Instances lists the instances that share this one's Redis
// (Config.RedisClient) and beat within their TTL, this one included once
// it serves; without a shared Redis, this instance alone.
func (s *Server) Instances(ctx context.Context) ([]Instance, error) {
	if s.reg.rdb == nil {
		return []Instance{s.reg.snapshot()}, nil
	}
	list, err := s.reg.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("serve: reading the instance registry: %w", err)
	}
	return list, nil
}

// ID is this instance's id in the registry.
func (s *Server) ID() string { return s.reg.snapshot().ID }

// RulesVersion identifies the rules in force (their digest), empty
// before any; equal on instances deciding by the same rules.
func (s *Server) RulesVersion() string {
	if set := s.dec.Rules(); set != nil {
		return set.Digest
	}
	return ""
}

// HeartbeatFailures counts the registry heartbeats that failed.
func (s *Server) HeartbeatFailures() int64 { return s.reg.failures.Load() }

// startRegistry puts this instance in the registry until ctx ends; the
// function returned waits for the heartbeats to stop and leaves it.
func (s *Server) startRegistry(ctx context.Context, grpcLis, httpLis net.Listener) (stop func()) {
	s.reg.bound(addrOf(grpcLis), addrOf(httpLis))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.reg.run(ctx)
	}()
	return func() {
		<-done
		s.reg.deregister()
	}
}

func (s *Server) handleInstances(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	list, err := s.Instances(ctx)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": list})
}
