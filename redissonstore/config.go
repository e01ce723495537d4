package redissonstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// SetConfig implements redlimit.Store. cfg must be a sliding log.
//
//   - SetIfAbsent is Redisson's trySetRate: HSETNX of rate, interval and
//     type (and keepAliveTime in the current layout); set reports whether
//     the type was written.
//   - SetResetState is Redisson's setRate: the fields are overwritten and the
//     state deleted, Overall keys and, with WithClientID, this client's.
//   - SetKeepState (redlimit's default SetRate) overwrites the fields and
//     rebuilds the state under the new config so that the permits in use
//     still count: grants older than the new interval leave the log, the
//     oldest grants give up permits until at most rate remain, and the
//     counter becomes rate minus those. Legacy and current Redisson both read
//     that state as their own. Only the Overall state and, with
//     WithClientID, this client's PER_CLIENT state can be rebuilt; other
//     clients' PER_CLIENT counters keep their old values (Redisson cannot
//     find them either). A change of type deletes the state, as Redisson's
//     setRate does.
func (s *Store) SetConfig(ctx context.Context, name string, cfg redlimit.Config, how redlimit.SetMode) (redlimit.Config, bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, false, err
	}
	c, err := cfg.Normalize()
	if err != nil {
		return redlimit.Config{}, false, err
	}
	if err := s.checkConfig(c); err != nil {
		return redlimit.Config{}, false, err
	}
	if err := how.Validate(); err != nil {
		return redlimit.Config{}, false, err
	}
	h := how.String()
	hasClient := "0"
	if s.clientID != "" {
		hasClient = "1"
	}
	args := []any{h, c.Rate, c.Interval.Milliseconds(), typeArg(c.Mode), s.keepAlive.Milliseconds(), s.nowMillis(), hasClient}
	r, err := s.run(ctx, setRateScript, name, scriptKeys(name, s.clientID), args, 0)
	if r.code == -5 {
		return redlimit.Config{}, false, fmt.Errorf("config written, state kept as it was: %w", err)
	}
	if err != nil {
		return redlimit.Config{}, false, err
	}
	return r.cfg, r.code == 1, nil
}

// Config implements redlimit.Store: Redisson's getConfig, read from the hash.
// A hash missing rate, interval or type is ErrNotInitialized, as Redisson's
// scripts see it ("RateLimiter is not initialized").
func (s *Store) Config(ctx context.Context, name string) (redlimit.Config, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return redlimit.Config{}, err
	}
	vals, err := s.rdb.HMGet(ctx, KeysOf(name).Config, hashFields...).Result()
	if err != nil {
		return redlimit.Config{}, wrap(err)
	}
	c, _, err := decodeConfig(name, vals)
	return c, err
}

// stateKeys lists every key of the limiter this store can name.
func (s *Store) stateKeys(name string) []string {
	k := KeysOf(name)
	keys := []string{k.Config, k.Value, k.Permits}
	if s.clientID != "" {
		keys = append(keys, k.ClientValue(s.clientID), k.ClientPermits(s.clientID))
	}
	return keys
}

// Delete implements redlimit.Store as Redisson's delete: the config, the
// Overall state and, with WithClientID, this client's PER_CLIENT state.
// Other clients' PER_CLIENT keys are left (in the current layout they expire
// with keepAliveTime, if set; in the legacy layout never).
func (s *Store) Delete(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	var existed *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		existed = p.Exists(ctx, KeysOf(name).Config)
		p.Del(ctx, s.stateKeys(name)...)
		return nil
	})
	if err != nil {
		return false, wrap(err)
	}
	return existed.Val() == 1, nil
}

// Expire implements redlimit.Store as Redisson's expire: one TTL on every key
// it can name (see Delete); it reports whether the config existed. In the
// current layout with no keepAliveTime, Redisson's acquires copy the
// config's TTL to the state keys.
func (s *Store) Expire(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateTTL(ttl); err != nil {
		return false, err
	}
	var cmds []*redis.BoolCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range s.stateKeys(name) {
			cmds = append(cmds, p.PExpire(ctx, k, ttl))
		}
		return nil
	})
	if err != nil {
		return false, wrap(err)
	}
	return cmds[0].Val(), nil
}

// ClearExpire implements redlimit.Store as Redisson's clearExpire: PERSIST
// on every key it can name; it reports whether any TTL was removed.
func (s *Store) ClearExpire(ctx context.Context, name string) (bool, error) {
	if err := (redlimit.Key{Name: name}).ValidateName(); err != nil {
		return false, err
	}
	var cmds []*redis.BoolCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range s.stateKeys(name) {
			cmds = append(cmds, p.Persist(ctx, k))
		}
		return nil
	})
	if err != nil {
		return false, wrap(err)
	}
	removed := false
	for _, c := range cmds {
		removed = removed || c.Val()
	}
	return removed, nil
}
