-- setconfig.lua: TrySetRate and SetRate.
--
-- KEYS[1] config hash, KEYS[2] Overall state hash, KEYS[3] Overall list
-- ARGV[1] how: "if-absent" | "keep" | "reset"
-- ARGV[2..5] algorithm, mode, rate, interval (ms); ARGV[6] a fresh epoch;
-- ARGV[7..8] burst, capacity
--
-- Reply: {set (1 or 0), algorithm, mode, rate, interval, epoch, burst,
-- capacity} of the config stored afterwards. "keep" keeps the epoch when the
-- algorithm stays the same, so permits granted still count; "reset" (or a
-- new algorithm, whose state the old one's means nothing to) takes the fresh
-- epoch, which every client's state then fails to match.

local fields = {'algorithm', 'mode', 'rate', 'interval', 'epoch', 'burst', 'capacity'}
local cur = redis.call('HMGET', KEYS[1], unpack(fields))
local exists = cur[3] ~= false and cur[5] ~= false
if exists and ARGV[1] == 'if-absent' then
  return {0, cur[1], cur[2], cur[3], cur[4], cur[5], cur[6] or '0', cur[7] or '0'}
end
local epoch = ARGV[6]
if exists and ARGV[1] == 'keep' and cur[1] == ARGV[2] then epoch = cur[5] end
if epoch ~= cur[5] then redis.call('DEL', KEYS[2], KEYS[3]) end
redis.call('HSET', KEYS[1], 'algorithm', ARGV[2], 'mode', ARGV[3], 'rate', ARGV[4], 'interval', ARGV[5],
  'epoch', epoch, 'burst', ARGV[7], 'capacity', ARGV[8])
return {1, ARGV[2], ARGV[3], ARGV[4], ARGV[5], epoch, ARGV[7], ARGV[8]}
