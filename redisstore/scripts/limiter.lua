-- limiter.lua: one call on a sliding-log limiter, atomically. The rules are
-- those of algorithm/slidinglog (the Go code is the truth; differential tests
-- hold this script to it decision for decision).
--
-- KEYS[1] config hash   {algorithm, mode, rate, interval (ms), epoch}
-- KEYS[2] Overall state hash {t = total permits in log, l = last now, e = epoch,
--         x = expiry: the log counts as empty from then on}
-- KEYS[3] Overall log list  [at1, permits1, at2, permits2, ...], at strictly rising
-- KEYS[4] this client's state hash (PerClient)
-- KEYS[5] this client's log list   (PerClient)
-- ARGV[1] op: "acquire" | "cancel" | "release" | "available"
-- ARGV[2] permits (acquire, cancel, release)
-- ARGV[3] acquire: maximum wait in ms (-1: no bound); cancel: instant of the reservation
-- ARGV[4] now in ms, or "" to read Redis TIME (the default: one clock for all clients)
-- ARGV[5..9] the config the client knows (algorithm, mode, rate, interval, epoch),
--            restored when the stored one is missing; ARGV[5] = "" when unknown
--
-- Reply: {code, value, wait, at, now, algorithm, mode, rate, interval, epoch}
--   code  1 granted / done, 0 refused, -1 not initialized, -2 permits exceed
--         rate, -3 stored config unreadable
--   value acquire, available: permits left; cancel, release: permits handed back
--   wait  acquire: ms until at when granted, retry-after when refused
-- Errors are replies, never raw Lua errors.

local op = ARGV[1]
local n = tonumber(ARGV[2])

local function str(x) return string.format('%d', x) end

local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local cfg = redis.call('HMGET', KEYS[1], 'algorithm', 'mode', 'rate', 'interval', 'epoch')
if not cfg[1] and not cfg[3] then
  if ARGV[5] == '' then return {-1} end
  cfg = {ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]}
  redis.call('HSET', KEYS[1], 'algorithm', cfg[1], 'mode', cfg[2], 'rate', cfg[3], 'interval', cfg[4], 'epoch', cfg[5])
end
local rate, interval, epoch = tonumber(cfg[3]), tonumber(cfg[4]), tonumber(cfg[5])
if cfg[1] ~= 'sliding-log' or (cfg[2] ~= 'overall' and cfg[2] ~= 'per-client')
    or not rate or rate < 1 or not interval or interval < 1 or not epoch then
  return {-3}
end
local function reply(code, value, wait, at)
  return {code, value, wait, at, now, cfg[1], cfg[2], cfg[3], cfg[4], cfg[5]}
end

-- Checked before any state is touched.
if op == 'acquire' and n > rate then return reply(-2, 0, 0, 0) end

local stateKey, logKey = KEYS[2], KEYS[3]
if cfg[2] == 'per-client' then stateKey, logKey = KEYS[4], KEYS[5] end

-- Load the log's header; state of another epoch (a reset) is discarded.
local st = redis.call('HMGET', stateKey, 't', 'l', 'e', 'x')
local total, last, expiry = 0, 0, 0
if st[3] and tonumber(st[3]) == epoch and tonumber(st[1]) and tonumber(st[2]) and tonumber(st[4]) then
  total, last, expiry = tonumber(st[1]), tonumber(st[2]), tonumber(st[4])
elseif st[1] or st[2] or st[3] or st[4] or redis.call('EXISTS', logKey) == 1 then
  redis.call('DEL', stateKey, logKey)
end

-- Time never runs backwards for a log.
if now < last then now = last end
local cut = now - interval
local forgotten = expiry ~= 0 and now >= expiry

-- The entries at the head that have left the window: their count (as list
-- elements) and their permits.
local function expired()
  local idx, sum = 0, 0
  while true do
    local chunk = redis.call('LRANGE', logKey, idx, idx + 63)
    local i = 1
    while i < #chunk and tonumber(chunk[i]) <= cut do
      sum = sum + tonumber(chunk[i + 1])
      i = i + 2
    end
    idx = idx + i - 1
    if i <= #chunk or #chunk < 64 then return idx, sum end
  end
end

local function tail()
  local t = redis.call('LRANGE', logKey, -2, -1)
  if #t < 2 then return nil, 0 end
  return tonumber(t[1]), tonumber(t[2])
end

local function remaining(tailAt)
  if tailAt and tailAt > now then return 0 end
  if rate - total > 0 then return rate - total end
  return 0
end

if op == 'available' then
  if forgotten then return reply(1, rate, 0, 0) end
  local _, sum = expired()
  total = total - sum
  return reply(1, remaining(tail()), 0, 0)
end

-- Every other op moves the log to now.
last = now
if forgotten then
  redis.call('DEL', logKey)
  total = 0
end
local k, sum = expired()
if k > 0 then
  redis.call('LTRIM', logKey, k, -1)
  total = total - sum
end

local function save()
  local tailAt = tail()
  if not tailAt then
    redis.call('DEL', stateKey, logKey)
    return
  end
  expiry = tailAt + interval
  redis.call('HSET', stateKey, 't', str(total), 'l', str(last), 'e', cfg[5], 'x', str(expiry))
  -- Redis drops the keys at the expiry; with a caller's clock, Redis expires
  -- keys in its own time, so keep them a minute longer (the expiry field
  -- still decides when the log counts as empty).
  local ttl = expiry - now
  if ARGV[4] ~= '' then ttl = ttl + 60000 end
  redis.call('PEXPIRE', stateKey, ttl)
  redis.call('PEXPIRE', logKey, ttl)
end

-- Walks the entries from the newest back; f(index, at, permits) returns true to stop.
local function from_tail(f)
  local hi = redis.call('LLEN', logKey) - 1
  while hi >= 1 do
    local lo = hi - 63
    if lo < 0 then lo = 0 end
    local chunk = redis.call('LRANGE', logKey, lo, hi)
    for i = #chunk - 1, 1, -2 do
      if f(lo + i - 1, tonumber(chunk[i]), tonumber(chunk[i + 1])) then return end
    end
    hi = lo - 1
  end
end

-- Takes up to want permits from the entry at index idx, dropping it when emptied.
local function take(idx, permits, want)
  if want > permits then want = permits end
  if want == permits then
    redis.call('LSET', logKey, idx, '-')
    redis.call('LSET', logKey, idx + 1, '-')
    redis.call('LREM', logKey, 2, '-')
  else
    redis.call('LSET', logKey, idx + 1, str(permits - want))
  end
  total = total - want
  return want
end

if op == 'cancel' then
  local at, got = tonumber(ARGV[3]), 0
  from_tail(function(idx, a, p)
    if a < at then return true end
    if a == at then got = take(idx, p, n); return true end
  end)
  save()
  return reply(1, got, 0, 0)
end

if op == 'release' then
  local got = 0
  from_tail(function(idx, a, p)
    if a <= now then got = got + take(idx, p, n - got) end
    return got >= n
  end)
  save()
  return reply(1, got, 0, 0)
end

-- acquire
local maxWait = tonumber(ARGV[3])
local tailAt, tailPermits = tail()

-- The earliest instant, at or after now and the tail, where n more permits fit.
local at = now
if tailAt and tailAt > at then at = tailAt end
local need = total + n - rate
if need > 0 then
  local dropped, idx, found = 0, 0, false
  while not found do
    local chunk = redis.call('LRANGE', logKey, idx, idx + 63)
    if #chunk == 0 then break end
    for i = 1, #chunk - 1, 2 do
      dropped = dropped + tonumber(chunk[i + 1])
      if dropped >= need then
        local free = tonumber(chunk[i]) + interval
        if free > at then at = free end
        found = true
        break
      end
    end
    idx = idx + #chunk
  end
end

local wait = at - now
if maxWait >= 0 and wait > maxWait then
  save()
  return reply(0, remaining(tailAt), wait, 0)
end
if tailAt == at then
  redis.call('LSET', logKey, -1, str(tailPermits + n))
else
  redis.call('RPUSH', logKey, str(at), str(n))
end
total = total + n
save()
return reply(1, remaining(at), wait, at)
