-- setconfig.lua: TrySetRate and SetRate.
--
-- KEYS[1] the limiter hash (field c: the config, s: the Overall state; see
-- limiter.lua), KEYS[2] the Overall sliding-log list
-- ARGV[1] how: "if-absent" | "keep" | "reset"
-- ARGV[2] the config, "algorithm mode rate interval epoch burst capacity",
--         with a fresh epoch
-- ARGV[3] now in µs, or "" to read Redis TIME: the instant a config that
--         keeps the epoch takes effect (field t), from which the buckets
--         count time at its rate; a new epoch has no field t
--
-- Reply: {set (1 or 0), the config stored afterwards}. "keep" keeps the
-- epoch when the algorithm stays the same, so permits granted still count;
-- "reset" (or a new algorithm, whose state the old one's means nothing to)
-- takes the fresh epoch, and the Overall state goes (every client's state
-- then fails to match the epoch).

local cur = redis.call('HGET', KEYS[1], 'c')
if cur and ARGV[1] == 'if-absent' then return {0, cur} end
local alg, mode, rate, interval, epoch, rest = string.match(ARGV[2], '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
local curAlg, curEpoch
if cur then curAlg, curEpoch = string.match(cur, '^(%S+) %S+ %S+ %S+ (%S+) ') end
if ARGV[1] == 'keep' and curEpoch and curAlg == alg then epoch = curEpoch end
local cfg = table.concat({alg, mode, rate, interval, epoch, rest}, ' ')
if epoch ~= curEpoch then
  -- A new epoch: the Overall state goes, and with it the instant of the
  -- last change, which only the state of a kept epoch needs.
  redis.call('HDEL', KEYS[1], 's', 't')
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'c', cfg)
  return {1, cfg}
end
local now = ARGV[3]
if now == '' then
  local t = redis.call('TIME')
  now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
redis.call('HSET', KEYS[1], 'c', cfg, 't', now)
return {1, cfg}
