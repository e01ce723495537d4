package serve

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ruleStore keeps the rules set through the API, their version and the
// audit of the changes: in the shared Redis, or in process memory.
type ruleStore interface {
	// version is the store's version of the rules: it changes with every
	// change made.
	version(ctx context.Context) (string, error)
	// load returns the version and every rule's value by field, read at
	// one instant.
	load(ctx context.Context) (string, map[string]string, error)
	// write sets field to value ("" removes it), records the audit
	// record made of head, the old value (JSON null when none) and "}",
	// and announces the change. It returns the old value and whether
	// anything was written: removing a missing field writes nothing.
	write(ctx context.Context, field, value, head string) (old string, wrote bool, err error)
	// audit returns up to n audit records, newest first.
	audit(ctx context.Context, n int) ([]string, error)
}

// maxAudit caps the audit list.
const maxAudit = 1000

//go:embed apirules.lua
var writeLua string

var writeScript = redis.NewScript(writeLua)

// redisRules is the ruleStore in the shared Redis, under the keys of
// serve-api.md.
type redisRules struct {
	rdb                                  redis.UniversalClient
	rules, versionKey, auditKey, channel string
}

func newRedisRules(rdb redis.UniversalClient, prefix string) *redisRules {
	return &redisRules{rdb: rdb, rules: prefix + "rules", versionKey: prefix + "rules:version", auditKey: prefix + "audit", channel: prefix + "rules:changed"}
}

func (s *redisRules) version(ctx context.Context) (string, error) {
	v, err := s.rdb.Get(ctx, s.versionKey).Result()
	if errors.Is(err, redis.Nil) {
		return "0", nil
	}
	return v, err
}

func (s *redisRules) load(ctx context.Context) (string, map[string]string, error) {
	var get *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, s.versionKey)
		all = p.HGetAll(ctx, s.rules)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, err
	}
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		v, err = "0", nil
	}
	if err != nil {
		return "", nil, err
	}
	m, err := all.Result()
	return v, m, err
}

func (s *redisRules) write(ctx context.Context, field, value, head string) (string, bool, error) {
	res, err := writeScript.Run(ctx, s.rdb, []string{s.rules, s.versionKey, s.auditKey}, field, value, head, maxAudit, s.channel).StringSlice()
	if err != nil {
		return "", false, err
	}
	switch len(res) {
	case 0:
		return "", false, nil
	case 2:
		return res[0], true, nil
	}
	return "", false, fmt.Errorf("serve: the rules script answered %d values, want 0 or 2", len(res))
}

func (s *redisRules) audit(ctx context.Context, n int) ([]string, error) {
	return s.rdb.LRange(ctx, s.auditKey, 0, int64(n)-1).Result()
}

// memRules is the ruleStore of an instance without a shared Redis.
type memRules struct {
	mu    sync.Mutex
	n     int64
	rules map[string]string
	log   []string // oldest first
}

func (s *memRules) version(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatInt(s.n, 10), nil
}

func (s *memRules) load(context.Context) (string, map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]string, len(s.rules))
	for k, v := range s.rules {
		m[k] = v
	}
	return strconv.FormatInt(s.n, 10), m, nil
}

func (s *memRules) write(_ context.Context, field, value, head string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.rules[field]
	if value == "" {
		if !had {
			return "", false, nil
		}
		delete(s.rules, field)
	} else {
		if s.rules == nil {
			s.rules = map[string]string{}
		}
		s.rules[field] = value
	}
	s.n++
	rec := old
	if !had {
		rec = "null"
	}
	s.log = append(s.log, head+rec+"}")
	if len(s.log) > maxAudit {
		s.log = append(s.log[:0], s.log[len(s.log)-maxAudit:]...)
	}
	return old, true, nil
}

func (s *memRules) audit(_ context.Context, n int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, min(n, len(s.log)))
	for i := len(s.log) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, s.log[i])
	}
	return out, nil
}
