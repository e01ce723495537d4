package redisstore

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/batch"
)

// call is one request to the Lua library.
type call struct {
	op     op
	n, arg int64
	// known is the config the caller sent, for a batched call: a work's
	// is that of its calls (runBatch). Unbatched runs set work.known.
	known *encodedConfig
}

// op is what a call does.
type op uint8

const (
	opAcquire op = iota
	opCancel
	opRelease
	opAvailable
)

// opArgs are the ops as the Lua library reads them, put in interfaces once: a
// string put in one on every call would allocate.
var opArgs = [...]any{opAcquire: "acquire", opCancel: "cancel", opRelease: "release", opAvailable: "available"}

// work is the calls on one log that go in one script run, and their
// answers: a reply for each call, or the error that ended the work.
type work struct {
	key   redlimit.Key
	keys  scriptKeySet   // the script's KEYS for key; none: worked out
	known *encodedConfig // the config the client sent
	calls []call
	rs    []reply
	err   error
	// a lone call's call and reply, without allocations of their own
	one    [1]call
	oneRep [1]reply
}

// scriptKeySet is a log's KEYS, also as command arguments: a string put in
// an interface allocates, so a busy lane does it once.
type scriptKeySet struct {
	names []string
	args  []any
}

// keySetOf is a log's script keys: the store keeps the last ones made,
// since the runs of one busy limiter follow each other on the same log and
// would otherwise build the same names every run.
func (s *Store) keySetOf(key redlimit.Key) scriptKeySet {
	if last := s.lastKeys.Load(); last != nil && last.key == key {
		return scriptKeySet{names: last.names[:], args: last.args[:]}
	}
	last := &lastKeySet{key: key}
	scriptKeysInto(&last.names, s.prefix, key.Name, key.Client)
	for i, k := range last.names {
		last.args[i] = k
	}
	s.lastKeys.Store(last)
	return scriptKeySet{names: last.names[:], args: last.args[:]}
}

// lastKeySet is the entry of Store.lastKeys: a log and its script keys,
// in one allocation.
type lastKeySet struct {
	key   redlimit.Key
	names [4]string
	args  [4]any
}

// lone makes w a work of the one call c.
func (w *work) lone(c call) {
	w.one[0] = c
	w.calls, w.rs = w.one[:], w.oneRep[:]
}

// runOne makes c on key's log in a script run of its own (WithoutBatching).
func (s *Store) runOne(ctx context.Context, key redlimit.Key, known *encodedConfig, c call) (reply, error) {
	w := &work{key: key, known: known}
	w.lone(c)
	s.runWorks(ctx, []*work{w})
	return w.rs[0], w.err
}

// limiterCalls recycles the commands of runs that were answered.
var limiterCalls = sync.Pool{New: func() any { return new(limiterCall) }}

// minusOne is the most common argument that would be boxed anew each
// time: a wait of -1, "without waiting".
var minusOne any = int64(-1)

func boxArg(v int64) any {
	if v == -1 {
		return minusOne
	}
	return v // 0..255 are boxed without an allocation
}

// runWorks makes the calls of several logs (of one server, or one Cluster
// slot) in one script run and sets each work's replies or error.
func (s *Store) runWorks(ctx context.Context, works []*work) {
	if len(works) == 1 && works[0].isLone() && s.runLone(ctx, works[0]) {
		return
	}
	nk := 4 * len(works)
	n := 3 + nk + 1
	for _, w := range works {
		n += 2 + 3*len(w.calls)
	}
	c := limiterCalls.Get().(*limiterCall)
	c.cmd, c.keys = slices.Grow(c.cmd[:0], n), slices.Grow(c.keys[:0], nk)
	c.cmd = append(c.cmd, fcallName, limiterFunctionName, nk)
	for _, w := range works {
		if w.keys.names == nil {
			w.keys = s.keySetOf(w.key)
		}
		c.keys = append(c.keys, w.keys.names...)
		c.cmd = append(c.cmd, w.keys.args...)
	}
	c.cmd = append(c.cmd, s.nowArg())
	writes, size := false, 0
	for _, w := range works {
		c.cmd = append(c.cmd, w.known.arg, len(w.calls))
		size += len(w.calls)
		for _, cl := range w.calls {
			c.cmd = append(c.cmd, opArgs[cl.op], boxArg(cl.n), boxArg(cl.arg))
			writes = writes || cl.op != opAvailable
		}
	}
	c.args = c.cmd[3+nk:]
	s.runs.Add(1)
	s.runCalls.Add(int64(size))
	if size > 1 {
		// Runs of one call, the most common, are the runs less the
		// others (Stats): they touch no shared counter of their own.
		s.runSizes[min(bits.Len(uint(size)), RunSizeBuckets)-2].Add(1)
	}
	raw, err := s.evalLimiter(ctx, writes, c, works)
	if err == nil {
		// Answered: nothing reads c any more.
		clear(c.cmd)
		clear(c.keys)
		c.args = nil
		limiterCalls.Put(c)
	}
	if err != nil && len(works) > 1 && crossSlot(err) {
		// A clustered Redis behind one endpoint (a single-shard Cluster, a
		// proxy) refuses keys of several slots in one run, before running
		// anything: from now on each limiter's calls go alone.
		if s.batch != nil {
			s.batch.Ungroup()
		}
		for _, w := range works {
			s.runWorks(ctx, []*work{w})
		}
		return
	}
	if err == nil {
		err = decodeReplies(raw, works)
	} else {
		err = wrap(err)
	}
	if err != nil {
		for _, w := range works {
			w.err = err
		}
	}
}

// isLone: w is one acquire on a limiter the client knows as an Overall
// one, which the Lua library's lone function serves.
func (w *work) isLone() bool {
	return len(w.calls) == 1 && w.calls[0].op == opAcquire && w.known.cfg.Rate != 0 && w.known.cfg.Mode == redlimit.Overall
}

// runLone makes w's one call through the Lua library's lone function:
// two keys and four arguments instead of main's four and six, the strings
// Redis makes for every argument of every run. It returns false, having
// changed nothing, when the stored config turns out to be PerClient,
// whose call needs the client's keys: main serves it.
func (s *Store) runLone(ctx context.Context, w *work) bool {
	if w.keys.names == nil {
		w.keys = s.keySetOf(w.key)
	}
	cl := w.calls[0]
	c := limiterCalls.Get().(*limiterCall)
	c.lone = true
	c.cmd, c.keys = slices.Grow(c.cmd[:0], 9), slices.Grow(c.keys[:0], 2)
	c.cmd = append(c.cmd, fcallName, loneFunctionName, 2)
	c.keys = append(c.keys, w.keys.names[:2]...)
	c.cmd = append(c.cmd, w.keys.args[:2]...)
	c.cmd = append(c.cmd, s.nowArg(), w.known.arg, boxArg(cl.n), boxArg(cl.arg))
	c.args = c.cmd[5:]
	s.runs.Add(1)
	s.runCalls.Add(1)
	works := [1]*work{w}
	raw, err := s.evalLimiter(ctx, true, c, works[:])
	if err != nil {
		w.err = wrap(err)
		return true
	}
	clear(c.cmd)
	clear(c.keys)
	c.args, c.lone = nil, false
	limiterCalls.Put(c)
	if err = decodeReplies(raw, works[:]); err != nil {
		w.err = err
	}
	if errors.Is(w.err, errPerClientStored) {
		w.err = nil
		return false
	}
	return true
}

// crossSlot: Redis refused a run whose keys are in several hash slots.
func crossSlot(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "CROSSSLOT")
}

// Batching (internal/batch): calls on one log made while a script run for
// that log is in flight wait and then go together in the next run, which
// loads and saves the log's state once for all of them; on one server (a
// *redis.Client, Sentinel's included) the runs also carry the calls of
// several logs. A lone call still goes at once.

// batcher is the store's batching component: calls on logs named by their
// keys, answered by the Lua library's replies.
type batcher = batch.Batcher[redlimit.Key, call, reply]

// batchWork is the calls of one log in a batched run.
type batchWork = batch.Work[redlimit.Key, call, reply]

// Sizes of batched runs.
const (
	// maxBatch bounds the calls of one log in one script run.
	maxBatch = 256
	// maxInFlight bounds a server's runs in flight at once: calls that
	// come meanwhile join the next, up to maxWorks logs.
	maxInFlight = 4
	maxWorks    = 64
	// maxKeyedInFlight is maxInFlight for keyed runs (per primary on a
	// Cluster). Keyed calls spread over many keys, so a run rarely has
	// two calls on one key: fewer runs in flight make each carry more
	// calls, and Redis pays a run's fixed cost fewer times per decision.
	maxKeyedInFlight = 2
)

// newBatcher returns the store's batcher. On one server the calls of
// different limiters share runs; on a Cluster every limiter may live on
// another node, so each log's calls go alone, with no bound on the runs in
// flight.
func (s *Store) newBatcher() *batcher {
	cfg := batch.Config[redlimit.Key, call, reply]{
		Run: s.runBatch, HandBack: s.handBackWork,
		// A hand-back (a Cancel, a Release) whose caller stops waiting
		// while a busy limiter's calls queue is still made: withdrawn,
		// it would leave permits held for nobody.
		Keep:     func(c call) bool { return c.op == opCancel || c.op == opRelease },
		MaxCalls: maxBatch, MaxWorks: 1,
		// A client that keeps to a context's deadline gets runs in the
		// background that end with their most patient caller's.
		Deadlines: s.bounded,
	}
	if _, single := s.rdb.(*redis.Client); single {
		cfg.MaxWorks, cfg.MaxRuns = maxWorks, maxInFlight
	}
	return batch.New(cfg)
}

// runScratch is the store's works of a batched run; runScratches recycles
// them.
type runScratch struct {
	ws []work
	ps []*work
}

var runScratches = sync.Pool{New: func() any { return new(runScratch) }}

// runBatch makes a batched run: the batcher's works as the store's.
func (s *Store) runBatch(ctx context.Context, bws []*batchWork) {
	sc := runScratches.Get().(*runScratch)
	n := len(bws)
	sc.ws = slices.Grow(sc.ws[:0], n)[:n]
	sc.ps = slices.Grow(sc.ps[:0], n)[:n]
	for i, bw := range bws {
		known := bw.Calls[0].known
		for _, c := range bw.Calls {
			if c.known.cfg.Rate != 0 {
				known = c.known
				break
			}
		}
		sc.ws[i] = work{key: bw.Key, known: known, calls: bw.Calls, rs: bw.Results}
		sc.ps[i] = &sc.ws[i]
	}
	s.runWorks(ctx, sc.ps)
	for i, bw := range bws {
		bw.Results, bw.Err = sc.ws[i].rs, sc.ws[i].err
	}
	clear(sc.ws)
	clear(sc.ps)
	runScratches.Put(sc)
}

// batched makes c on key's log, together with the calls made meanwhile.
func (s *Store) batched(ctx context.Context, key redlimit.Key, known *encodedConfig, c call) (reply, error) {
	c.known = known
	r, err := s.batch.Do(ctx, key, c)
	if err != nil {
		return reply{}, wrap(err)
	}
	return r, nil
}
