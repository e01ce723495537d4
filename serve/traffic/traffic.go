package traffic

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// DefaultPrefix is the key prefix of the serve instances' shared state
// (one hash tag, so a Cluster keeps it in one slot).
const DefaultPrefix = "{redlimit:serve}:"

// Options configure a Recorder; the zero value counts in memory.
type Options struct {
	// Redis is the instances' shared Redis; nil: this process only.
	Redis redis.UniversalClient
	// Prefix starts every key; default DefaultPrefix.
	Prefix string
	// Retention is how long the counts are kept; default 5 minutes.
	Retention time.Duration
	// TopKeys bounds the keys counted per policy, per second in the
	// process and per minute in Redis; default 100.
	TopKeys int
	// Clock dates the counts and paces Run; default the real one.
	Clock clock.Clock
	// Logger receives flush failures; default slog.Default().
	Logger *slog.Logger
	// MaxStreams bounds the event streams open at once (each reads the
	// store every second); default 64. One more is answered 503.
	MaxStreams int
	// NoTopKeys records no keys, only the counts per policy: for keys
	// that are personal data (addresses, user ids), which then reach
	// neither Redis nor the dashboard. Top answers ErrNoTopKeys.
	NoTopKeys bool
}

// ErrNoTopKeys: the Recorder records no keys (Options.NoTopKeys).
var ErrNoTopKeys = errors.New("traffic: the hottest keys are not recorded (turned off)")

// Recorder counts the calls it observes and adds them to the shared
// store every second. It is safe for concurrent use.
type Recorder struct {
	opts    Options
	backend backend

	streams atomic.Int64 // open event streams

	mu      sync.Mutex
	pending map[secPolicy]*[2]int64 // granted, refused
	top     map[string]*topK        // policy -> keys since the last flush
	failing bool                    // the last flush failed (log once)
}

type secPolicy struct {
	sec    int64
	policy string
}

var _ redlimit.Observer = (*Recorder)(nil)

// New returns a Recorder. Options are checked: a negative bound is an
// error matching redlimit.ErrInvalidArgument.
func New(opts Options) (*Recorder, error) {
	if opts.Retention < 0 || opts.TopKeys < 0 || opts.MaxStreams < 0 {
		return nil, &redlimit.ArgumentError{Arg: "traffic options", Reason: "Retention, TopKeys and MaxStreams must not be negative", Kind: redlimit.ErrInvalidArgument}
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = 64
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Retention == 0 {
		opts.Retention = 5 * time.Minute
	}
	if opts.Retention < 2*time.Minute {
		opts.Retention = 2 * time.Minute // the top keys' minute buckets need room
	}
	if opts.TopKeys == 0 {
		opts.TopKeys = 100
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Recorder{opts: opts, pending: map[secPolicy]*[2]int64{}, top: map[string]*topK{}}
	if opts.Redis != nil {
		r.backend = &redisBackend{rdb: opts.Redis, prefix: opts.Prefix, ttl: opts.Retention, keep: opts.TopKeys}
	} else {
		r.backend = newMemBackend(opts.Retention, opts.TopKeys)
	}
	return r, nil
}

const (
	// maxKeyLen bounds a key as counted: longer keys are cut.
	maxKeyLen = 200
	// maxPending bounds the (second, policy) counts awaiting a flush.
	maxPending = 100_000
)

// PolicyName is the name traffic shows for a policy: serve's "serve:"
// prefix taken off, leaving the rule's ID (domain/path).
func PolicyName(policy string) string { return strings.TrimPrefix(policy, "serve:") }

// Observe counts an acquire's grant or refusal (other calls and errors
// are not traffic).
func (r *Recorder) Observe(_ context.Context, e redlimit.Event) {
	if e.Op != redlimit.OpAcquire || (e.Outcome != redlimit.OutcomeGranted && e.Outcome != redlimit.OutcomeRefused) {
		return
	}
	name := PolicyName(e.Name)
	sec := e.Start.Unix()
	if e.Start.IsZero() {
		sec = r.opts.Clock.Now().Unix()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := secPolicy{sec, name}
	c := r.pending[sp]
	if c == nil {
		if len(r.pending) >= maxPending {
			return // nothing flushes (Run not running): stay bounded
		}
		c = new([2]int64)
		r.pending[sp] = c
	}
	if e.Outcome == redlimit.OutcomeGranted {
		c[0]++
	} else {
		c[1]++
	}
	if r.opts.NoTopKeys {
		return
	}
	tk := r.top[name]
	if tk == nil {
		tk = newTopK(r.opts.TopKeys)
		r.top[name] = tk
	}
	key := e.Key
	if len(key) > maxKeyLen {
		key = key[:maxKeyLen]
	}
	tk.add(key, 1)
}

// batch is what one flush adds.
type batch struct {
	now    time.Time
	counts map[secPolicy]*[2]int64
	top    map[string]*topK
}

// Flush adds the counts observed since the last flush to the store. On
// failure they are dropped (the dashboard shows a gap, the limits are not
// affected) and the error returned.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	b := batch{now: r.opts.Clock.Now(), counts: r.pending, top: r.top}
	r.pending, r.top = map[secPolicy]*[2]int64{}, map[string]*topK{}
	r.mu.Unlock()
	if len(b.counts) == 0 {
		return nil
	}
	err := r.backend.add(ctx, b)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil && !r.failing:
		r.opts.Logger.Warn("redlimit serve: traffic counts not stored", "err", err)
		r.failing = true
	case err == nil && r.failing:
		r.opts.Logger.Info("redlimit serve: traffic counts stored again")
		r.failing = false
	}
	return err
}

// Run flushes every second until ctx ends, then once more.
func (r *Recorder) Run(ctx context.Context) {
	for {
		tick, stop := r.opts.Clock.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			stop()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			r.Flush(fctx)
			cancel()
			return
		case <-tick:
		}
		r.Flush(ctx)
	}
}

// Series is the traffic of the seconds From, From+1s, ... by policy.
type Series struct {
	// From is the first second (Unix seconds); Seconds how many follow.
	From     int64    `json:"from"`
	Seconds  int      `json:"seconds"`
	Policies []Policy `json:"policies"`
}

// Policy is one policy's counts, one per second of its Series.
type Policy struct {
	Policy  string  `json:"policy"`
	Granted []int64 `json:"granted"`
	Refused []int64 `json:"refused"`
}

// ErrRange is a request for more seconds than are kept or more keys
// than are counted; it matches redlimit.ErrInvalidArgument.
var ErrRange = &redlimit.ArgumentError{Arg: "range", Reason: "out of the range kept", Kind: redlimit.ErrInvalidArgument}

// Series returns the last n seconds (the current one last) summed over
// every instance, policies sorted by name.
func (r *Recorder) Series(ctx context.Context, n int) (Series, error) {
	if n < 1 || time.Duration(n)*time.Second > r.opts.Retention {
		return Series{}, ErrRange
	}
	from := r.opts.Clock.Now().Unix() - int64(n) + 1
	byPolicy, err := r.backend.seconds(ctx, from, n)
	if err != nil {
		return Series{}, err
	}
	s := Series{From: from, Seconds: n, Policies: []Policy{}}
	for name, counts := range byPolicy {
		p := Policy{Policy: name, Granted: make([]int64, n), Refused: make([]int64, n)}
		for i, c := range counts {
			p.Granted[i], p.Refused[i] = c[0], c[1]
		}
		s.Policies = append(s.Policies, p)
	}
	sort.Slice(s.Policies, func(i, j int) bool { return s.Policies[i].Policy < s.Policies[j].Policy })
	return s, nil
}

// KeyCount is a key and its hits (at most over by what space-saving
// counting lends it).
type KeyCount struct {
	Key  string `json:"key"`
	Hits int64  `json:"hits"`
}

// Top returns the n keys of policy with the most hits over the minutes
// kept (the current one included), most hits first.
func (r *Recorder) Top(ctx context.Context, policy string, n int) ([]KeyCount, error) {
	if r.opts.NoTopKeys {
		return nil, ErrNoTopKeys
	}
	if n < 1 || n > r.opts.TopKeys {
		return nil, ErrRange
	}
	if policy == "" {
		return nil, &redlimit.ArgumentError{Arg: "policy", Reason: "must not be empty", Kind: redlimit.ErrInvalidArgument}
	}
	now := r.opts.Clock.Now().Unix() / 60
	minutes := int(r.opts.Retention / time.Minute)
	sums, err := r.backend.top(ctx, PolicyName(policy), now-int64(minutes)+1, minutes)
	if err != nil {
		return nil, err
	}
	out := make([]KeyCount, 0, len(sums))
	for k, v := range sums {
		out = append(out, KeyCount{Key: k, Hits: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Hits != out[j].Hits {
			return out[i].Hits > out[j].Hits
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// errBackend wraps a store failure; it matches redlimit.ErrUnavailable.
type errBackend struct{ err error }

func (e *errBackend) Error() string { return "traffic: the store failed: " + e.err.Error() }
func (e *errBackend) Unwrap() error { return e.err }
func (e *errBackend) Is(target error) bool {
	return target == redlimit.ErrUnavailable
}
