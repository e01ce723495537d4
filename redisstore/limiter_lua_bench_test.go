package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// limiterLuaLoop runs main ARGV[1] times inside one script, with the ARGV
// that follow as the run's own: on the one limiter whose hash is ARGV[2]
// (ARGV[3] "1"), or on ARGV[1] limiters ARGV[2]..i (else). The Lua of a
// limiter's run alone, without the command's and the network's share.
const limiterLuaLoop = `
local n, prefix, one = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1'
local argv = {''}
for i = 4, #ARGV do argv[#argv + 1] = ARGV[i] end
local k = prefix
for i = 1, n do
  if not one then k = prefix .. i end
  main({k .. '}', k .. '}l', k .. '}c', k .. '}cl'}, argv)
end
return n
`

// BenchmarkLimiterLua measures the Redis CPU of one limiter's run of one
// acquire (always granted), per algorithm: b.N runs inside one script,
// INFO cpu read around it; on one limiter, and on b.N limiters (their
// first calls, then calls on the states those wrote); and (run) of a run
// of runCalls acquires on one limiter, per call, as a busy limiter's
// batches carry them (about 42 at 64 callers in the bench module).
func BenchmarkLimiterLua(b *testing.B) {
	const runCalls = 42
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	script := redis.NewScript(limiterLua + limiterLuaLoop)
	for _, alg := range redlimit.Algorithms {
		for _, where := range []string{"one", "many", "run"} {
			b.Run(string(alg)+"/"+where, func(b *testing.B) {
				cfg := redlimit.PerMinute(1 << 30).WithAlgorithm(alg)
				switch alg {
				case redlimit.TokenBucket:
					cfg = redlimit.TokenBucketConfig(1<<30, time.Minute, 1<<30)
				case redlimit.LeakyBucket:
					cfg = redlimit.LeakyBucketConfig(1<<30, time.Minute, 1<<30)
				}
				one := "0"
				if where != "many" {
					one = "1"
				}
				prefix := "lua{" + string(alg) + where + b.Name()
				// A first run writes the config (and, on one limiter, a state).
				args := []any{1, prefix, one, configArg(cfg), 1, "acquire", 1, 0}
				if err := script.Run(ctx, rdb, nil, args...).Err(); err != nil {
					b.Fatal(err)
				}
				calls := 1
				if where == "run" {
					calls = runCalls
					args = append(args[:4], calls)
					for range calls {
						args = append(args, "acquire", 1, 0)
					}
				}
				b.ResetTimer()
				args[0] = b.N
				// On many limiters, a first pass stores their configs and
				// states (the first call of a limiter), the second is measured.
				passes := 1
				if where == "many" {
					passes = 2
				}
				for pass := 0; pass < passes; pass++ {
					cpu0 := serverCPU(b, rdb)
					if err := script.Run(ctx, rdb, nil, args...).Err(); err != nil {
						b.Fatal(err)
					}
					name := "lua-µs/call"
					if passes == 2 && pass == 0 {
						name = "lua-µs/first-call"
					}
					b.ReportMetric((serverCPU(b, rdb)-cpu0)/float64(b.N*calls)*1e6, name)
				}
			})
		}
	}
}
