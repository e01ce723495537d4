-- setrate.lua: writes a Redisson RRateLimiter's config as trySetRate or
-- setRate do, plus a keep-state mode Redisson's readers understand (lib.lua
-- is prepended).
--
-- KEYS[1] config hash (name), KEYS[2] {name}:value, KEYS[3] {name}:value:<client>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<client>
--   (with no client id known, KEYS[3] and KEYS[5] repeat KEYS[2] and KEYS[4])
-- ARGV[1] layout: 'legacy' | 'current'
-- ARGV[2] how: 'if-absent' | 'keep' | 'reset'
-- ARGV[3] rate, ARGV[4] interval ms, ARGV[5] type (0 OVERALL, 1 PER_CLIENT),
-- ARGV[6] keepAliveTime ms (current layout; 0 none)
-- ARGV[7] now in ms by the caller's clock (keep)
-- ARGV[8] '1' when KEYS[3] and KEYS[5] are a real client's keys, else '0'
--
-- if-absent: trySetRate: HSETNX of each field (keepAliveTime too in the
--   current layout, whose hash then expires after keepAliveTime if it was
--   created); "set" is the HSETNX of type.
-- reset: setRate: HSET of every field (current: PEXPIRE by keepAliveTime),
--   then the state is deleted: the Overall keys (as Redisson does) and this
--   client's keys when known. Other clients' PER_CLIENT keys cannot be found
--   (their ids are not known), exactly as in Redisson.
-- keep: HSET as reset; if the type changes the state is deleted as reset;
--   otherwise the state of the (new) type is rebuilt under the new config by
--   lib.lua's settle: grants older than the new interval leave, the oldest
--   give up permits until at most rate remain in use, and the counter is
--   rate minus those in use. A sliding log of the new config would decide
--   exactly so, and Redisson reads the result as its own.
--
-- Reply: {set (0|1), rate, interval, type, keepAliveTime} as stored afterwards
-- (fields missing from the hash are false), or {-5, detail} when the state to
-- keep is unreadable (the config is then written, the state left alone).

local how = ARGV[2]
local set

if how == 'if-absent' then
  redis.call('HSETNX', KEYS[1], 'rate', ARGV[3])
  redis.call('HSETNX', KEYS[1], 'interval', ARGV[4])
  if layout == 'current' then redis.call('HSETNX', KEYS[1], 'keepAliveTime', ARGV[6]) end
  set = redis.call('HSETNX', KEYS[1], 'type', ARGV[5])
  if layout == 'current' and set == 1 and tonumber(ARGV[6]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
else
  local oldType = redis.call('HGET', KEYS[1], 'type')
  redis.call('HSET', KEYS[1], 'rate', ARGV[3], 'interval', ARGV[4], 'type', ARGV[5])
  if layout == 'current' then
    redis.call('HSET', KEYS[1], 'keepAliveTime', ARGV[6])
    if tonumber(ARGV[6]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
  end
  set = 1
  if how == 'reset' or (oldType and oldType ~= ARGV[5]) then
    redis.call('DEL', KEYS[2], KEYS[4])
    if ARGV[8] == '1' then redis.call('DEL', KEYS[3], KEYS[5]) end
  elseif ARGV[5] == '0' or ARGV[8] == '1' then
    local cfg = {rate = tonumber(ARGV[3]), interval = tonumber(ARGV[4]), type = ARGV[5],
      keep = tonumber(ARGV[6])}
    local valueKey, permitsKey = state_keys(cfg)
    if redis.call('EXISTS', valueKey, permitsKey) > 0 then
      local v, bad = settle(cfg, valueKey, permitsKey, tonumber(ARGV[7]))
      if not v then return {-5, bad} end
      keep_alive(cfg, valueKey, permitsKey)
    end
  end
end

local c = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
return {set, c[1], c[2], c[3], c[4]}
