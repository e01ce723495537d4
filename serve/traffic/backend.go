package traffic

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend keeps the counts of every instance.
type backend interface {
	add(ctx context.Context, b batch) error
	// seconds returns, per policy, the counts of n seconds from from.
	seconds(ctx context.Context, from int64, n int) (map[string][][2]int64, error)
	// top sums a policy's key counts over n minutes from from.
	top(ctx context.Context, policy string, from int64, n int) (map[string]int64, error)
}

// redisBackend adds each instance's counts into shared Redis keys.
type redisBackend struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	keep   int
}

func (r *redisBackend) secKey(sec int64) string {
	return r.prefix + "traffic:s:" + strconv.FormatInt(sec, 10)
}

func (r *redisBackend) topKey(minute int64, policy string) string {
	return r.prefix + "traffic:top:" + strconv.FormatInt(minute, 10) + ":" + policy
}

func (r *redisBackend) add(ctx context.Context, b batch) error {
	pipe := r.rdb.Pipeline()
	secs := map[int64]bool{}
	for sp, c := range b.counts {
		k := r.secKey(sp.sec)
		if c[0] > 0 {
			pipe.HIncrBy(ctx, k, sp.policy+"\x00g", c[0])
		}
		if c[1] > 0 {
			pipe.HIncrBy(ctx, k, sp.policy+"\x00r", c[1])
		}
		secs[sp.sec] = true
	}
	for sec := range secs {
		pipe.Expire(ctx, r.secKey(sec), r.ttl)
	}
	minute := b.now.Unix() / 60
	for policy, tk := range b.top {
		k := r.topKey(minute, policy)
		tk.each(func(key string, n int64) { pipe.ZIncrBy(ctx, k, float64(n), key) })
		// Bounded: only the keep most counted stay.
		pipe.ZRemRangeByRank(ctx, k, 0, int64(-r.keep-1))
		pipe.Expire(ctx, k, r.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return &errBackend{err}
	}
	return nil
}

func (r *redisBackend) seconds(ctx context.Context, from int64, n int) (map[string][][2]int64, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, n)
	for i := range n {
		cmds[i] = pipe.HGetAll(ctx, r.secKey(from+int64(i)))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, &errBackend{err}
	}
	out := map[string][][2]int64{}
	for i, c := range cmds {
		for field, v := range c.Val() {
			policy, kind, ok := strings.Cut(field, "\x00")
			count, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || (kind != "g" && kind != "r") {
				continue // not ours: skip rather than fail the view
			}
			s := out[policy]
			if s == nil {
				s = make([][2]int64, n)
				out[policy] = s
			}
			if kind == "g" {
				s[i][0] += count
			} else {
				s[i][1] += count
			}
		}
	}
	return out, nil
}

func (r *redisBackend) top(ctx context.Context, policy string, from int64, n int) (map[string]int64, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, n)
	for i := range n {
		cmds[i] = pipe.ZRangeWithScores(ctx, r.topKey(from+int64(i), policy), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, &errBackend{err}
	}
	out := map[string]int64{}
	for _, c := range cmds {
		for _, z := range c.Val() {
			if k, ok := z.Member.(string); ok {
				out[k] += int64(z.Score)
			}
		}
	}
	return out, nil
}

// memBackend is the backend of an instance without Redis.
type memBackend struct {
	ttl  time.Duration
	keep int

	mu   sync.Mutex
	secs map[int64]map[string]*[2]int64
	mins map[int64]map[string]map[string]int64 // minute -> policy -> key -> hits
}

func newMemBackend(ttl time.Duration, keep int) *memBackend {
	return &memBackend{ttl: ttl, keep: keep, secs: map[int64]map[string]*[2]int64{}, mins: map[int64]map[string]map[string]int64{}}
}

func (m *memBackend) add(_ context.Context, b batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldest := b.now.Add(-m.ttl).Unix()
	for sec := range m.secs {
		if sec < oldest {
			delete(m.secs, sec)
		}
	}
	for minute := range m.mins {
		if minute < oldest/60 {
			delete(m.mins, minute)
		}
	}
	for sp, c := range b.counts {
		if sp.sec < oldest {
			continue
		}
		ps := m.secs[sp.sec]
		if ps == nil {
			ps = map[string]*[2]int64{}
			m.secs[sp.sec] = ps
		}
		p := ps[sp.policy]
		if p == nil {
			p = new([2]int64)
			ps[sp.policy] = p
		}
		p[0] += c[0]
		p[1] += c[1]
	}
	minute := b.now.Unix() / 60
	pm := m.mins[minute]
	if pm == nil {
		pm = map[string]map[string]int64{}
		m.mins[minute] = pm
	}
	for policy, tk := range b.top {
		keys := pm[policy]
		if keys == nil {
			keys = map[string]int64{}
			pm[policy] = keys
		}
		tk.each(func(k string, n int64) { keys[k] += n })
		trim(keys, m.keep)
	}
	return nil
}

// trim drops the least counted keys beyond keep, as ZREMRANGEBYRANK does.
func trim(keys map[string]int64, keep int) {
	for len(keys) > keep {
		minKey, minCount := "", int64(-1)
		for k, c := range keys {
			if minCount < 0 || c < minCount || (c == minCount && k < minKey) {
				minKey, minCount = k, c
			}
		}
		delete(keys, minKey)
	}
}

func (m *memBackend) seconds(_ context.Context, from int64, n int) (map[string][][2]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][][2]int64{}
	for i := range n {
		for policy, c := range m.secs[from+int64(i)] {
			s := out[policy]
			if s == nil {
				s = make([][2]int64, n)
				out[policy] = s
			}
			s[i] = *c
		}
	}
	return out, nil
}

func (m *memBackend) top(_ context.Context, policy string, from int64, n int) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for i := range n {
		for k, v := range m.mins[from+int64(i)][policy] {
			out[k] += v
		}
	}
	return out, nil
}
