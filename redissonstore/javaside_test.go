package redissonstore

import (
	"context"
	_ "embed"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// This file is the "Java side" of the interop tests: Redisson's own scripts,
// run with EVAL exactly as Redisson calls them (KEYS = {name, {name}:value,
// {name}:value:<id>, {name}:permits, {name}:permits:<id>}, ARGV = {permits,
// caller's time in ms, random}). The legacy ones are read at test time from
// seed 001 (the article that quotes them); the current ones are the test's
// models in testdata/.

var (
	//go:embed testdata/current_tryacquire.lua
	currentTryAcquireLua string
	//go:embed testdata/current_trysetrate.lua
	currentTrySetRateLua string
	//go:embed testdata/current_setrate.lua
	currentSetRateLua string
	//go:embed testdata/available.lua
	availableModelLua string
	availableModel    = redis.NewScript(availableModelLua)
)

// seedsDir finds the shared/seeds folder by walking up from the working
// directory; the tests fail without it.
func seedsDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "seeds")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no shared/seeds folder above the working directory: the interop tests read Redisson's scripts from seed 001")
		}
		dir = parent
	}
}

// markdownEscape matches the backslashes the article's markdown put before
// punctuation (KEYS\[1\], EVAL\_BOOLEAN, \-- comments).
var markdownEscape = regexp.MustCompile(`\\([!-/:-@\[-` + "`" + `{-~])`)

func unescapeMarkdown(s string) string { return markdownEscape.ReplaceAllString(s, "$1") }

var javaLiteral = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// joinJavaStrings concatenates the Java string literals of src.
func joinJavaStrings(src string) string {
	var b strings.Builder
	for _, m := range javaLiteral.FindAllStringSubmatch(src, -1) {
		b.WriteString(m[1])
	}
	return b.String()
}

// seedScripts are Redisson's legacy scripts as quoted by seed 001.
type seedScripts struct {
	tryAcquire, trySetRate, setRate string
	tryAcquireFrom                  string            // which variant of the article was used
	variants                        map[string]string // every complete, compiling tryAcquire variant
}

// loadSeedScripts extracts the tryAcquire, trySetRate and setRate scripts
// from seed 001 and checks that Redis compiles each. For tryAcquire the
// article has three variants: the Java string Redisson sends, a fenced Lua
// block and a commented copy; the first complete one that compiles is used.
func loadSeedScripts(t testing.TB, rdb *redis.Client) seedScripts {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(seedsDir(t), "001_a9b47b543f19bcec.txt"))
	if err != nil {
		t.Fatalf("reading seed 001: %v", err)
	}
	text := unescapeMarkdown(string(raw))
	ctx := context.Background()
	compiles := func(src string) bool { return rdb.ScriptLoad(ctx, src).Err() == nil }

	type variant struct{ from, src string }
	var variants []variant
	if m := regexp.MustCompile(`(?s)command,\s*"(local rate = redis\.call\('hget'.*?)",\s*Arrays\.asList`).FindStringSubmatch(text); m != nil {
		variants = append(variants, variant{"the Java string of tryAcquireAsync", m[1]})
	}
	for _, m := range regexp.MustCompile("(?s)```lua\n(.*?)```").FindAllStringSubmatch(text, -1) {
		variants = append(variants, variant{"a fenced Lua block", m[1]})
	}
	if m := regexp.MustCompile(`(?s)加上了注释。\s*\n(.*?)\n###`).FindStringSubmatch(text); m != nil {
		variants = append(variants, variant{"the commented copy", m[1]})
	}
	s := seedScripts{variants: map[string]string{}}
	for _, v := range variants {
		complete := strings.Contains(v.src, "zremrangebyscore") && strings.Contains(v.src, "struct.pack('fI', ARGV[3], ARGV[1])") &&
			strings.Contains(v.src, "'RateLimiter is not initialized'") && strings.Contains(v.src, "'+inf'")
		if !complete || !compiles(v.src) {
			continue
		}
		if s.tryAcquire == "" {
			s.tryAcquire, s.tryAcquireFrom = v.src, v.from
		}
		if _, dup := s.variants[v.from]; !dup {
			s.variants[v.from] = v.src
		}
	}
	if s.tryAcquire == "" {
		t.Fatalf("seed 001: no complete, compiling tryAcquire script among %d variants", len(variants))
	}
	if m := regexp.MustCompile(`(?s)EVAL_BOOLEAN, "(redis\.call\('hsetnx'.*?)",\s*Collections\.singletonList`).FindStringSubmatch(text); m != nil {
		s.trySetRate = m[1]
	}
	if m := regexp.MustCompile(`(?s)EVAL_BOOLEAN,\s*((?:"(?:[^"\\]|\\.)*"\s*\+?\s*)+),\s*Arrays\.asList\(getName\(\), getValueName\(\), getPermitsName\(\)\)`).FindStringSubmatch(text); m != nil {
		s.setRate = joinJavaStrings(m[1])
	}
	if !strings.Contains(s.trySetRate, "hsetnx") || !compiles(s.trySetRate) {
		t.Fatalf("seed 001: trySetRate script not found or not compiling: %q", s.trySetRate)
	}
	if !strings.Contains(s.setRate, "'del', KEYS[2], KEYS[3]") || !compiles(s.setRate) {
		t.Fatalf("seed 001: setRate script not found or not compiling: %q", s.setRate)
	}
	return s
}

// javaSide runs Redisson's scripts of one layout as a Redisson client with
// id would.
type javaSide struct {
	layout                          Layout
	tryAcquire, trySetRate, setRate *redis.Script
	id                              string
	keepAlive                       int64 // current: keepAliveTime (ms) of its configs
	rnd                             *rand.Rand
}

func newJavaSide(t testing.TB, rdb *redis.Client, layout Layout, id string, keepAlive int64, rnd *rand.Rand) *javaSide {
	j := &javaSide{layout: layout, id: id, keepAlive: keepAlive, rnd: rnd}
	if layout == Legacy {
		s := loadSeedScripts(t, rdb)
		j.tryAcquire, j.trySetRate, j.setRate = redis.NewScript(s.tryAcquire), redis.NewScript(s.trySetRate), redis.NewScript(s.setRate)
	} else {
		j.tryAcquire, j.trySetRate, j.setRate = redis.NewScript(currentTryAcquireLua), redis.NewScript(currentTrySetRateLua), redis.NewScript(currentSetRateLua)
	}
	return j
}

func (j *javaSide) keys(name string) []string {
	k := KeysOf(name)
	return []string{k.Config, k.Value, k.ClientValue(j.id), k.Permits, k.ClientPermits(j.id)}
}

// random is what Redisson passes as ARGV[3]: ThreadLocalRandom.nextLong()
// as decimal text (legacy), or 16 random bytes (current).
func (j *javaSide) random() string {
	if j.layout == Legacy {
		return strconv.FormatInt(int64(j.rnd.Uint64()), 10)
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(j.rnd.Uint32())
	}
	return string(b[:])
}

// acquire is tryAcquire(n) at time now (ms): granted, or the delay Redisson
// returns.
func (j *javaSide) acquire(ctx context.Context, rdb *redis.Client, name string, n, now int64) (bool, int64, error) {
	v, err := j.tryAcquire.Run(ctx, rdb, j.keys(name), n, now, j.random()).Int64()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	return false, v, err
}

// available is availablePermits at time now (ms).
func (j *javaSide) available(ctx context.Context, rdb *redis.Client, name string, now int64) (int64, error) {
	return availableModel.Run(ctx, rdb, j.keys(name), now, string(j.layout.encoding())).Int64()
}

// trySet is trySetRate; it reports whether the config was written.
func (j *javaSide) trySet(ctx context.Context, rdb *redis.Client, name string, rate, interval int64, typ string) (bool, error) {
	args := []any{rate, interval, typ}
	if j.layout == Current {
		args = append(args, j.keepAlive)
	}
	v, err := j.trySetRate.Run(ctx, rdb, []string{KeysOf(name).Config}, args...).Int64()
	return v == 1, err
}

// set is setRate.
func (j *javaSide) set(ctx context.Context, rdb *redis.Client, name string, rate, interval int64, typ string) error {
	var err error
	if j.layout == Legacy {
		k := KeysOf(name)
		err = j.setRate.Run(ctx, rdb, []string{k.Config, k.Value, k.Permits}, rate, interval, typ).Err()
	} else {
		err = j.setRate.Run(ctx, rdb, j.keys(name), rate, interval, typ, j.keepAlive).Err()
	}
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}
