package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
)

// Keyed policies (redlimit.PolicyStore) keep two kinds of keys:
//
//   - PREFIX{POLICY}:policy, a hash: the policy's limits, version, epoch,
//     the instant its limits took effect, and the limits of its last 16
//     versions (a bucket's state does not repeat the limits it is counted
//     under: those of the version it was written under, which the client
//     reads here when the script asks). The only key of a policy without
//     a TTL. Written by policyconfig.lua, which publishes the policy's
//     name on the channel PREFIX + "policy" whenever it changes.
//   - PREFIX{POLICY%:KEY}, one string per key holding its state on every
//     limit, with a TTL: it expires once no limit can change an answer
//     (beside it PREFIX{POLICY%:KEY}I, limit I's sliding-log list, for a
//     log longer than the few entries the string holds itself). The
//     hash tag holds the key, so the keys of one policy spread over a
//     Cluster's slots. POLICY and KEY are escaped as limiter names are
//     ('%', '{', '}'), so an escaped one never holds "%:": no pair reaches
//     another's keys, nor a limiter's (whose tags never hold it either).
//     The names are short on purpose: a key's name is most of its memory.
//
// A script touches only its own slot, so each keyed call carries the
// policy as the client knows it (policy.lua). Clients cache the policy
// (policyCache) and drop it when told by the channel, or at the latest
// after the policy max age (WithPolicyMaxAge).
//
// # What a decision made while a change spreads can be
//
// A SetPolicy (Policy.SetLimits) is stored at once. A client that cached
// the policy before decides under the old limits until it learns of the
// change: through pub/sub, about one round trip after it; when pub/sub is
// down, at the latest the policy max age after it (default 1s); and at
// once on any key whose state was already changed under the new version
// (the state remembers its version: the script answers "stale" and the
// client reads the policy again). So during that window a decision on a key
// not yet touched under the new limits is the one the old limits give, as
// if the change had been made up to that bound later; no decision ever
// mixes the two, and no key's state goes back to an older version. A reset
// (SetResetState, a new epoch) is seen the same way.

var (
	policyConfigScript = redis.NewScript(mustRead("policyconfig.lua"))
	// policyFunction is the keyed call's function in the limiter library.
	policyFunction any = limiterFunction + "_p"
	policyScript       = redis.NewScript(limiterLua + "\nreturn policy_main(KEYS, ARGV)\n")
)

// DefaultPolicyMaxAge is how long a client decides under a policy it read
// without hearing from the policy channel (WithPolicyMaxAge).
const DefaultPolicyMaxAge = time.Second

// WithPolicyMaxAge bounds how long the store decides under a keyed
// policy it read before reading it again: the bound on how late a
// SetLimits reaches this client when Redis pub/sub is down (with it, a
// change is seen about one round trip after it is made). At least 1ms.
func WithPolicyMaxAge(d time.Duration) Option {
	return func(s *Store) error {
		if d < time.Millisecond {
			return &redlimit.ArgumentError{Arg: "policy max age", Value: d.String(), Reason: "must be at least 1ms", Kind: redlimit.ErrInvalidArgument}
		}
		s.pol.maxAge = d
		return nil
	}
}

var _ redlimit.PolicyStore = (*Store)(nil)

func policyConfigKey(prefix, name string) string {
	return prefix + "{" + nameEscaper.Replace(name) + "}:policy"
}

// policyStateKeys returns the KEYS of policy.lua: the key's state and one
// list per limit (limits: how many; 0 when no limit keeps a list, as
// policy.lua touches a limit's list only where its algorithm keeps one).
func policyStateKeys(prefix string, k redlimit.PolicyKey, limits int) []string {
	base := policyStateKey(prefix, k)
	keys := make([]string, 1+limits)
	keys[0] = base
	for i := 1; i <= limits; i++ {
		keys[i] = base + strconv.Itoa(i)
	}
	return keys
}

// policyStateKey is the key of k's state.
func policyStateKey(prefix string, k redlimit.PolicyKey) string {
	return policyKeyHead(prefix, k.Policy) + nameEscaper.Replace(k.Key) + "}"
}

// policyKeyHead is what the state keys of policy name begin with.
func policyKeyHead(prefix, name string) string {
	return prefix + "{" + nameEscaper.Replace(name) + "%:"
}

func (s *Store) policyChannel() string { return s.prefix + "policy" }

// policyEntry is a policy as read from Redis, with its arguments to
// policy.lua; never changed once made.
type policyEntry struct {
	cfg  redlimit.PolicyConfig
	args []any // epoch, version, since, then the limits
	most int64
	// lists: a limit keeps a list (sliding log), so calls send every
	// limit's list key.
	lists bool
	read  time.Time // when it was read (time.Now)
	// ev is "EPOCH VERSION" (base 36), the policy as a lone acquire sends
	// it (policy.lua's policy_lone), where one can: one limit, taking
	// effect at an unknown instant; else nil.
	ev any
	// keyHead is what the policy's state keys begin with
	// (policyKeyHead): made once, not per call.
	keyHead string
}

// policyCacheMax bounds the policies a store caches.
const policyCacheMax = 4096

// policyCache holds the policies read, dropped when the policy channel
// says they changed, and after maxAge anyway.
type policyCache struct {
	maxAge time.Duration
	mu     sync.Mutex
	m      map[string]*policyEntry
	// gen grows with every drop: a read that began before one is not
	// cached (it may predate the change).
	gen uint64
	// sub is the subscription to the policy channel, made on first use;
	// done closes when its goroutine ends.
	sub    *redis.PubSub
	done   chan struct{}
	closed bool
}

// get returns name's entry if it is young enough, and the generation a
// read made now must match to be cached.
func (c *policyCache) get(name string) (*policyEntry, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[name]
	if e != nil && time.Since(e.read) < c.maxAge {
		return e, c.gen
	}
	return nil, c.gen
}

func (c *policyCache) put(name string, e *policyEntry, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || c.closed {
		return
	}
	if c.m == nil || len(c.m) >= policyCacheMax {
		c.m = make(map[string]*policyEntry)
	}
	c.m[name] = e
}

// drop forgets name (all policies when name is "").
func (c *policyCache) drop(name string, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if all {
		c.m = nil
	} else {
		delete(c.m, name)
	}
}

// subscribe starts listening to the policy channel, once.
func (s *Store) subscribe() {
	c := &s.pol
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub != nil || c.closed {
		return
	}
	c.sub = s.rdb.Subscribe(context.Background(), s.policyChannel())
	c.done = make(chan struct{})
	ch := c.sub.ChannelWithSubscriptions(redis.WithChannelSize(256))
	go func() {
		defer close(c.done)
		for m := range ch {
			switch m := m.(type) {
			case *redis.Message:
				c.drop(m.Payload, false)
				if s.cache != nil {
					s.cache.ForgetPolicy(m.Payload) // changed elsewhere
				}
			case *redis.Subscription:
				// Subscribed anew, maybe after a lost connection: what
				// was published meanwhile was missed.
				c.drop("", true)
			}
		}
	}()
}

// Close ends the store's subscription to the policy channel (keyed
// policies) and waits for it. It does not close the Redis client. A
// store used after Close reads policies at every call.
func (s *Store) Close() error {
	c := &s.pol
	c.mu.Lock()
	c.closed, c.m = true, nil
	sub, done := c.sub, c.done
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	err := sub.Close()
	<-done
	return err
}

// policyEpochs bounds a policy's epochs: nine digits in base 36 (46
// random bits), as every key's state repeats its policy's epoch, and a
// key's memory is mostly its name and state.
const policyEpochs = 101_559_956_668_416 // 36^9

// newPolicyEpoch returns a random epoch for a policy, 1..policyEpochs-1.
func newPolicyEpoch() int64 {
	return redlimit.Config{}.WithNewEpoch().Epoch%policyEpochs | 1
}

// makeEntry checks a policy read from Redis and makes its entry, for the
// policy name of a store of prefix.
func makeEntry(prefix, name, limits string, version, epoch, since int64) (*policyEntry, error) {
	parts := strings.Split(limits, ",")
	if len(parts) > redlimit.MaxLimits {
		return nil, fmt.Errorf("%w: a policy of %d limits", redlimit.ErrCorrupt, len(parts))
	}
	cfg := redlimit.PolicyConfig{Version: version, Epoch: epoch, Limits: make([]redlimit.Config, len(parts))}
	if since > 0 {
		cfg.Since = time.UnixMicro(since)
	}
	args := make([]any, 3, 3+len(parts))
	lists := false
	args[0] = strconv.FormatInt(epoch, 36)
	args[1] = strconv.FormatInt(version, 36)
	args[2] = strconv.FormatInt(since, 10)
	for i, p := range parts {
		c, err := decodeConfig(p)
		if err != nil {
			return nil, err
		}
		if c.Mode != redlimit.Overall || c.Epoch != 0 {
			return nil, fmt.Errorf("%w: policy limit %q", redlimit.ErrCorrupt, p)
		}
		cfg.Limits[i] = c
		args = append(args, p)
		switch c.Algorithm {
		case redlimit.FixedWindow, redlimit.SlidingCounter, redlimit.TokenBucket, redlimit.LeakyBucket:
		default:
			lists = true
		}
	}
	if version < 1 || epoch < 1 {
		return nil, fmt.Errorf("%w: policy version %d, epoch %d", redlimit.ErrCorrupt, version, epoch)
	}
	e := &policyEntry{cfg: cfg, args: args, most: cfg.MaxPermits(), lists: lists, read: time.Now(),
		keyHead: policyKeyHead(prefix, name)}
	if len(parts) == 1 && since == 0 {
		e.ev = args[0].(string) + " " + args[1].(string)
	}
	return e, nil
}

// limitsArg is the limits as policyconfig.lua stores them.
func limitsArg(limits []redlimit.Config) string {
	parts := make([]string, len(limits))
	for i, c := range limits {
		c.Epoch = 0
		parts[i] = configArg(c)
	}
	return strings.Join(parts, ",")
}

// setPolicy runs policyconfig.lua.
func (s *Store) setPolicy(ctx context.Context, name, how string, limits []redlimit.Config, epoch, version, since int64) (*policyEntry, bool, error) {
	raw, err := s.eval(ctx, policyConfigScript, true, []string{policyConfigKey(s.prefix, name)},
		how, limitsArg(limits), strconv.FormatInt(epoch, 10), s.nowArg(), s.policyChannel(), name,
		strconv.FormatInt(version, 10), strconv.FormatInt(since, 10))
	if err != nil {
		return nil, false, wrap(err)
	}
	r, err := asArray(raw, 5)
	if err != nil {
		return nil, false, err
	}
	text, _ := r[1].(string)
	v, _ := r[2].(int64)
	e, err1 := strconv.ParseInt(fmt.Sprint(r[3]), 10, 64)
	t, err2 := strconv.ParseInt(fmt.Sprint(r[4]), 10, 64)
	if err1 != nil || err2 != nil {
		return nil, false, fmt.Errorf("%w: policy reply %v", redlimit.ErrCorrupt, r)
	}
	pe, err := makeEntry(s.prefix, name, text, v, e, t)
	if err != nil {
		return nil, false, err
	}
	return pe, r[0] == int64(1), nil
}

// setPolicyConfig is SetPolicy without the refusal cache.
func (s *Store) setPolicyConfig(ctx context.Context, name string, p redlimit.PolicyConfig, how redlimit.SetMode) (redlimit.PolicyConfig, bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	limits, err := redlimit.NormalizePolicy(p.Limits)
	if err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	if err := how.Validate(); err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	_, gen := s.pol.get(name)
	e, set, err := s.setPolicy(ctx, name, how.String(), limits, newPolicyEpoch(), 0, 0)
	if err != nil {
		return redlimit.PolicyConfig{}, false, err
	}
	if set {
		s.pol.drop(name, false)
	} else {
		s.pol.put(name, e, gen)
	}
	return e.cfg, set, nil
}

// Policy implements redlimit.PolicyStore.
func (s *Store) Policy(ctx context.Context, name string) (redlimit.PolicyConfig, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.PolicyConfig{}, err
	}
	e, err := s.readPolicy(ctx, name)
	if err != nil {
		return redlimit.PolicyConfig{}, err
	}
	return e.cfg, nil
}

// readPolicy reads name's policy from Redis (ErrNotInitialized if none)
// and caches it.
func (s *Store) readPolicy(ctx context.Context, name string) (*policyEntry, error) {
	s.subscribe()
	_, gen := s.pol.get(name)
	got, err := within(s, ctx, func(ctx context.Context) ([]any, error) {
		key := policyConfigKey(s.prefix, name)
		if d, ok := s.scripter.(doer); ok {
			// The Cluster's redirecting client follows MOVED and ASK.
			r, err := d.Do(ctx, "hmget", key, "l", "v", "e", "t").Result()
			got, _ := r.([]any)
			return got, err
		}
		return s.rdb.HMGet(ctx, key, "l", "v", "e", "t").Result()
	})
	if err != nil {
		return nil, wrap(err)
	}
	if len(got) != 4 || got[0] == nil {
		return nil, redlimit.ErrNotInitialized
	}
	var nums [3]int64
	for i := range nums {
		str, _ := got[i+1].(string)
		if nums[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: policy field %v", redlimit.ErrCorrupt, got[i+1])
		}
	}
	text, _ := got[0].(string)
	e, err := makeEntry(s.prefix, name, text, nums[0], nums[1], nums[2])
	if err != nil {
		return nil, err
	}
	s.pol.put(name, e, gen)
	return e, nil
}

// deletePolicy is DeletePolicy without the refusal cache.
func (s *Store) deletePolicy(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	raw, err := s.eval(ctx, policyConfigScript, true, []string{policyConfigKey(s.prefix, name)},
		"delete", "", "", "", s.policyChannel(), name, "", "")
	s.pol.drop(name, false)
	if err != nil {
		return false, wrap(err)
	}
	r, err := asArray(raw, 1)
	if err != nil {
		return false, err
	}
	return r[0] == int64(1), nil
}

// policyFor returns the policy to decide under: the cached one, else the
// one in Redis, else (a policy Redis does not have) known, stored then.
// fresh reports whether it was read from Redis by this call.
func (s *Store) policyFor(ctx context.Context, name string, known *redlimit.PolicyConfig, reread bool) (*policyEntry, bool, error) {
	if !reread {
		if e, _ := s.pol.get(name); e != nil {
			return e, false, nil
		}
	}
	e, err := s.readPolicy(ctx, name)
	if !errors.Is(err, redlimit.ErrNotInitialized) || len(known.Limits) == 0 {
		return e, true, err
	}
	// Put back from the caller's copy, epoch and version and all, as a
	// store that lost its data is.
	limits, err := redlimit.NormalizePolicy(known.Limits)
	if err != nil {
		return nil, false, err
	}
	epoch, version, since := known.Epoch, known.Version, int64(0)
	if epoch == 0 || version == 0 {
		epoch, version = newPolicyEpoch(), 1
	} else if !known.Since.IsZero() {
		since = known.Since.UnixMicro()
	}
	_, gen := s.pol.get(name)
	e, _, err = s.setPolicy(ctx, name, "restore", limits, epoch, version, since)
	if err != nil {
		return nil, false, err
	}
	s.pol.put(name, e, gen)
	return e, true, nil
}

// Keyed calls' ops, as policy.lua takes them.
const (
	keyAcquire = "acquire"
	keyCancel  = "cancel"
	keyRelease = "release"
	keyStatus  = "status"
)

// maxStale bounds the policy reads of one keyed call told its policy is
// stale (each one a SetLimits racing with it).
const maxStale = 3

// keyed runs one call of policy.lua, reading the policy again when the
// key's state says it is stale. It returns the reply from its flag on
// (0 or 1), read into buf.
func (s *Store) keyed(ctx context.Context, k redlimit.PolicyKey, known *redlimit.PolicyConfig, op string, n, arg int64, buf *[maxKeyedNums]int64) (*policyEntry, int64, replyNums, error) {
	if err := k.Validate(); err != nil {
		return nil, 0, nil, err
	}
	if op != keyStatus && n < 1 {
		return nil, 0, nil, (redlimit.Config{}).ValidatePermits(n)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, nil, err
	}
	// oldVersion and old: an older version of the policy and its limits,
	// which a bucket's state written under it needs (flag -5).
	oldVersion, old := "", []any(nil)
	reread := false
	for attempt := 0; ; attempt++ {
		e, fresh, err := s.policyFor(ctx, k.Policy, known, reread)
		if err != nil {
			return nil, 0, nil, err
		}
		if op == keyAcquire && n > e.most {
			for _, c := range e.cfg.Limits {
				if c.MaxPermits() == e.most {
					return nil, 0, nil, c.ValidatePermits(n)
				}
			}
		}
		text, err := s.keyedRun(ctx, e.call(s.prefix, k, op, n, arg, fresh, oldVersion, old))
		if err != nil {
			return nil, 0, nil, wrap(err)
		}
		r, err := keyedNums(text, buf)
		if err != nil {
			return nil, 0, nil, err
		}
		nums := replyNums(r)
		switch nums.at(1) {
		case 0, 1:
			return e, nums.at(0), nums[1:], nil
		case -5:
			if attempt < maxStale && len(nums) == 3 && oldVersion != strconv.FormatInt(nums.at(2), 36) {
				oldVersion = strconv.FormatInt(nums.at(2), 36)
				if old, err = s.oldLimits(ctx, k.Policy, nums.at(2)); err != nil {
					return nil, 0, nil, err
				}
				continue
			}
			return nil, 0, nil, fmt.Errorf("%w: key %q of policy %q: no limits for its version", redlimit.ErrCorrupt, k.Key, k.Policy)
		case -4:
			s.pol.drop(k.Policy, false)
			reread = true
			if attempt < maxStale {
				continue
			}
			return nil, 0, nil, fmt.Errorf("%w: the policy changed %d times during the call", redlimit.ErrUnavailable, maxStale+1)
		case -2:
			return nil, 0, nil, (redlimit.Config{}).ValidatePermits(n)
		default:
			return nil, 0, nil, fmt.Errorf("%w: key %q of policy %q holds what redlimit did not write", redlimit.ErrCorrupt, k.Key, k.Policy)
		}
	}
}

// listKeys is how many list keys a call under e sends (policyStateKeys).
func (e *policyEntry) listKeys() int {
	if e.lists {
		return len(e.cfg.Limits)
	}
	return 0
}

// callArgs is policy.lua's ARGV for a call under e, ARGV[1] (now) left
// nil; fresh: e was just read from Redis; oldVersion and old: an older
// version of the policy and its limits, which the key's state needs.
func (e *policyEntry) callArgs(op string, n, arg int64, fresh bool, oldVersion string, old []any) []any {
	return e.appendArgs(make([]any, 0, 7+len(e.args)+len(old)), op, n, arg, fresh, oldVersion, old)
}

// keyedArgs holds a keyed call's KEYS and ARGV (both forms) in one
// allocation, where they fit: a call allocates little else.
type keyedArgs struct {
	keys [1]string
	cmd  [cmdHead + keyedArgsMax]any
	lone [cmdHead + loneArgs]any
}

// keyedLogArgs is keyedArgs for a policy of one sliding log: its KEYS
// are the key's state and its list.
type keyedLogArgs struct {
	keys [2]string
	cmd  [cmdHead + 1 + keyedArgsMax]any
	lone [cmdHead + 1 + loneArgs]any
}

// cmdHead is the room an FCALL of one key takes before its ARGV.
const cmdHead = 4

const keyedArgsMax = 16

// loneArgs is how many ARGV policy_lone takes.
const loneArgs = 5

// callIn is call for keys, made in cmd and lone: the room of a command
// that sends the call alone, in its general form and in policy_lone's.
func (e *policyEntry) callIn(keys []string, cmd, lone []any, op string, n, arg int64, fresh bool, oldVersion string, old []any) keyedCall {
	head := cmdHead + len(keys) - 1
	args := e.appendArgs(cmd[head:head], op, n, arg, fresh, oldVersion, old)
	if op != keyAcquire || e.ev == nil || fresh || oldVersion != "" || len(old) > 0 {
		return keyedCall{keys: keys, args: args, cmd: cmd[:head+len(args)]}
	}
	lone = lone[:head+loneArgs]
	lone[head+1], lone[head+2], lone[head+3], lone[head+4] = args[2], args[3], e.ev, e.args[3]
	return keyedCall{keys: keys, args: args, lone: lone[head:], cmd: lone}
}

// call is a call on k under e: policy.lua's KEYS and ARGV (callArgs), the
// call's ARGV as policy_lone's when it has that form (else nil), which it
// is sent in when it goes alone, ARGV[1] (now) left nil in both; and,
// where they fit, both made in the room of the command that sends the
// call alone (keyedCall.cmd).
func (e *policyEntry) call(prefix string, k redlimit.PolicyKey, op string, n, arg int64, fresh bool, oldVersion string, old []any) keyedCall {
	if !e.lists && 7+len(e.args)+len(old) <= keyedArgsMax {
		b := new(keyedArgs)
		b.keys[0] = e.keyHead + nameEscaper.Replace(k.Key) + "}"
		return e.callIn(b.keys[:], b.cmd[:], b.lone[:], op, n, arg, fresh, oldVersion, old)
	}
	if e.lists && len(e.cfg.Limits) == 1 && 7+len(e.args)+len(old) <= keyedArgsMax {
		b := new(keyedLogArgs)
		// One string holds both keys (policyStateKeys): the list's is the
		// state's and "1".
		list := e.keyHead + nameEscaper.Replace(k.Key) + "}1"
		b.keys[0], b.keys[1] = list[:len(list)-1], list
		return e.callIn(b.keys[:], b.cmd[:], b.lone[:], op, n, arg, fresh, oldVersion, old)
	}
	return keyedCall{keys: policyStateKeys(prefix, k, e.listKeys()), args: e.callArgs(op, n, arg, fresh, oldVersion, old)}
}

// appendArgs appends callArgs's ARGV to args.
func (e *policyEntry) appendArgs(args []any, op string, n, arg int64, fresh bool, oldVersion string, old []any) []any {
	force := ""
	if fresh {
		force = "1"
	}
	args = append(args, nil, boxedOp(op), n, arg, e.args[0], e.args[1], e.args[2], force, len(e.args)-3)
	args = append(args, e.args[3:]...)
	args = append(args, oldVersion)
	return append(args, old...)
}

// oldLimits returns the limits of an older version of a policy, as its
// hash keeps them (policyconfig.lua); none when they are no longer kept.
func (s *Store) oldLimits(ctx context.Context, name string, version int64) ([]any, error) {
	text, err := within(s, ctx, func(ctx context.Context) (string, error) {
		key := policyConfigKey(s.prefix, name)
		field := "h" + strconv.FormatInt(version, 10)
		if d, ok := s.scripter.(doer); ok {
			r, err := d.Do(ctx, "hget", key, field).Result()
			text, _ := r.(string)
			return text, err
		}
		return s.rdb.HGet(ctx, key, field).Result()
	})
	if errors.Is(err, redis.Nil) || err == nil && text == "" {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err)
	}
	parts := strings.Split(text, ",")
	old := make([]any, len(parts))
	for i, p := range parts {
		if _, err := decodeConfig(p); err != nil {
			return nil, err
		}
		old[i] = p
	}
	return old, nil
}

// boxedOp is op as an any that boxing did not allocate: a constant's.
func boxedOp(op string) any {
	switch op {
	case keyAcquire:
		return keyAcquire
	case keyCancel:
		return keyCancel
	case keyRelease:
		return keyRelease
	case keyStatus:
		return keyStatus
	}
	return op
}

// runCall makes c alone, now (policy_main), in its command c.cmd where
// it has one.
func (s *Store) runCall(ctx context.Context, c keyedCall) (string, error) {
	var abandon func() func(any, error)
	if s.mustGuard(ctx) {
		abandon = func() func(any, error) { return s.abandonKeyed([]keyedCall{c}, false) }
	}
	return keyedText(s.runFunctionIn(ctx, c.cmd, policyFunction, policyScript, c.keys, c.alone(s.nowArg()), abandon))
}

// keyedText is policy_main's reply raw (or err) as its text.
func keyedText(raw any, err error) (string, error) {
	if err != nil {
		return "", err
	}
	text, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%w: unexpected keyed reply %T", redlimit.ErrCorrupt, raw)
	}
	return text, nil
}

// runFunctionIn runs function (its name, an any so that building the
// command boxes nothing) of the limiter library with FCALL, loading
// the library when Redis lacks it; where Redis has no functions (or
// refused them lately, or writes must be acknowledged) it runs script,
// the same code as a script, instead. Where buf is not nil it is sent as
// the command: args after room for FCALL's head and keys (keyedCall.cmd);
// abandon, if not nil, says what to do with the reply when the caller
// leaves first (guarded).
func (s *Store) runFunctionIn(ctx context.Context, buf []any, function any, script *redis.Script, keys []string, args []any, abandon func() func(any, error)) (any, error) {
	d, ok := s.scripter.(doer)
	if off := s.functionsOff.Load(); !ok || off != 0 && time.Now().UnixNano() < off || s.acks > 0 {
		return s.evalThen(ctx, script, true, abandon, keys, args...)
	}
	return withinThen(s, ctx, func(ctx context.Context) (any, error) {
		cmd := buf
		if len(cmd) == 3+len(keys)+len(args) && len(args) > 0 && &cmd[3+len(keys)] == &args[0] {
			cmd[0], cmd[1], cmd[2] = fcallName, function, len(keys)
			for i, k := range keys {
				cmd[3+i] = k
			}
		} else {
			cmd = make([]any, 0, 3+len(keys)+len(args))
			cmd = append(cmd, fcallName, function, len(keys))
			for _, k := range keys {
				cmd = append(cmd, k)
			}
			cmd = append(cmd, args...)
		}
		r, err := d.Do(ctx, cmd...).Result()
		if err == nil || !functionMissing(err) && !functionsRefused(err) {
			return r, err
		}
		if functionMissing(err) {
			if err = s.loadLibrary(ctx, keys[0]); err == nil {
				return d.Do(ctx, cmd...).Result()
			}
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				return nil, err
			}
		}
		s.functionsOff.Store(time.Now().Add(functionsRetry).UnixNano())
		return script.Run(ctx, s.scripter, keys, args...).Result()
	}, abandon)
}

// replyNums is a keyed reply's numbers (keyedNums), 0 past its end.
type replyNums []int64

func (r replyNums) at(i int) int64 {
	if i >= len(r) {
		return 0
	}
	return r[i]
}

// decision reads an acquire's or a status's reply.
func (e *policyEntry) decision(now int64, r replyNums) (redlimit.PolicyDecision, error) {
	l := len(e.cfg.Limits)
	if r.at(0) == 1 {
		// Granted at once by the one limit: remaining, reset-after.
		if len(r) != 3 || l != 1 {
			return redlimit.PolicyDecision{}, fmt.Errorf("%w: keyed grant of %d numbers for %d limits", redlimit.ErrCorrupt, len(r), l)
		}
		d := redlimit.PolicyDecision{Granted: true, Refused: -1, Now: time.UnixMicro(now), Policy: e.cfg,
			Limits: []redlimit.LimitState{{Remaining: r.at(1), ResetAfter: time.Duration(r.at(2)) * time.Microsecond}}}
		d.At = d.Now
		return d, nil
	}
	r = r[1:]
	if len(r) != 4+3*l {
		return redlimit.PolicyDecision{}, fmt.Errorf("%w: keyed reply of %d numbers for %d limits", redlimit.ErrCorrupt, len(r), l)
	}
	d := redlimit.PolicyDecision{Granted: r.at(0) == 1, Full: r.at(1) == 1, Refused: int(r.at(2)) - 1,
		Wait: time.Duration(r.at(3)) * time.Microsecond, Now: time.UnixMicro(now), Policy: e.cfg,
		Limits: make([]redlimit.LimitState, l)}
	if d.Refused < -1 || d.Refused >= l {
		return redlimit.PolicyDecision{}, fmt.Errorf("%w: refusing limit %d of %d", redlimit.ErrCorrupt, d.Refused, l)
	}
	if d.Granted {
		d.At = d.Now.Add(d.Wait)
	}
	for i := range d.Limits {
		x := r[4+3*i:]
		d.Limits[i] = redlimit.LimitState{Remaining: x.at(0), ResetAfter: time.Duration(x.at(1)) * time.Microsecond, Wait: time.Duration(x.at(2)) * time.Microsecond}
	}
	return d, nil
}

// acquireKey is AcquireKey without the refusal cache.
func (s *Store) acquireKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64, maxWait time.Duration) (redlimit.PolicyDecision, error) {
	w := algorithm.Unlimited
	if maxWait >= 0 {
		w = maxWait.Microseconds()
	}
	var buf [maxKeyedNums]int64
	e, now, r, err := s.keyed(ctx, k, &known, keyAcquire, n, w, &buf)
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	return e.decision(now, r)
}

// StatusKey implements redlimit.PolicyStore.
func (s *Store) StatusKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig) (redlimit.PolicyDecision, error) {
	var buf [maxKeyedNums]int64
	e, now, r, err := s.keyed(ctx, k, &known, keyStatus, 1, 0, &buf)
	if err != nil {
		return redlimit.PolicyDecision{}, err
	}
	d, err := e.decision(now, r)
	d.At = time.Time{} // nothing granted
	return d, err
}

// cancelKey is CancelKey without the refusal cache.
func (s *Store) cancelKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, at time.Time, n int64) (int64, error) {
	var buf [maxKeyedNums]int64
	_, _, r, err := s.keyed(ctx, k, &known, keyCancel, n, at.UnixMicro(), &buf)
	return handedBack(r, err)
}

// releaseKey is ReleaseKey without the refusal cache.
func (s *Store) releaseKey(ctx context.Context, k redlimit.PolicyKey, known redlimit.PolicyConfig, n int64) (int64, error) {
	var buf [maxKeyedNums]int64
	_, _, r, err := s.keyed(ctx, k, &known, keyRelease, n, -1, &buf)
	return handedBack(r, err)
}

func handedBack(r replyNums, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	if r.at(0) != 0 {
		return 0, fmt.Errorf("%w: keyed hand-back reply %v", redlimit.ErrCorrupt, []int64(r))
	}
	r = r[1:]
	if len(r) != 1 || r.at(0) < 0 {
		return 0, fmt.Errorf("%w: keyed hand-back reply %v", redlimit.ErrCorrupt, []int64(r))
	}
	return r.at(0), nil
}
