-- current_tryacquire.lua: the test's model of the tryAcquire script that
-- current Redisson sends (the "current" layout, keepAliveTime era, late 2024
-- on), written for these tests from Redisson's documented behaviour, as the
-- "Java side" of the interop tests. It deliberately keeps Redisson's shape:
-- plain asserts (raw Lua errors) and no defences, so that it answers as
-- Redisson itself would.
--
-- KEYS[1] config hash, KEYS[2] {name}:value, KEYS[3] {name}:value:<id>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<id>
-- ARGV[1] permits, ARGV[2] caller's time in ms, ARGV[3] random bytes
-- Reply: nil when granted, else the ms to wait before trying again.

local conf = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type')
assert(conf[1] and conf[2] and conf[3], 'RateLimiter is not initialized')
local rate, interval = tonumber(conf[1]), tonumber(conf[2])
local counter, log = KEYS[2], KEYS[4]
if conf[3] == '1' then counter, log = KEYS[3], KEYS[5] end
local want, t = tonumber(ARGV[1]), tonumber(ARGV[2])
assert(want <= rate, 'Requested permits amount cannot exceed defined rate')

local function permitsOf(entries)
  local total = 0
  for _, e in ipairs(entries) do
    local _, p = struct.unpack('Bc0I', e)
    total = total + p
  end
  return total
end

local left = redis.call('GET', counter)
local answer = nil
if left == false then
  redis.call('SET', counter, rate)
  redis.call('ZADD', log, ARGV[2], struct.pack('Bc0I', #ARGV[3], ARGV[3], want))
  redis.call('DECRBY', counter, want)
else
  left = tonumber(left)
  local old = redis.call('ZRANGEBYSCORE', log, 0, t - interval)
  local back = permitsOf(old)
  if back > 0 then
    redis.call('ZREMRANGEBYSCORE', log, 0, t - interval)
    if left + back > rate then
      left = rate - permitsOf(redis.call('ZRANGE', log, 0, -1))
    else
      left = left + back
    end
    redis.call('SET', counter, left)
  end
  if left < want then
    local oldest = redis.call('ZRANGE', log, 0, 0, 'WITHSCORES')
    answer = 3 + interval - (t - tonumber(oldest[2]))
  else
    redis.call('ZADD', log, ARGV[2], struct.pack('Bc0I', #ARGV[3], ARGV[3], want))
    redis.call('DECRBY', counter, want)
  end
end

local keep = redis.call('HGET', KEYS[1], 'keepAliveTime')
if keep and tonumber(keep) > 0 then
  for _, k in ipairs({KEYS[1], counter, log}) do redis.call('PEXPIRE', k, keep) end
else
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', counter, ttl)
    redis.call('PEXPIRE', log, ttl)
  end
end
return answer
