-- rules_driver.lua: one call of one algorithm's rules, for rules_test.go.
-- It is joined after the shared files and the one algorithm's file (none
-- of the other algorithms', nor limiter.lua's batch loop), and run by EVAL.
-- KEYS[1] the state (a string, as the Overall state is stored: "u last
--   expiry ..." with no epoch), KEYS[2] the algorithm's list, if it keeps one
-- ARGV algorithm, rate, interval, burst, capacity, since, now, op, n, arg,
--   notBefore (acquire: no grant before it, algorithm.State's AcquireAt):
--   every instant and length in the algorithm's own unit (ms for the
--   sliding log, µs for the others), as algorithm.Limit has them
-- Reply: code, value, wait (prelude.lua's reply), the call's now, 1 when the
-- state counted as forgotten at the now given (empty or past its expiry),
-- then the state and the list after the call.
floor, fmt = math.floor, string.format
local impl = assert(algorithms[ARGV[1]], 'no such algorithm')
local c = {impl = impl, unit = 1, rate = tonumber(ARGV[2]), interval = tonumber(ARGV[3]),
  burst = tonumber(ARGV[4]), capacity = tonumber(ARGV[5]), since = tonumber(ARGV[6]),
  listKey = KEYS[2], dirty = false, forgotten = false, out = {}, notBefore = tonumber(ARGV[11])}
local now, op, n, arg = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
if impl.open then impl.open(c) end
local st = redis.call('GET', KEYS[1])
local S = {}
if st then S = assert(decode_state(impl, st, nil, {}), 'unreadable state ' .. st) end
c.S = S
local forgotten = not S.Expiry or now >= S.Expiry
local expiry = S.Expiry or 0
c.now = later(now, S.Last or 0)
c.forgotten = expiry ~= 0 and c.now >= expiry
if op == 'available' then impl.available(c, S) else impl[op](c, S, n, arg) end
if impl.finish then impl.finish(c) end
if c.dirty then
  if S.Expiry then
    redis.call('SET', KEYS[1], encode_state(impl, c, S))
  else
    redis.call('DEL', KEYS[1])
  end
end
local out = c.out
local f = 0
if forgotten then f = 1 end
return {out[1], out[2], out[3], c.now, f, redis.call('GET', KEYS[1]) or '', redis.call('LRANGE', KEYS[2], 0, -1)}
