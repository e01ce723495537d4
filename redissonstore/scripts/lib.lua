-- lib.lua: helpers shared by the redissonstore scripts. Go prepends this file
-- to each of them (tryacquire.lua, available.lua, giveback.lua, setrate.lua),
-- so it is never run alone.
--
-- KEYS: those of the script it is prepended to; every script passes
--   KEYS[1] the config hash (the limiter's raw name), KEYS[2] {name}:value,
--   KEYS[3] {name}:value:<client>, KEYS[4] {name}:permits,
--   KEYS[5] {name}:permits:<client>
-- ARGV[1] of every script: the layout, 'legacy' or 'current'.
-- Reply: none of its own.
--
-- The data is Redisson's RRateLimiter's: the hash holds rate, interval (ms),
-- type (0 OVERALL, 1 PER_CLIENT) and, in the current layout, keepAliveTime
-- (ms); :value is a counter of the permits left; :permits is a sorted set
-- with one member per grant, scored by the grant time in ms of the caller's
-- clock. A member packs a random part and the permits granted:
--   legacy  struct 'fI'   a 4-byte float, then a 4-byte unsigned int
--   current struct 'Bc0I' a length byte, that many random bytes, the unsigned int
-- Redisson keeps value + (permits of the logged grants) = rate; every
-- function here keeps that too. Counters are written with SET ... KEEPTTL
-- (Redis 6.0+), so that a TTL set by expire survives, where Redisson's plain
-- SET drops it.

local layout = ARGV[1]

local function fmt(x) return string.format('%d', x) end

-- Decodes a member: returns permits, random part; nil when it is not a
-- member of this layout (struct errors are caught, never raised).
local function decode(m)
  local ok, random, permits, nextpos
  if layout == 'legacy' then
    ok, random, permits, nextpos = pcall(struct.unpack, 'fI', m)
  else
    ok, random, permits, nextpos = pcall(struct.unpack, 'Bc0I', m)
  end
  if not ok or nextpos ~= #m + 1 or type(permits) ~= 'number' then return nil end
  return permits, random
end

local function encode(random, permits)
  if layout == 'legacy' then return struct.pack('fI', random, permits) end
  return struct.pack('Bc0I', string.len(random), random, permits)
end

-- Sums the permits of members; on an unreadable member returns nil and it.
local function sum(members, step)
  local s = 0
  for i = 1, #members, step do
    local p = decode(members[i])
    if not p then return nil, members[i] end
    s = s + p
  end
  return s
end

-- Reads the config; when rate, interval or type is missing and the caller
-- knows the config (ARGV[k..k+3]: rate, interval, type, keepAliveTime; ''
-- when unknown), writes it the way trySetRate does (HSETNX) first.
-- Returns a table {rate, interval, type, keep}, or nil and an error code:
-- -1 not initialized, -3 unreadable.
local function config(k)
  local c = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
  if not c[1] or not c[2] or not c[3] then
    if ARGV[k] == '' then return nil, -1 end
    redis.call('HSETNX', KEYS[1], 'rate', ARGV[k])
    redis.call('HSETNX', KEYS[1], 'interval', ARGV[k + 1])
    if layout == 'current' then redis.call('HSETNX', KEYS[1], 'keepAliveTime', ARGV[k + 3]) end
    local created = redis.call('HSETNX', KEYS[1], 'type', ARGV[k + 2])
    if layout == 'current' and created == 1 and tonumber(ARGV[k + 3]) > 0 then
      redis.call('PEXPIRE', KEYS[1], ARGV[k + 3])
    end
    c = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
  end
  local rate, interval, keep = tonumber(c[1]), tonumber(c[2]), tonumber(c[4] or '0')
  if not rate or rate < 1 or rate ~= math.floor(rate) or not interval or interval < 1
      or interval ~= math.floor(interval) or (c[3] ~= '0' and c[3] ~= '1') or not keep then
    return nil, -3
  end
  return {rate = rate, interval = interval, type = c[3], keep = keep}
end

-- The value and permits keys of the config's type.
local function state_keys(cfg)
  if cfg.type == '1' then return KEYS[3], KEYS[5] end
  return KEYS[2], KEYS[4]
end

-- settle rebuilds the counter from the log, which is the truth: grants at or
-- before now - interval leave it; if the rest holds more than rate permits,
-- the oldest give up permits until rate remain (so that, as they age out,
-- exactly as many are free as a sliding log of rate would free); value
-- becomes rate minus the rest. Returns value, or nil and an unreadable member.
local function settle(cfg, valueKey, permitsKey, now)
  redis.call('ZREMRANGEBYSCORE', permitsKey, 0, fmt(now - cfg.interval))
  local all = redis.call('ZRANGE', permitsKey, 0, -1, 'WITHSCORES')
  local used, bad = sum(all, 2)
  if not used then return nil, bad end
  local excess = used - cfg.rate
  local i = 1
  while excess > 0 do
    local m, score = all[i], all[i + 1]
    local p, random = decode(m)
    redis.call('ZREM', permitsKey, m)
    if p > excess then
      redis.call('ZADD', permitsKey, score, encode(random, p - excess))
      excess = 0
    else
      excess = excess - p
    end
    i = i + 2
  end
  if used > cfg.rate then used = cfg.rate end
  redis.call('SET', valueKey, fmt(cfg.rate - used), 'KEEPTTL')
  return cfg.rate - used
end

-- counter_ttl gives a counter that refresh had to create the TTL of the
-- limiter's hash in the current layout (keepAliveTime's, or one set by
-- expire), so that it never outlives the limiter; it renews nothing.
-- Calls that end with keep_alive set it again anyway; the others (release
-- of nothing, available) would leave a counter without a TTL.
local function counter_ttl(cfg, valueKey)
  if layout ~= 'current' then return end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', valueKey, ttl)
  elseif cfg.keep > 0 then
    redis.call('PEXPIRE', valueKey, fmt(cfg.keep))
  end
end

-- refresh is what Redisson does first on every call: the grants at or
-- before now - interval give their permits back to the counter (current
-- layout: if that overshoots rate, the counter is recounted from the log).
-- Without a counter Redisson starts from rate; settle does the same while
-- still counting any grant left in the log. Returns value, or nil, -5 and
-- the unreadable member or counter.
local function refresh(cfg, valueKey, permitsKey, now)
  local raw = redis.call('GET', valueKey)
  if raw == false then
    local v, bad = settle(cfg, valueKey, permitsKey, now)
    if not v then return nil, -5, bad end
    counter_ttl(cfg, valueKey)
    return v
  end
  local value = tonumber(raw)
  if not value then return nil, -5, raw end
  local cut = fmt(now - cfg.interval)
  local expired = redis.call('ZRANGEBYSCORE', permitsKey, 0, cut)
  local released, bad = sum(expired, 1)
  if not released then return nil, -5, bad end
  if released > 0 then
    redis.call('ZREMRANGEBYSCORE', permitsKey, 0, cut)
    if layout == 'current' and value + released > cfg.rate then
      local rest, bad2 = sum(redis.call('ZRANGE', permitsKey, 0, -1), 1)
      if not rest then return nil, -5, bad2 end
      value = cfg.rate - rest
    else
      value = value + released
    end
    redis.call('SET', valueKey, fmt(value), 'KEEPTTL')
  end
  return value
end

-- keep_alive is the current layout's TTL rule, run at the end of every
-- call that may write: a keepAliveTime > 0 renews the TTL of the hash and
-- the state; otherwise the state takes the hash's TTL, if it has one.
local function keep_alive(cfg, valueKey, permitsKey)
  if layout ~= 'current' then return end
  if cfg.keep > 0 then
    redis.call('PEXPIRE', KEYS[1], fmt(cfg.keep))
    redis.call('PEXPIRE', valueKey, fmt(cfg.keep))
    redis.call('PEXPIRE', permitsKey, fmt(cfg.keep))
  else
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then
      redis.call('PEXPIRE', valueKey, ttl)
      redis.call('PEXPIRE', permitsKey, ttl)
    end
  end
end

-- The config as it goes back to Go: rate, interval, type, keepAliveTime.
local function config_reply(cfg)
  return {fmt(cfg.rate), fmt(cfg.interval), cfg.type, fmt(cfg.keep)}
end
