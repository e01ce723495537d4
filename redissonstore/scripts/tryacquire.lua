-- tryacquire.lua: one tryAcquire on a Redisson RRateLimiter, reading and
-- writing Redisson's own keys and encodings, so that Java clients running
-- Redisson and this store share one limit. It never raises a Lua error: bad
-- input and unreadable data come back as codes (lib.lua is prepended).
--
-- KEYS[1] config hash (name), KEYS[2] {name}:value, KEYS[3] {name}:value:<client>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<client>
-- ARGV[1] layout: 'legacy' | 'current'
-- ARGV[2] permits n (1 .. 2^32-1)
-- ARGV[3] now in ms by the caller's clock (what Redisson passes as
--         System.currentTimeMillis())
-- ARGV[4..7] four candidate random parts of the grant's member (legacy: a
--         decimal long, packed as a float; current: raw bytes); the first
--         that is not already a member is used, so that no grant overwrites
--         another (Redisson's members can collide, losing a grant)
-- ARGV[8..11] the config the caller knows (rate, interval ms, type 0|1,
--         keepAliveTime ms), written as trySetRate would when the hash lacks
--         it; ARGV[8] = '' when unknown
--
-- Time is the caller's, as in Redisson: calls that read their clocks and
-- then reach Redis out of order act at their own times, so a late call with
-- an older time may take permits that a call with a later time already
-- handed back to the counter (Redisson's scripts do the same).
--
-- Reply: {code, value, delay, now, rate, interval, type, keepAliveTime} or {code, detail}
--   code  1 granted: value = permits left
--         0 refused: value = permits left, delay = the ms Redisson tells its
--           caller to wait before trying again (legacy: until the nearest
--           grant in the window ages out; current: 3 + interval - (now -
--           oldest grant))
--        -1 not initialized ({-1})
--        -2 n exceeds rate (nothing was touched)
--        -3 config unreadable ({-3})
--        -4 all four candidate members taken ({-4}); try again
--        -5 state unreadable ({-5, offending member or counter})

local n = tonumber(ARGV[2])
local now = tonumber(ARGV[3])

local cfg, code = config(8)
if not cfg then return {code} end
local function reply(c, value, delay)
  local r = {c, fmt(value), fmt(delay), fmt(now)}
  for _, x in ipairs(config_reply(cfg)) do table.insert(r, x) end
  return r
end
if n > cfg.rate then return reply(-2, 0, 0) end

local valueKey, permitsKey = state_keys(cfg)
local value, err, detail = refresh(cfg, valueKey, permitsKey, now)
if not value then return {err, detail} end

-- A counter short of n with no grant left in the window to wait for can only
-- come from lost grants (collided members, keys expired apart): recount.
if value < n and redis.call('ZCOUNT', permitsKey, '(' .. fmt(now - cfg.interval), '+inf') == 0 then
  value, detail = settle(cfg, valueKey, permitsKey, now)
  if not value then return {-5, detail} end
end

local result
if value < n then
  local delay
  if layout == 'legacy' then
    local nearest = redis.call('ZRANGEBYSCORE', permitsKey, '(' .. fmt(now - cfg.interval), '+inf',
      'WITHSCORES', 'LIMIT', 0, 1)
    delay = tonumber(nearest[2]) - (now - cfg.interval)
  else
    local first = redis.call('ZRANGE', permitsKey, 0, 0, 'WITHSCORES')
    delay = 3 + cfg.interval - (now - tonumber(first[2]))
  end
  result = reply(0, value, delay)
else
  local member
  for i = 4, 7 do
    local m = encode(ARGV[i], n)
    if redis.call('ZSCORE', permitsKey, m) == false then
      member = m
      break
    end
  end
  if not member then return {-4} end
  redis.call('ZADD', permitsKey, ARGV[3], member)
  redis.call('DECRBY', valueKey, ARGV[2])
  result = reply(1, value - n, 0)
end
keep_alive(cfg, valueKey, permitsKey)
return result
