-- limiter.lua: a batch of calls on one limiter (one log: the Overall one or
-- one client's), atomically, under any algorithm. The rules are those of
-- algorithm/<name> (the Go code is the truth; differential tests hold this
-- script to it decision for decision, calls of a batch being taken one after
-- another at the same instant). Section by section it follows the Go files:
-- prelude, then sliding-log, fixed-window, sliding-counter, token-bucket and
-- leaky-bucket, then the batch loop. The state is loaded once and written
-- once per batch; that is what makes a batch cheaper than its calls alone.
--
-- KEYS[1] config hash {algorithm, mode, rate, interval (ms), epoch, burst, capacity}
-- KEYS[2] Overall state hash, KEYS[3] Overall list (log entries or windows:
--         [at1, permits1, at2, permits2, ...], oldest first)
-- KEYS[4] this client's state hash, KEYS[5] this client's list (PerClient)
-- ARGV[1] now in ms, or "" to read Redis TIME (the default: one clock for all clients)
-- ARGV[2..8] the config the client knows (algorithm, mode, rate, interval,
--            epoch, burst, capacity), restored when the stored one is missing;
--            ARGV[2] = "" when unknown
-- ARGV[9..] the calls, three arguments each:
--   op    "acquire" | "cancel" | "release" | "available"
--   n     permits (acquire, cancel, release)
--   arg   acquire: maximum wait in ms (-1: no bound); cancel: instant of the reservation
--
-- State hash fields: e epoch, l last now seen, x expiry (the state counts as
-- empty from then on), and per algorithm: t total (sliding-log), a tail
-- (sliding-counter), o owed and s scale (buckets).
--
-- Reply: {-1} not initialized, {-3} stored config unreadable, or
--   {now, algorithm, mode, rate, interval, epoch, burst, capacity,
--    then for each call: code, value, wait, at}
--   code  1 granted / done, 0 refused, -2 permits exceed the most grantable at once
--   value acquire, available: permits left; cancel, release: permits handed back
--   wait  acquire: ms until at when granted, retry-after when refused
-- Errors are replies, never raw Lua errors.

---------------------------------------------------------------- prelude
local op, n, arg3 -- the call being made: set by the batch loop
local function str(x) return string.format('%d', x) end
local function later(a, b) if a > b then return a end return b end
local function ceildiv(a, b) return math.floor((a + b - 1) / b) end

local injected = ARGV[1] ~= ''
local now
if injected then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local fields = {'algorithm', 'mode', 'rate', 'interval', 'epoch', 'burst', 'capacity'}
local cfg = redis.call('HMGET', KEYS[1], unpack(fields))
if not cfg[1] and not cfg[3] then
  if ARGV[2] == '' then return {-1} end
  cfg = {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]}
  redis.call('HSET', KEYS[1], 'algorithm', cfg[1], 'mode', cfg[2], 'rate', cfg[3], 'interval', cfg[4],
    'epoch', cfg[5], 'burst', cfg[6], 'capacity', cfg[7])
end
local alg = cfg[1]
local rate, interval, epoch = tonumber(cfg[3]), tonumber(cfg[4]), tonumber(cfg[5])
local burst, capacity = tonumber(cfg[6] or '0'), tonumber(cfg[7] or '0')
if (cfg[2] ~= 'overall' and cfg[2] ~= 'per-client') or not rate or rate < 1 or not interval
    or interval < 1 or not epoch or not burst or not capacity then
  return {-3}
end
local function reply(code, value, wait, at) return {code, value, wait, at} end

-- The most one request can be granted; checked before any state is touched.
local most = rate
if alg == 'token-bucket' then most = burst elseif alg == 'leaky-bucket' then most = capacity end
if alg ~= 'sliding-log' and alg ~= 'fixed-window' and alg ~= 'sliding-counter'
    and alg ~= 'token-bucket' and alg ~= 'leaky-bucket' or most < 1 then
  return {-3}
end

local stateKey, listKey = KEYS[2], KEYS[3]
if cfg[2] == 'per-client' then stateKey, listKey = KEYS[4], KEYS[5] end
-- The buckets keep all their state in the hash; the others a list too.
local hasList = alg ~= 'token-bucket' and alg ~= 'leaky-bucket'

-- Load the state once; state of another epoch (a reset) is discarded.
local S = {}
local raw = redis.call('HGETALL', stateKey)
for i = 1, #raw, 2 do S[raw[i]] = tonumber(raw[i + 1]) end
if #raw > 0 and S.e ~= epoch then
  redis.call('DEL', stateKey, listKey)
  S = {}
elseif #raw == 0 and hasList and redis.call('EXISTS', listKey) == 1 then
  redis.call('DEL', listKey)
end
local dirty = false -- S changed: write it at the end of the batch

-- Each call starts here: time never runs backwards for a state, and past
-- its expiry it counts as empty.
local last, expiry, forgotten
local function begin()
  last, expiry = S.l or 0, S.x or 0
  now = later(now, last)
  forgotten = expiry ~= 0 and now >= expiry
end

-- by_expiry caps a grant instant at the state's expiry, after which it is
-- empty and anything fits (algorithm.ByExpiry).
local function by_expiry(at)
  if expiry > now and at > expiry then return expiry end
  return at
end

-- save ends every change: the state with its expiry, or nothing when it is
-- empty (the list goes at once; the hash is written once, after the batch).
local function save(fieldsToSet, newExpiry)
  dirty = true
  if not newExpiry then
    if hasList then redis.call('DEL', listKey) end
    S = {}
    return
  end
  S = {e = epoch, l = now, x = newExpiry}
  for k, v in pairs(fieldsToSet) do S[k] = v end
end

-- flush writes the state once: the hash, and the keys' TTL (the expiry).
local function flush()
  if not dirty then return end
  if not S.x then
    redis.call('DEL', stateKey)
    return
  end
  local args = {}
  for k, v in pairs(S) do
    table.insert(args, k)
    table.insert(args, str(v))
  end
  redis.call('HSET', stateKey, unpack(args))
  -- With a caller's clock Redis still expires keys by its own, so keep them
  -- a minute longer (the x field decides when the state counts as empty).
  local ttl = S.x - now
  if injected then ttl = ttl + 60000 end
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', stateKey, ttl)
  if hasList then redis.call('PEXPIRE', listKey, ttl) end
end

-- List helpers: the list holds pairs [instant, permits], oldest first.
local function tail()
  local t = redis.call('LRANGE', listKey, -2, -1)
  if #t < 2 then return nil, 0 end
  return tonumber(t[1]), tonumber(t[2])
end

-- Walks the pairs from the newest back; f(index, at, permits) returns true to stop.
local function from_tail(f)
  local hi = redis.call('LLEN', listKey) - 1
  while hi >= 1 do
    local lo = hi - 63
    if lo < 0 then lo = 0 end
    local chunk = redis.call('LRANGE', listKey, lo, hi)
    for i = #chunk - 1, 1, -2 do
      if f(lo + i - 1, tonumber(chunk[i]), tonumber(chunk[i + 1])) then return end
    end
    hi = lo - 1
  end
end

-- Takes up to want permits from the pair at index idx, dropping it when emptied.
local function take(idx, permits, want)
  if want > permits then want = permits end
  if want == permits then
    redis.call('LSET', listKey, idx, '-')
    redis.call('LSET', listKey, idx + 1, '-')
    redis.call('LREM', listKey, 2, '-')
  else
    redis.call('LSET', listKey, idx + 1, str(permits - want))
  end
  return want
end

-- Pairs at the head before cut (at < cut, or at <= cut with inclusive):
-- their count as list elements and their permits.
local function head_before(cut, inclusive)
  local idx, sum = 0, 0
  while true do
    local chunk = redis.call('LRANGE', listKey, idx, idx + 63)
    local i = 1
    while i < #chunk do
      local at = tonumber(chunk[i])
      if at > cut or (at == cut and not inclusive) then break end
      sum = sum + tonumber(chunk[i + 1])
      i = i + 2
    end
    idx = idx + i - 1
    if i <= #chunk or #chunk < 64 then return idx, sum end
  end
end

-- Adds n permits to the newest pair if it starts at or after start, else
-- appends a pair (the window-based algorithms' Windows.Add).
local function add(start, permits)
  local t, p = tail()
  if t and t >= start then
    redis.call('LSET', listKey, -1, str(p + permits))
  else
    redis.call('RPUSH', listKey, str(start), str(permits))
  end
end

-- Takes up to want permits from the newest pair starting at or before t
-- and ending after it, pairs being span long (Windows.Take).
local function take_at_or_before(t, want, span)
  local got = 0
  from_tail(function(idx, a, p)
    if a > t then return false end
    if a + span > t then got = take(idx, p, want) end
    return true
  end)
  return got
end

-- Sum of the permits of pairs starting in [from, to) (Windows.Sum); the
-- window lists are a few pairs long.
local function sum_between(from, to)
  local all, s = redis.call('LRANGE', listKey, 0, -1), 0
  for i = 1, #all - 1, 2 do
    local a = tonumber(all[i])
    if a >= from and a < to then s = s + tonumber(all[i + 1]) end
  end
  return s
end

local function window_start(t) return t - t % interval end

---------------------------------------------------------------- sliding-log
local function sliding_log()
  local total = S.t or 0
  if op == 'available' then
    if forgotten then return reply(1, rate, 0, 0) end
    local _, sum = head_before(now - interval, true)
    total = total - sum
    local t = tail()
    if t and t > now then return reply(1, 0, 0, 0) end
    return reply(1, later(rate - total, 0), 0, 0)
  end
  -- The live log: nothing past its expiry, else all but the entries at the
  -- head that have left the window (k list elements). Only a change
  -- writes it back (commit): a refusal changes nothing (State.Acquire).
  local k, sum = 0, 0
  if forgotten then
    total = 0
  else
    k, sum = head_before(now - interval, true)
    total = total - sum
  end
  local function commit()
    if forgotten then
      redis.call('DEL', listKey)
    elseif k > 0 then
      redis.call('LTRIM', listKey, k, -1)
    end
    k = 0
  end
  local function finish()
    local t = tail()
    if t then save({t = total}, t + interval) else save({}, nil) end
  end
  local function remaining()
    local t = tail()
    if t and t > now then return 0 end
    return later(rate - total, 0)
  end

  if op == 'cancel' then
    commit()
    local at, got = arg3, 0
    from_tail(function(idx, a, p)
      if a < at then return true end
      if a == at then got = take(idx, p, n); return true end
    end)
    total = total - got
    finish()
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    commit()
    local got = 0
    from_tail(function(idx, a, p)
      if a <= now then got = got + take(idx, p, n - got) end
      return got >= n
    end)
    total = total - got
    finish()
    return reply(1, got, 0, 0)
  end

  -- acquire: the earliest instant, at or after now and the tail, where n fit.
  -- The tail is read once: a tail that has left the window is before now,
  -- so it changes nothing below whether or not commit drops it.
  local maxWait = arg3
  local tailAt, tailPermits = tail()
  local at = now
  if tailAt and tailAt > at then at = tailAt end
  local need = total + n - rate
  if need > 0 then
    local dropped, idx, found = 0, k, false
    while not found do
      local chunk = redis.call('LRANGE', listKey, idx, idx + 63)
      if #chunk == 0 then break end
      for i = 1, #chunk - 1, 2 do
        dropped = dropped + tonumber(chunk[i + 1])
        if dropped >= need then
          at = later(at, tonumber(chunk[i]) + interval)
          found = true
          break
        end
      end
      idx = idx + #chunk
    end
  end
  at = by_expiry(at)
  local wait = at - now
  if maxWait >= 0 and wait > maxWait then
    local left = later(rate - total, 0)
    if tailAt and tailAt > now then left = 0 end
    return reply(0, left, wait, 0)
  end
  commit()
  if tailAt and tailAt >= at then -- at is the tail: one entry per instant
    redis.call('LSET', listKey, -1, str(tailPermits + n))
  else
    redis.call('RPUSH', listKey, str(at), str(n))
  end
  total = total + n
  save({t = total}, at + interval) -- the new tail is at
  local left = later(rate - total, 0)
  if at > now then left = 0 end
  return reply(1, left, wait, at)
end

---------------------------------------------------------------- fixed-window and sliding-counter
-- Both keep a few windows [start, permits]; the counter also keeps its tail.
local function windows(counter)
  local keep = interval -- windows a state keeps after the current one starts
  if counter then keep = 2 * interval end
  local tailAt = S.a or 0
  if forgotten then
    -- Past its expiry the state is empty, and a call on an empty state is
    -- always granted (or only reads): clearing it now is no refusal's write.
    if op ~= 'available' then redis.call('DEL', listKey) end
    tailAt = 0
  end
  local function prune()
    local k = head_before(window_start(now) - keep + interval, false)
    if k > 0 then redis.call('LTRIM', listKey, k, -1) end
  end
  local function counts(t)
    local w = window_start(t)
    return w, sum_between(w - interval, w), sum_between(w, w + interval)
  end
  local function newest_tail(t0)
    if counter then return later(t0, tailAt) end
    local t = tail()
    if t then return later(t0, t) end
    return t0
  end
  local function remaining()
    if newest_tail(now) > now then return 0 end
    local w, prev, cur = counts(now)
    local weighed = 0
    if counter then weighed = ceildiv(prev * (interval - (now - w)), interval) end
    return later(rate - cur - weighed, 0)
  end
  local function finish()
    local t = tail()
    if not t then
      save({}, nil)
      tailAt = 0 -- an empty state is fresh, tail and all (State.settle)
    elseif counter then
      save({a = tailAt}, window_start(t) + 2 * interval)
    else
      save({}, window_start(t) + interval)
    end
  end

  if op == 'available' then
    if forgotten then return reply(1, rate, 0, 0) end
    -- Read-only: count as if pruned (sums look only at recent windows).
    return reply(1, remaining(), 0, 0)
  end
  if op == 'cancel' then
    prune()
    local got = take_at_or_before(arg3, n, interval)
    finish()
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    prune()
    local got
    if not counter then
      got = take_at_or_before(now, n, interval)
    elseif tailAt > now then
      got = take_at_or_before(window_start(now) - 1, n, 2 * interval)
    else
      got = take_at_or_before(now, n, 2 * interval)
    end
    finish()
    return reply(1, got, 0, 0)
  end

  -- acquire
  local maxWait = arg3
  local at = newest_tail(now)
  if counter then
    while true do
      local w, prev, cur = counts(at)
      local room = rate - cur - n
      local done = false
      if room >= 0 then
        local e = at - w
        if prev > 0 then e = later(e, interval - math.floor(room * interval / prev)) end
        if e < interval then at = w + e; done = true end
      end
      if done then break end
      at = w + interval
    end
  else
    local w = window_start(at)
    if sum_between(w, w + interval) + n > rate then at = w + interval end
  end
  at = by_expiry(at)
  local wait = at - now
  if maxWait >= 0 and wait > maxWait then
    return reply(0, remaining(), wait, 0) -- a refusal changes nothing
  end
  prune()
  add(window_start(at), n)
  if counter then tailAt = at end
  finish()
  return reply(1, remaining(), wait, at)
end

---------------------------------------------------------------- token-bucket and leaky-bucket
-- Both keep a deficit (algorithm.Deficit): owed = permits x scale still to drain.
local function bucket(leaky)
  local owed, scale = S.o or 0, S.s or 0
  -- Advance (Deficit.Advance).
  if forgotten then owed = 0 end
  if owed > 0 and scale ~= interval then
    local q, r = math.floor(owed / scale), owed % scale
    owed = q * interval + ceildiv(r * interval, scale)
  end
  if now - last > 0 then
    if now - last >= ceildiv(owed, rate) then owed = 0 else owed = owed - (now - last) * rate end
  end
  local function wait_for(o, limit)
    if o <= limit then return 0 end
    return ceildiv(o - limit, rate)
  end
  local function remaining()
    if leaky then
      if math.floor(owed / rate) > 0 then return 0 end
      return later(math.floor((capacity * interval - owed) / interval), 0)
    end
    return later(math.floor((burst * interval - owed) / interval), 0)
  end
  local function finish()
    if owed == 0 then save({}, nil) else save({o = owed, s = interval}, now + ceildiv(owed, rate)) end
  end
  -- Deficit.GiveBack: hand back only what no later reservation built on.
  local function give_back(at, hold)
    local after = later(0, owed - (at - now) * rate - hold)
    local give = math.min(later(0, n * interval - after), owed)
    owed = owed - give
    return math.floor(give / interval)
  end
  local hold = burst * interval
  if leaky then hold = n * interval + rate - 1 end

  if op == 'available' then return reply(1, remaining(), 0, 0) end
  if op == 'cancel' then
    local at, got = arg3, 0
    if at > now then got = give_back(at, hold) end
    finish()
    return reply(1, got, 0, 0)
  end
  if op == 'release' and not leaky then
    local got = give_back(now, hold)
    finish()
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    finish()
    return reply(1, 0, 0, 0)
  end

  -- acquire
  local maxWait = arg3
  local wait, refuse
  if leaky then
    wait = math.floor(owed / rate) -- whole ms of work ahead, rounded down
    refuse = wait_for(owed, (capacity - n) * interval) > 0
  else
    wait = wait_for(owed + n * interval, burst * interval)
    refuse = false
  end
  wait = by_expiry(now + wait) - now
  if refuse or (maxWait >= 0 and wait > maxWait) then
    return reply(0, remaining(), wait, 0) -- a refusal changes nothing
  end
  owed = owed + n * interval
  finish()
  return reply(1, remaining(), wait, now + wait)
end

---------------------------------------------------------------- the batch loop
local handle
if alg == 'sliding-log' then handle = sliding_log
elseif alg == 'fixed-window' then handle = function() return windows(false) end
elseif alg == 'sliding-counter' then handle = function() return windows(true) end
elseif alg == 'token-bucket' then handle = function() return bucket(false) end
else handle = function() return bucket(true) end
end

local out = {0, cfg[1], cfg[2], cfg[3], cfg[4], cfg[5], str(burst), str(capacity)}
for i = 9, #ARGV - 2, 3 do
  op, n, arg3 = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local r
  if op == 'acquire' and n > most then
    r = reply(-2, 0, 0, 0)
  else
    begin()
    r = handle()
  end
  for j = 1, 4 do table.insert(out, r[j]) end
end
flush()
out[1] = now
return out
