package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redissonseed"
	"github.com/redlimit/redlimit/redissonstore"
)

// Redisson's RRateLimiter (up to 3.16.x) as an article on it quotes it: the
// tryAcquire script Redisson sends with EVALSHA, and the trySetRate script
// (three HSETNX). The benchmark reads them from the seed at run time, as
// redissonstore's interop tests do, rather than carrying a copy of its own.

// seedFile is the article that quotes Redisson's scripts.
const seedFile = redissonseed.File

// redissonScripts are Redisson's scripts, loaded into Redis.
type redissonScripts struct {
	tryAcquire, trySetRate *redis.Script
	from                   string // the seed file and which of its copies was used
}

// findSeeds finds the shared/seeds folder by walking up from dir.
func findSeeds(dir string) (string, error) {
	p, err := redissonseed.Find(dir)
	if err != nil {
		return "", fmt.Errorf("%w: run from within the source tree, or leave Redisson out with --systems", err)
	}
	return p, nil
}

// loadRedisson extracts Redisson's scripts from the seed under seedsDir and
// checks that Redis compiles them (SCRIPT LOAD, which also caches them for
// EVALSHA).
func loadRedisson(ctx context.Context, rdb *redis.Client, seedsDir string) (*redissonScripts, error) {
	seed, err := redissonseed.Read(seedsDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(seedsDir, seedFile)
	out := &redissonScripts{}
	var tried []string
	for _, v := range seed.TryAcquire {
		if err := rdb.ScriptLoad(ctx, v.Src).Err(); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", v.From, err))
			continue
		}
		out.tryAcquire, out.from = redis.NewScript(v.Src), fmt.Sprintf("%s (%s)", seedFile, v.From)
		break
	}
	if out.tryAcquire == nil {
		return nil, fmt.Errorf("%s: no complete tryAcquire script that Redis compiles (%d complete: %s)", path, len(seed.TryAcquire), strings.Join(tried, "; "))
	}
	if seed.TrySetRate == "" {
		return nil, fmt.Errorf("%s: trySetRate script not found", path)
	}
	if err := rdb.ScriptLoad(ctx, seed.TrySetRate).Err(); err != nil {
		return nil, fmt.Errorf("%s: trySetRate script: %w", path, err)
	}
	out.trySetRate = redis.NewScript(seed.TrySetRate)
	return out, nil
}

// redissonKeys are the KEYS of tryAcquire for limiter name and client id:
// getRawName(), getValueName(), getClientValueName(), getPermitsName(),
// getClientPermitsName(), by redissonstore's copy of Redisson's naming.
func redissonKeys(name, clientID string) []string {
	k := redissonstore.KeysOf(name)
	return []string{k.Config, k.Value, k.ClientValue(clientID), k.Permits, k.ClientPermits(clientID)}
}

// redissonOverallKeys are the keys an OVERALL limiter holds.
func redissonOverallKeys(name string) []string {
	k := redissonstore.KeysOf(name)
	return []string{k.Config, k.Value, k.Permits}
}

// redissonDecision reads tryAcquire's reply: nil when granted, the delay in
// ms when refused.
func redissonDecision(cmd *redis.Cmd) (bool, error) {
	err := cmd.Err()
	if errors.Is(err, redis.Nil) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := cmd.Int64(); err != nil {
		return false, fmt.Errorf("tryAcquire reply %v: %w", cmd.Val(), err)
	}
	return false, nil
}
