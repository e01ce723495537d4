-- setconfig.lua: TrySetRate and SetRate.
--
-- KEYS[1] the limiter hash (config and Overall state, see limiter.lua),
-- KEYS[2] the Overall sliding-log list
-- ARGV[1] how: "if-absent" | "keep" | "reset"
-- ARGV[2..5] algorithm, mode, rate, interval (ms); ARGV[6] a fresh epoch;
-- ARGV[7..8] burst, capacity
--
-- Reply: {set (1 or 0), algorithm, mode, rate, interval, epoch, burst,
-- capacity} of the config stored afterwards. "keep" keeps the epoch when the
-- algorithm stays the same, so permits granted still count; "reset" (or a
-- new algorithm, whose state the old one's means nothing to) takes the fresh
-- epoch, and the Overall state goes (every client's state then fails to
-- match the epoch).

local cur = redis.call('HMGET', KEYS[1], 'A', 'M', 'R', 'I', 'E', 'B', 'C')
local exists = cur[3] ~= false and cur[5] ~= false
if exists and ARGV[1] == 'if-absent' then
  return {0, cur[1], cur[2], cur[3], cur[4], cur[5], cur[6] or '0', cur[7] or '0'}
end
local epoch = ARGV[6]
if exists and ARGV[1] == 'keep' and cur[1] == ARGV[2] then epoch = cur[5] end
if epoch ~= cur[5] then
  -- A new epoch: the Overall state goes (the config is rewritten below).
  redis.call('HDEL', KEYS[1], 'l', 'x', 't', 'w', 'a', 'o', 's', 'e')
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'A', ARGV[2], 'M', ARGV[3], 'R', ARGV[4], 'I', ARGV[5], 'E', epoch)
-- Burst and capacity are stored only where they mean something (not 0).
for i, f in ipairs({'B', 'C'}) do
  if ARGV[6 + i] == '0' then
    redis.call('HDEL', KEYS[1], f)
  else
    redis.call('HSET', KEYS[1], f, ARGV[6 + i])
  end
end
return {1, ARGV[2], ARGV[3], ARGV[4], ARGV[5], epoch, ARGV[7], ARGV[8]}
