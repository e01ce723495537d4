-- giveback.lua: hands permits granted in the current window back to a
-- Redisson RRateLimiter without breaking what Redisson reads: each permit
-- handed back leaves the log (a member is removed, or re-packed with fewer
-- permits at the same score) and returns to the counter, so value + (permits
-- in the log) = rate still holds (lib.lua is prepended).
--
-- KEYS[1] config hash (name), KEYS[2] {name}:value, KEYS[3] {name}:value:<client>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<client>
-- ARGV[1] layout: 'legacy' | 'current'
-- ARGV[2] permits to hand back, at most
-- ARGV[3] now in ms by the caller's clock
-- ARGV[4] '' to take from any grant made in (now - interval, now], newest
--         first (release); '<=' and an instant in ms to take likewise only
--         from grants made at or before it too (release by a client whose
--         oldest grant handed back was made then); or an instant in ms to
--         take only from grants made at that instant (cancel)
-- ARGV[5..8] the config the caller knows, or ARGV[5] = '' (see lib.lua's config)
--
-- Reply: {1, handed back, rate, interval, type, keepAliveTime}, or {code} /
-- {code, detail}: -1 not initialized, -3 config unreadable, -5 state
-- unreadable (detail: the offending member or counter).

local want = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cfg, code = config(5)
if not cfg then return {code} end
local valueKey, permitsKey = state_keys(cfg)
local value, err, detail = refresh(cfg, valueKey, permitsKey, now)
if not value then return {err, detail} end

local grants = {}
if ARGV[4] == '' or ARGV[4]:sub(1, 2) == '<=' then
  local upTo = now
  if ARGV[4] ~= '' then upTo = math.min(now, tonumber(ARGV[4]:sub(3))) end
  grants = redis.call('ZREVRANGEBYSCORE', permitsKey, fmt(upTo), '(' .. fmt(now - cfg.interval), 'WITHSCORES')
elseif tonumber(ARGV[4]) > now - cfg.interval then
  grants = redis.call('ZRANGEBYSCORE', permitsKey, ARGV[4], ARGV[4], 'WITHSCORES')
end
local got = 0
for i = 1, #grants, 2 do
  if want <= 0 then break end
  local m, score = grants[i], grants[i + 1]
  local p, random = decode(m)
  if not p then return {-5, m} end
  local take = p
  if take > want then take = want end
  redis.call('ZREM', permitsKey, m)
  if take < p then redis.call('ZADD', permitsKey, score, encode(random, p - take)) end
  want = want - take
  got = got + take
end
if got > 0 then
  value = value + got
  if value > cfg.rate then value = cfg.rate end
  redis.call('SET', valueKey, fmt(value), 'KEEPTTL')
  keep_alive(cfg, valueKey, permitsKey)
end
local r = {1, fmt(got)}
for _, x in ipairs(config_reply(cfg)) do table.insert(r, x) end
return r
