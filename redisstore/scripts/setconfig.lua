-- setconfig.lua: TrySetRate and SetRate.
--
-- KEYS[1] config hash, KEYS[2] Overall state hash, KEYS[3] Overall log list
-- ARGV[1] how: "if-absent" | "keep" | "reset"
-- ARGV[2..5] algorithm, mode, rate, interval (ms)
-- ARGV[6] a fresh epoch, used when the limiter is created or reset
--
-- Reply: {set (1 or 0), algorithm, mode, rate, interval, epoch} of the config
-- stored afterwards. "keep" keeps the epoch, so permits granted still count;
-- "reset" takes the fresh one, which every client's state then fails to match.

local cur = redis.call('HMGET', KEYS[1], 'algorithm', 'mode', 'rate', 'interval', 'epoch')
local exists = cur[3] ~= false and cur[5] ~= false
if exists and ARGV[1] == 'if-absent' then
  return {0, cur[1], cur[2], cur[3], cur[4], cur[5]}
end
local epoch = ARGV[6]
if exists and ARGV[1] == 'keep' then epoch = cur[5] end
if ARGV[1] == 'reset' then redis.call('DEL', KEYS[2], KEYS[3]) end
redis.call('HSET', KEYS[1], 'algorithm', ARGV[2], 'mode', ARGV[3], 'rate', ARGV[4], 'interval', ARGV[5], 'epoch', epoch)
return {1, ARGV[2], ARGV[3], ARGV[4], ARGV[5], epoch}
