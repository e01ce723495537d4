package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// keyedLuaLoop runs policy_main ARGV[1] times inside one script, on keys
// PREFIX..i (ARGV[2]), with the ARGV that follow as the call's own: the
// Lua of a keyed call alone, without the command's and the network's share.
// The calls share one instant, read once, as the calls of a run do (a
// TIME per call would cost as much as a third of the call).
const keyedLuaLoop = `
local n, prefix = tonumber(ARGV[1]), ARGV[2]
local t = redis.call('TIME')
local argv = {t[1] .. string.format('%06d', t[2])}
for i = 3, #ARGV do argv[#argv + 1] = ARGV[i] end
for i = 1, n do
  local k = prefix .. i .. '}'
  policy_main({k, k .. '1'}, argv)
end
return n
`

// keyedLuaFloor does, ARGV[1] times inside one script on keys PREFIX..i
// (ARGV[2]), only what any keyed call must: one GET of the key and one
// SET of a state as long as ARGV[3] with a TTL, and a reply as long as a
// granted one's. Beside BenchmarkKeyedLua's figures it is what the Lua of
// a call costs beyond its commands.
const keyedLuaFloor = `
local n, prefix, st = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local out = {}
for i = 1, n do
  local k = prefix .. i .. '}'
  local raw = redis.call('GET', k)
  redis.call('SET', k, st, 'PX', 60000)
  out[1] = {i, 1, i, i}
end
return n
`

// keyedLuaPasses is how many passes BenchmarkKeyedLua makes over the keys
// holding state; it reports the least, the figure a busy machine
// disturbs least.
const keyedLuaPasses = 4

// BenchmarkKeyedLua measures the Redis CPU of one keyed call's Lua (a
// one-limit policy per algorithm, always granted): b.N calls run inside
// one script, INFO cpu read around it; on keys without state, then on the
// same keys again, holding the state the first pass wrote (the least of
// keyedLuaPasses passes); and floor-µs/call, a loop of only the commands
// a call must run on the same keys (keyedLuaFloor), the state as long as
// the one the call wrote.
func BenchmarkKeyedLua(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	s, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	script := redis.NewScript(limiterLua + keyedLuaLoop)
	floorScript := redis.NewScript(keyedLuaFloor)
	for _, alg := range redlimit.Algorithms {
		b.Run(string(alg), func(b *testing.B) {
			cfg := redlimit.PerMinute(1 << 20).WithAlgorithm(alg)
			switch alg {
			case redlimit.TokenBucket:
				cfg = redlimit.TokenBucketConfig(1<<20, time.Minute, 1<<20)
			case redlimit.LeakyBucket:
				cfg = redlimit.LeakyBucketConfig(1<<20, time.Minute, 1<<20)
			}
			name := "lua-" + string(alg)
			if _, _, err := s.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: []redlimit.Config{cfg}}, redlimit.SetResetState); err != nil {
				b.Fatal(err)
			}
			e, _, err := s.policyFor(ctx, name, &redlimit.PolicyConfig{}, true)
			if err != nil {
				b.Fatal(err)
			}
			call := e.callArgs(keyAcquire, 1, 0, false, "", nil)[1:]
			prefix := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: name, Key: "k"}, 0)[0]
			prefix = strings.TrimSuffix(prefix, "}") + ":"
			perPass := make([]float64, 1+keyedLuaPasses)
			b.ResetTimer()
			for pass := range perPass {
				cpu0 := serverCPU(b, rdb)
				args := append([]any{b.N, prefix}, call...)
				if err := script.Run(ctx, rdb, nil, args...).Err(); err != nil {
					b.Fatal(err)
				}
				perPass[pass] = (serverCPU(b, rdb) - cpu0) / float64(b.N) * 1e6
			}
			// A bucket's state may be gone already (it drains in µs): a
			// string as long as one stands in.
			st, err := rdb.Get(ctx, prefix+"1}").Result()
			if err == redis.Nil {
				st, err = strings.Repeat("x", 24), nil
			}
			if err != nil {
				b.Fatal(err)
			}
			floor := make([]float64, keyedLuaPasses)
			for pass := range floor {
				cpu0 := serverCPU(b, rdb)
				if err := floorScript.Run(ctx, rdb, nil, b.N, prefix+"floor:", st).Err(); err != nil {
					b.Fatal(err)
				}
				floor[pass] = (serverCPU(b, rdb) - cpu0) / float64(b.N) * 1e6
			}
			b.ReportMetric(perPass[0], "lua-µs/call-empty")
			b.ReportMetric(slices.Min(perPass[1:]), "lua-µs/call-state")
			b.ReportMetric(slices.Min(floor[1:]), "floor-µs/call")
		})
	}
}

// serverCPU is the CPU time Redis has used, in seconds (INFO cpu).
func serverCPU(b *testing.B, rdb *redis.Client) float64 {
	var total float64
	for _, line := range strings.Split(rdb.Info(context.Background(), "cpu").Val(), "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				total += x
			}
		}
	}
	return total
}
