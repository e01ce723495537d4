package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redisson's RRateLimiter (up to 3.16.x) as seed 001 quotes it: the
// tryAcquire script Redisson sends with EVALSHA, and the trySetRate script
// (three HSETNX). The benchmark reads them from the seed at run time, as
// redissonstore's interop tests do, rather than carrying a copy of its own.

// seedFile is the article that quotes Redisson's scripts.
const seedFile = "001_a9b47b543f19bcec.txt"

// redissonScripts are Redisson's scripts, loaded into Redis.
type redissonScripts struct {
	tryAcquire, trySetRate *redis.Script
	from                   string // the seed file and which of its copies was used
}

// findSeeds finds the shared/seeds folder by walking up from dir.
func findSeeds(dir string) (string, error) {
	start := dir
	for {
		p := filepath.Join(dir, "shared", "seeds")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no shared/seeds folder in %s or any parent: Redisson's script is read from seed %s (run from within the source tree, or leave Redisson out with --systems)", start, seedFile)
		}
		dir = parent
	}
}

// markdownEscape matches the backslashes the article's markdown put before
// punctuation (KEYS\[1\], EVAL\_BOOLEAN, \-- comments).
var markdownEscape = regexp.MustCompile(`\\([!-/:-@\[-` + "`" + `{-~])`)

var (
	// The Java string tryAcquireAsync passes to evalWriteAsync: what
	// Redisson really sends.
	javaTryAcquire = regexp.MustCompile(`(?s)command,\s*"(local rate = redis\.call\('hget'.*?)",\s*Arrays\.asList`)
	// The article's fenced copy, as a fallback.
	fencedLua = regexp.MustCompile("(?s)```lua\n(.*?)```")
	// trySetRateAsync's script.
	javaTrySetRate = regexp.MustCompile(`(?s)EVAL_BOOLEAN, "(redis\.call\('hsetnx'.*?)",\s*Collections\.singletonList`)
)

// loadRedisson extracts Redisson's scripts from the seed under seedsDir and
// checks that Redis compiles them (SCRIPT LOAD, which also caches them for
// EVALSHA).
func loadRedisson(ctx context.Context, rdb *redis.Client, seedsDir string) (*redissonScripts, error) {
	path := filepath.Join(seedsDir, seedFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Redisson's script: %w", err)
	}
	text := markdownEscape.ReplaceAllString(string(raw), "$1")
	type variant struct{ from, src string }
	var variants []variant
	if m := javaTryAcquire.FindStringSubmatch(text); m != nil {
		variants = append(variants, variant{"the Java string of tryAcquireAsync", m[1]})
	}
	for _, m := range fencedLua.FindAllStringSubmatch(text, -1) {
		variants = append(variants, variant{"the fenced Lua copy", m[1]})
	}
	out := &redissonScripts{}
	var tried []string
	for _, v := range variants {
		complete := strings.Contains(v.src, "zremrangebyscore") && strings.Contains(v.src, "struct.pack('fI', ARGV[3], ARGV[1])") &&
			strings.Contains(v.src, "'RateLimiter is not initialized'") && strings.Contains(v.src, "'+inf'")
		if !complete {
			tried = append(tried, v.from+": incomplete")
			continue
		}
		if err := rdb.ScriptLoad(ctx, v.src).Err(); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", v.from, err))
			continue
		}
		out.tryAcquire, out.from = redis.NewScript(v.src), fmt.Sprintf("%s (%s)", seedFile, v.from)
		break
	}
	if out.tryAcquire == nil {
		return nil, fmt.Errorf("%s: no complete tryAcquire script that Redis compiles (%s)", path, strings.Join(tried, "; "))
	}
	m := javaTrySetRate.FindStringSubmatch(text)
	if m == nil || !strings.Contains(m[1], "hsetnx") {
		return nil, fmt.Errorf("%s: trySetRate script not found", path)
	}
	if err := rdb.ScriptLoad(ctx, m[1]).Err(); err != nil {
		return nil, fmt.Errorf("%s: trySetRate script: %w", path, err)
	}
	out.trySetRate = redis.NewScript(m[1])
	return out, nil
}

// redissonKeys are the KEYS of tryAcquire for limiter name and client id:
// getRawName(), getValueName(), getClientValueName(), getPermitsName(),
// getClientPermitsName() ("{name}:suffix", as Redisson's suffixName writes
// them for a name without braces).
func redissonKeys(name, clientID string) []string {
	return []string{name, "{" + name + "}:value", "{" + name + "}:value:" + clientID, "{" + name + "}:permits", "{" + name + "}:permits:" + clientID}
}

// redissonOverallKeys are the keys an OVERALL limiter holds.
func redissonOverallKeys(name string) []string {
	return []string{name, "{" + name + "}:value", "{" + name + "}:permits"}
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
