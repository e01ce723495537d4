package redissonstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redissonseed"
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

// seedScripts are Redisson's legacy scripts as quoted by seed 001.
type seedScripts struct {
	tryAcquire, trySetRate, setRate string
	tryAcquireFrom                  string            // which variant of the article was used
	variants                        map[string]string // every complete, compiling tryAcquire variant
}

// loadSeedScripts extracts the tryAcquire, trySetRate and setRate scripts
// from seed 001 (found by walking up from the working directory) and checks
// that Redis compiles each. For tryAcquire the article has three variants:
// the Java string Redisson sends, a fenced Lua block and a commented copy;
// the first complete one that compiles is used.
//
// Only the tests that replay Redisson's legacy scripts call it. A clone
// without the shared folder beside it has no seed: those tests skip, naming
// what is missing; every other test runs without it. A seed that is there
// but unreadable or without the scripts fails the test.
func loadSeedScripts(t testing.TB, rdb *redis.Client) seedScripts {
	t.Helper()
	seed := readSeed(t)
	ctx := context.Background()
	compiles := func(src string) bool { return rdb.ScriptLoad(ctx, src).Err() == nil }
	s := seedScripts{variants: map[string]string{}, trySetRate: seed.TrySetRate, setRate: seed.SetRate}
	for _, v := range seed.TryAcquire {
		if !compiles(v.Src) {
			continue
		}
		if s.tryAcquire == "" {
			s.tryAcquire, s.tryAcquireFrom = v.Src, v.From
		}
		if _, dup := s.variants[v.From]; !dup {
			s.variants[v.From] = v.Src
		}
	}
	if s.tryAcquire == "" {
		t.Fatalf("seed 001: no complete, compiling tryAcquire script among %d complete variants", len(seed.TryAcquire))
	}
	if s.trySetRate == "" || !compiles(s.trySetRate) {
		t.Fatalf("seed 001: trySetRate script not found or not compiling: %q", s.trySetRate)
	}
	if !strings.Contains(s.setRate, "'del', KEYS[2], KEYS[3]") || !compiles(s.setRate) {
		t.Fatalf("seed 001: setRate script not found or not compiling: %q", s.setRate)
	}
	return s
}

// seedOnce reads and parses the seed once per test binary: the interop
// traces build a Java side per trace.
var seedOnce struct {
	sync.Once
	scripts redissonseed.Scripts
	skip    string
	err     error
}

// readSeed returns Redisson's legacy scripts as the seed quotes them; it
// skips the test when no shared/seeds folder is found and fails it when the
// seed cannot be read.
func readSeed(t testing.TB) redissonseed.Scripts {
	t.Helper()
	seedOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			seedOnce.err = err
			return
		}
		dir, err := redissonseed.Find(wd)
		if err != nil {
			seedOnce.skip = fmt.Sprintf("this test replays Redisson's legacy scripts, read from %s "+
				"(a shared/seeds folder beside the repository, looked for from %s upward), which is missing",
				filepath.Join(filepath.Dir(filepath.Dir(wd)), "shared", "seeds", redissonseed.File), wd)
			return
		}
		seedOnce.scripts, seedOnce.err = redissonseed.Read(dir)
	})
	if seedOnce.skip != "" {
		t.Skip(seedOnce.skip)
	}
	if seedOnce.err != nil {
		t.Fatal(seedOnce.err)
	}
	return seedOnce.scripts
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
	t.Helper()
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
