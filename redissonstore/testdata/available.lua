-- available.lua: the test's model of Redisson's availablePermits (legacy and
-- current alike but for the member format), written for these tests from
-- its documented behaviour: with no counter it starts one at rate; else the
-- grants that aged out give their permits back, and the counter is returned.
--
-- KEYS[1] config hash, KEYS[2] {name}:value, KEYS[3] {name}:value:<id>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<id>
-- ARGV[1] caller's time in ms, ARGV[2] member format: 'fI' or 'Bc0I'
-- Reply: the permits available.

local conf = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type')
assert(conf[1] and conf[2] and conf[3], 'RateLimiter is not initialized')
local counter, log = KEYS[2], KEYS[4]
if conf[3] == '1' then counter, log = KEYS[3], KEYS[5] end
local left = redis.call('GET', counter)
if left == false then
  redis.call('SET', counter, conf[1])
  return tonumber(conf[1])
end
local upto = tonumber(ARGV[1]) - tonumber(conf[2])
local back = 0
for _, e in ipairs(redis.call('ZRANGEBYSCORE', log, 0, upto)) do
  local _, p = struct.unpack(ARGV[2], e)
  back = back + p
end
left = tonumber(left)
if back > 0 then
  redis.call('ZREMRANGEBYSCORE', log, 0, upto)
  left = left + back
  redis.call('SET', counter, left)
end
return left
