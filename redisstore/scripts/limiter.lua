-- limiter.lua: the batch loop. A run serves a batch of calls on one or more
-- limiters (the store groups the calls of different limiters on one
-- server), each on one state (the Overall one or one client's), atomically,
-- under its algorithm: the rules the algorithm's file registered in
-- algorithms (prelude.lua). Calls of a batch are taken one after another
-- at the same instant. A limiter's state is loaded once and written once
-- per run; that is what makes a batch cheaper than its calls alone.
-- Functions are made once per run (once ever as a function library), never
-- per call, and a call only touches Redis where its algorithm keeps a list.
--
-- KEYS, four per limiter:
--   1 the limiter hash: field c, its config, field t, the instant (µs) it
--     took effect when it kept the epoch of another or was restored (the
--     buckets count the time before it at the config their state was last
--     changed under; absent: as if always), and field s, its Overall
--     state. It persists until Delete or Expire; the state counts as empty
--     past its expiry.
--   2 the Overall list of an algorithm that keeps one (the sliding log)
--   3 this client's state (PerClient; a string with a TTL), 4 its list
-- ARGV[1] now in µs, or "" to read Redis TIME (the default: one clock for all clients)
-- then per limiter:
--   the config the client knows, "algorithm mode rate interval epoch burst
--   capacity" (interval in ms), restored when the stored one is missing;
--   "" when unknown
--   the number of calls, then the calls, three arguments each:
--     op    "acquire" | "cancel" | "release" | "available"
--     n     permits (acquire, cancel, release)
--     arg   acquire: maximum wait in µs (-1: no bound); cancel: instant of the
--           reservation, in µs
--           release: a sliding log takes only entries made at or before
--           this instant, in µs (-1: no bound); others ignore it
--
-- A config and a state are each one string, read and written whole: in
-- Redis's Lua every field, table and string costs, and this keeps a
-- limiter's keys small (prelude.lua and each algorithm's file say how a
-- state is written). The Overall state goes with its epoch (setconfig.lua).
--
-- Reply: one MessagePack array (cmsgpack.pack), per limiter: now, flag, then
--   flag -1: not initialized, -3: stored config unreadable, -4: PerClient,
--           sent by lone without the client's keys (nothing follows)
--   flag 0: the stored config is the one the client sent; 1: it is not, and
--           follows, as one string
--   then for each call: code, value, wait (prelude.lua's reply)
-- Errors are replies, never raw Lua errors; a limiter whose keys hold what
-- redlimit did not write answers -3 alone.

-- parse reads a config: {impl, mode, epoch text, rate, interval, epoch,
-- burst, capacity, the most one request can be granted}, or false when it
-- is unreadable.
local function parse(cfg)
  local A, M, R, I, E, B, C = string.match(cfg, '^(%S+) (%S+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  local impl = A and algorithms[A]
  if not impl or (M ~= 'overall' and M ~= 'per-client') then return false end
  local p = {impl = impl, mode = M, epochText = E, rate = tonumber(R), interval = tonumber(I),
    burst = tonumber(B), capacity = tonumber(C)}
  p.most = p[impl.most]
  if p.rate < 1 or p.interval < 1 or p.most < 1 then return false end
  -- A bucket's state ends with the config it was counted under: kept as
  -- text, it is compared and written without a number read or made.
  p.bucketTail = fmt('%d %d %d', p.interval * 1000, p.rate, p.burst)
  return p
end

-- parsed keeps the configs read, by their text: a function library's
-- locals live from one run to the next (a script's do not, and parse
-- again). It is emptied when it holds 256. It holds no limiter's state.
local parsed, parsedCount = {}, 0

-- parsed_config is parse(cfg), through parsed.
local function parsed_config(cfg)
  local p = parsed[cfg]
  if p == nil then
    p = parse(cfg)
    if parsedCount == 256 then parsed, parsedCount = {}, 0 end
    parsed[cfg], parsedCount = p, parsedCount + 1
  end
  return p
end

-- ctx is the context (prelude.lua) of the limiter being served and
-- numbers the numbers of its state string (decode_state): one table each,
-- which load fills anew for every limiter (each field of the context is
-- set there or by its algorithm's open; what is left of the limiter
-- before is never read), so that serving a limiter makes no table but its
-- state. With one call per limiter, as on many keys, tables made per
-- limiter cost Redis's Lua a large share of the run.
local ctx, numbers = {}, {}

-- load reads the config and the state of the limiter whose KEYS start
-- after k and whose ARGV start at a, into ctx. It returns the flag of the
-- reply (0 or 1, or an error: -1, -3), the stored config and the context.
local function load(keys, argv, start, k, a, got)
  got = got or redis.call('HMGET', keys[k + 1], 'c', 's', 't')
  local cfg, st = got[1], got[2]
  local since = tonumber(got[3]) or 0
  local flag = 0 -- the stored config is the one the client sent
  if not cfg then
    if argv[a] == '' then return -1 end
    cfg, st = argv[a], false
    -- A limiter hash without a config holds no state either.
    if got[2] then redis.call('HDEL', keys[k + 1], 's') end
    -- The states left (a client's) count at their own config until now.
    since = start
    redis.call('HSET', keys[k + 1], 'c', cfg, 't', str(since))
  elseif cfg ~= argv[a] then
    flag = 1
  end
  local p = parsed_config(cfg)
  if not p then return -3 end
  local impl = p.impl
  local unit = impl.unit
  local perClient = p.mode == 'per-client'
  -- A lone call (lone) sends no client's keys.
  if perClient and not keys[k + 3] then return -4 end
  local c = ctx
  c.impl, c.unit, c.now, c.rate, c.interval = impl, unit, floor(start / unit), p.rate, p.interval * 1000 / unit
  c.burst, c.capacity, c.most, c.since, c.perClient = p.burst, p.capacity, p.most, since, perClient
  c.dirty, c.forgotten, c.out = false, false, nil
  if perClient then
    c.stateKey, c.listKey, c.epochText = keys[k + 3], keys[k + 4], p.epochText
    st = redis.call('GET', c.stateKey)
  else
    c.stateKey, c.listKey, c.epochText = keys[k + 1], keys[k + 2], nil
  end
  if impl.open then impl.open(c) end
  local S
  if st then
    -- The Overall state always belongs to the config (setconfig.lua drops
    -- it with the epoch); a client's carries its epoch first.
    S = decode_state(impl, st, c.epochText, numbers)
    if not S then
      -- State of another epoch (a reset), or unreadable: it is gone.
      if perClient then redis.call('DEL', c.stateKey) end
      if impl.list then redis.call('DEL', c.listKey) end
      st = not perClient
    end
  elseif impl.list and redis.call('EXISTS', c.listKey) == 1 then
    redis.call('DEL', c.listKey) -- a list whose state is gone
  end
  c.S = S or {}
  c.hadState = st and true or false -- a state was stored (so an empty one is deleted)
  return flag, cfg, c
end

-- flush writes the state once, as one string, with the TTL of the keys
-- that hold only state (the limiter hash keeps its config, and its own TTL).
local function flush(c, injected)
  local impl = c.impl
  if impl.finish then impl.finish(c) end
  if not c.dirty then return end
  local S, perClient = c.S, c.perClient
  if not S.Expiry then
    if not c.hadState then return end
    if perClient then redis.call('DEL', c.stateKey) else redis.call('HDEL', c.stateKey, 's') end
    return
  end
  local st = encode_state(impl, c, S)
  if perClient then st = c.epochText .. ' ' .. st end
  local ttl = key_ttl(S.Expiry * c.unit, c.now * c.unit, injected) -- ms
  if perClient then
    redis.call('SET', c.stateKey, st, 'PX', ttl)
  else
    redis.call('HSET', c.stateKey, 's', st)
  end
  if impl.list then redis.call('PEXPIRE', c.listKey, ttl) end
end

-- serve answers the calls of the limiter whose KEYS start after k and
-- whose ARGV start at a, from out[head] on.
local function serve(keys, argv, start, injected, out, k, a, calls, head, got)
  local flag, cfg, c = load(keys, argv, start, k, a, got)
  out[head], out[head + 1] = start, flag
  if flag == 1 then out[head + 2] = cfg end
  if flag < 0 then return end
  c.out = out
  -- Only this loop moves c.now, and the algorithms change c.S's fields,
  -- never c.S: both are kept here in locals, read on every call.
  local impl, unit, most, S, now = c.impl, c.unit, c.most, c.S, c.now
  local tonumber = tonumber -- a global costs a table lookup per use
  for i = a + 2, a - 1 + 3 * calls, 3 do
    local op, n = argv[i], tonumber(argv[i + 1])
    if op == 'acquire' and n > most then
      reply(c, -2, 0, 0)
    else
      -- Each call starts here: time never runs backwards for a state,
      -- and past its expiry it counts as empty.
      local last, expiry = S.Last, S.Expiry or 0
      if last and last > now then now = last end
      c.now, c.forgotten = now, expiry ~= 0 and now >= expiry
      -- A wait or an instant in µs, in the limiter's unit (a wait rounded
      -- down: never longer than the caller allowed).
      local a3 = tonumber(argv[i + 2])
      if a3 > 0 then a3 = floor(a3 / unit) end
      local f = impl[op]
      if op == 'available' then f(c, S) else f(c, S, n, a3) end
    end
  end
  flush(c, injected)
  out[head] = now * unit
end

-- window_grant is a fixed window's acquire of n at now (fixedwindow.lua)
-- on a state of one window starting at ws (nil: none) holding q, with no
-- reservation, expiring at expiry (0: none): nil when the acquire would
-- reserve (the general path answers); false, the permits left and the
-- wait when refused; true, the window's count and start after the grant
-- and the state's new expiry when granted.
local function window_grant(now, rate, interval, n, ws, q, expiry, maxWait)
  local w = now - now % interval
  if not (ws and ws >= w) then ws, q = w, 0 end
  if q + n > rate then
    local at = w + interval
    if expiry > now and at > expiry then at = expiry end
    local wait = at - now
    if maxWait < 0 or wait <= maxWait then return nil end
    return false, later(rate - q, 0), wait
  end
  q = q + n
  return true, q, ws, ws - ws % interval + interval
end

-- bucket_grant is a token bucket's (leaky: a leaky bucket's) acquire of n
-- at now (tokenbucket.lua, leakybucket.lua) on a deficit owed as of l,
-- with no queue: nil when the acquire would reserve (the general path
-- answers); false, whether a leaky bucket's queue is full, the permits
-- left and the wait when refused; true, the permits left and the deficit
-- after the grant when granted.
local function bucket_grant(leaky, now, rate, interval, burst, capacity, n, owed, l, maxWait)
  if now - l > 0 and owed > 0 then -- deficit_drain
    if now - l >= ceildiv(owed, rate) then owed = 0 else owed = owed - (now - l) * rate end
  end
  local after, left = owed + n * interval, 0
  if leaky then
    -- The work ahead makes it wait; no room: full.
    local wait, limit = ceildiv(owed, rate), (capacity - n) * interval
    local full = owed > limit and ceildiv(owed - limit, rate) > 0
    if full or (maxWait >= 0 and wait > maxWait) then
      if owed <= 0 then left = later(floor((capacity * interval - owed) / interval), 0) end
      return false, full, left, wait
    end
    if wait > 0 then return nil end
  else
    local limit, wait = burst * interval, 0
    if after > limit then wait = ceildiv(after - limit, rate) end
    if maxWait >= 0 and wait > maxWait then return false, false, later(floor((limit - owed) / interval), 0), wait end
    if wait > 0 then return nil end
    left = later(floor((limit - after) / interval), 0)
  end
  return true, left, after
end

-- counter_grant is a sliding counter's acquire of n at now (slidingcounter.lua)
-- on a state of at most two windows (s1, p1 and s2, p2, oldest first;
-- nil: none) and its tail, when it is granted at once: true, the
-- permits left, the expiry and the windows after it (k of them). False
-- when it is not (a wait, a reservation queued, a third window): the
-- general path answers.
local function counter_grant(now, rate, interval, n, tail, s1, p1, s2, p2)
  if tail > now or (s2 or s1 or 0) > now then return false end -- a reservation
  local w = now - now % interval
  local lo = w - interval
  local prev, cur = 0, 0
  if s1 then if s1 >= w then cur = cur + p1 elseif s1 >= lo then prev = prev + p1 end end
  if s2 then if s2 >= w then cur = cur + p2 elseif s2 >= lo then prev = prev + p2 end end
  local room = rate - cur - n
  if room < 0 then return false end -- a wait
  if prev > 0 and interval - floor(room * interval / prev) > now - w then return false end -- a wait
  -- Granted now: the windows before the previous one go, n counts in
  -- the newest if it is the current one, else in a new one.
  local k = 0
  if s2 and s2 >= lo then
    if s1 >= lo then k = 2 else s1, p1, s2, k = s2, p2, nil, 1 end
  elseif s1 and s1 >= lo then
    s2, k = nil, 1
  end
  if k == 2 and s2 >= w then
    p2 = p2 + n
  elseif k == 1 and s1 >= w then
    p1 = p1 + n
  elseif k == 2 then
    return false -- a third window
  elseif k == 1 then
    s2, p2, k = w, n, 2
  else
    s1, p1, k = w, n, 1
  end
  local newest = k == 2 and s2 or s1
  local e = newest - newest % interval + 2 * interval
  prev, cur = 0, 0
  if s1 >= w then cur = cur + p1 else prev = prev + p1 end
  if k == 2 then if s2 >= w then cur = cur + p2 else prev = prev + p2 end end
  return true, later(rate - cur - ceildiv(prev * (interval - (now - w)), interval), 0), e, k, s1, p1, s2, p2
end

-- log_grant serves, as serve would (slidinglog.lua's acquire), a lone
-- acquire of n on an Overall sliding log of the limiter hash key and list
-- listKey, with state st (nil: none) and field t since, at start (µs),
-- when it is granted at once: it returns the reply's now (µs) and the
-- permits left. It returns nil, having changed nothing, when it is not
-- (a wait, a refusal, a reservation queued) or the state or the list is
-- not one it reads at a glance: serve answers. The list's head is read
-- only in a new ms, or when a config changed since the state was
-- written: every write trims the entries that left the window, and
-- within a ms the cut stays. Entries are one per ms, so a new ms can
-- have let at most one out per ms gone by; more than two: serve.
local function log_grant(key, listKey, st, since, start, rate, interval, n, injected)
  local now = floor(start / 1000)
  local last, expiry, total = 0, 0, 0
  if st then
    local l, x, t = string.match(st, '^(%d+) (%d+) (%d+)$')
    if not l then return nil end
    last, total = tonumber(l), tonumber(t)
    expiry = last + tonumber(x)
    if last > now then now = last end
  end
  local newExpiry = now + interval
  if now >= expiry then
    -- No state, or past its expiry: the list goes, n is the one entry.
    redis.call('DEL', listKey)
    redis.call('RPUSH', listKey, str(now), str(n))
    total = n
  else
    local k, sum = 0, 0
    if now ~= last or floor(since / 1000) >= last then
      local cut = now - interval
      local head = redis.call('LRANGE', listKey, 0, 3)
      while k < #head and tonumber(head[k + 1]) <= cut do
        sum, k = sum + tonumber(head[k + 2]), k + 2
      end
      if k > 0 and k == #head then return nil end -- more may have left
    end
    total = total - sum
    if total + n > rate then return nil end -- a wait or a refusal
    local tail = redis.call('LRANGE', listKey, -2, -1)
    if #tail < 2 then return nil end
    local tAt = tonumber(tail[1])
    if tAt > now then return nil end -- a reservation
    if k > 0 then redis.call('LTRIM', listKey, k, -1) end
    if tAt == now then
      redis.call('LSET', listKey, -1, str(tonumber(tail[2]) + n))
    else
      redis.call('RPUSH', listKey, str(now), str(n))
    end
    total = total + n
    -- An expiry kept keeps the list's TTL, set to it by Redis's clock.
    if newExpiry == expiry and not injected then newExpiry = nil end
  end
  redis.call('HSET', key, 's', fmt('%d %d %d', now, interval, total))
  if newExpiry then
    local ttl = interval
    if injected then ttl = ttl + 60000 end
    redis.call('PEXPIRE', listKey, ttl)
  end
  return now * 1000, later(rate - total, 0)
end

-- serve_fast serves, as serve would, a limiter of one call, an acquire,
-- when it is an Overall fixed window, sliding counter, token bucket, leaky
-- bucket or sliding log whose config is stored as sent, the acquire is
-- granted at once or refused (beyond the caller's wait, or a full queue;
-- a sliding counter's and a sliding log's refusals go to serve), and the
-- state is one it reads by one string.match: a window of one window (a
-- counter: two) and no reservation, a bucket without a queue counted
-- under the config, a log without a reservation (log_grant). The rules
-- are the algorithm's file's, the state written the same, without the
-- context, the algorithm's tables and gmatch per number: the common call,
-- on one limiter or on many keys. Anything else returns false, having
-- changed nothing, with what HMGET read, for serve. key and listKey are
-- the limiter's KEYS, sent the config the client sent, n and maxWait the
-- call's arguments (text).
local fixedAlgorithm, bucketAlgorithm, leakyAlgorithm, counterAlgorithm, logAlgorithm
local function serve_fast(key, listKey, sent, n, maxWait, start, injected, out, head)
  -- Field t only counts for the sliding log here: the others leave it
  -- unread (serve reads them all again).
  local p = parsed_config(sent)
  if not p then return false end
  local got
  if p.impl.list then got = redis.call('HMGET', key, 'c', 's', 't') else got = redis.call('HMGET', key, 'c', 's') end
  local cfg, st = got[1], got[2]
  if got[3] == nil then got = nil end
  if not cfg or cfg ~= sent then return false, got end
  n, maxWait = tonumber(n), tonumber(maxWait)
  if p.mode ~= 'overall' or not n or not maxWait or n < 1 or n > p.most then return false, got end
  if not fixedAlgorithm then
    fixedAlgorithm, bucketAlgorithm, leakyAlgorithm = algorithms['fixed-window'], algorithms['token-bucket'], algorithms['leaky-bucket']
    counterAlgorithm, logAlgorithm = algorithms['sliding-counter'], algorithms['sliding-log']
  end
  if p.impl == logAlgorithm then
    local now, left = log_grant(key, listKey, st, tonumber(got[3]) or 0, start, p.rate, p.interval, n, injected)
    if not now then return false, got end
    out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, 1, left, 0
    return true
  end
  local now, rate, interval = start, p.rate, p.interval * 1000
  if p.impl == fixedAlgorithm then
    local ws, q, expiry = nil, 0, 0
    if st then
      local l, x, s, m = string.match(st, '^u (%d+) (%d+) (%-?%d+) (%d+)$')
      if not l then return false, got end
      l, x, ws, q = tonumber(l), tonumber(x), tonumber(s), tonumber(m)
      ws, expiry = l + ws, l + x
      if l > now then now = l end
      if now >= expiry then ws = nil end -- past its expiry: empty
      if ws and ws > now then return false, got end -- a reservation
    end
    local ok, a1, a2, e = window_grant(now, rate, interval, n, ws, q, expiry, maxWait)
    if ok == nil then return false, got end -- a reservation
    if not ok then
      out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, 0, a1, a2
      return true
    end
    q, ws = a1, a2
    redis.call('HSET', key, 's', fmt('u %d %d %d %d', now, e - now, ws - now, q))
    out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, 1, rate - q, 0
    return true
  elseif p.impl == counterAlgorithm then
    -- slidingcounter.lua, with at most two windows and no reservation.
    local tail, s1, p1, s2, p2, expiry = 0, nil, 0, nil, 0, 0
    if st then
      local l, x, t, a1, b1, a2, b2 = string.match(st, '^u (%d+) (%d+) (%-?%d+) (%-?%d+) (%d+) (%-?%d+) (%d+)$')
      if not l then
        l, x, t, a1, b1 = string.match(st, '^u (%d+) (%d+) (%-?%d+) (%-?%d+) (%d+)$')
        if not l then return false, got end
      end
      l = tonumber(l)
      expiry = l + tonumber(x)
      if l > now then now = l end
      if now < expiry then -- else past its expiry: empty
        tail, s1, p1 = l + tonumber(t), l + tonumber(a1), tonumber(b1)
        if a2 then s2, p2 = l + tonumber(a2), tonumber(b2) end
      end
    end
    local ok, left, e, k
    ok, left, e, k, s1, p1, s2, p2 = counter_grant(now, rate, interval, n, tail, s1, p1, s2, p2)
    if not ok then return false, got end
    if k == 1 then
      st = fmt('u %d %d 0 %d %d', now, e - now, s1 - now, p1)
    else
      st = fmt('u %d %d 0 %d %d %d %d', now, e - now, s1 - now, p1, s2 - now, p2)
    end
    redis.call('HSET', key, 's', st)
    out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, 1, left, 0
    return true
  elseif p.impl == bucketAlgorithm or p.impl == leakyAlgorithm then
    local burst, owed, l = p.burst, 0, 0
    if st then
      local L, o, tail = string.match(st, '^u (%d+) %d+ (%d+) (%d+ %d+ %d+)$')
      if not L or tail ~= p.bucketTail then return false, got end
      l, owed = tonumber(L), tonumber(o)
      if l > now then now = l end
    end
    local ok, a1, a2, a3 = bucket_grant(p.impl == leakyAlgorithm, now, rate, interval, burst, p.capacity, n, owed, l, maxWait)
    if ok == nil then return false, got end -- a reservation
    if not ok then -- a1: full (2)
      out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, a1 and 2 or 0, a2, a3
      return true
    end
    local left, after = a1, a2
    redis.call('HSET', key, 's', fmt('u %d %d %d %s', now, ceildiv(after, rate), after, p.bucketTail))
    out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = now, 0, 1, left, 0
    return true
  end
  return false, got
end

-- main serves one run. The files are loaded both as a script (EVALSHA,
-- with "return main(KEYS, ARGV)" appended) and, where Redis has them
-- (7.0+), as a function library, whose definitions are then made once
-- instead of on every run.
local function main(keys, argv)
  local start, injected = run_start(argv)
  local out = {}
  local k, a = 0, 2
  while a + 1 <= #argv do
    local calls = tonumber(argv[a + 1]) or 0
    local head = #out + 1
    local done, got = false, nil
    if calls == 1 and argv[a + 2] == 'acquire' then
      -- An error (keys of a wrong type) is left to serve, which answers it.
      local ok, r, g = pcall(serve_fast, keys[k + 1], keys[k + 2], argv[a], argv[a + 3], argv[a + 4], start, injected, out, head)
      if ok then done, got = r, g end
    end
    -- A limiter whose keys hold what redlimit did not write (a wrong type,
    -- garbage) answers "unreadable" alone: the others of the run go on.
    if not done and not pcall(serve, keys, argv, start, injected, out, k, a, calls, head, got) then
      for i = #out, head, -1 do out[i] = nil end
      out[head], out[head + 1] = start, -3
    end
    k, a = k + 4, a + 2 + 3 * calls
  end
  return cmsgpack.pack(out)
end

-- lone serves a run of one acquire on a limiter the client knows as an
-- Overall one, the call of a caller alone, in fewer strings than main
-- takes (each costs Redis a string and a Lua string per run).
-- KEYS: 1 the limiter hash, 2 its Overall list (limiter.lua's 1 and 2)
-- ARGV: 1 now (as main's), 2 the config the client knows, 3 n, 4 the
-- maximum wait in µs (-1: no bound)
-- Reply: main's for one limiter of that call; flag -4 (nothing follows)
-- when the stored config is PerClient: the client sends the call again
-- through main, with the client's keys.
local function lone(keys, argv)
  local start, injected = run_start(argv)
  -- Made at its size: a table grown slot by slot is reallocated as it goes.
  local out = {false, false, false, false, false}
  local ok, done, got = pcall(serve_fast, keys[1], keys[2], argv[2], argv[3], argv[4], start, injected, out, 1)
  if ok and done then return cmsgpack.pack(out) end
  if not ok then got = nil end
  out = {}
  local calls = {argv[1], argv[2], '1', 'acquire', argv[3], argv[4]}
  if not pcall(serve, keys, calls, start, injected, out, 0, 2, 1, 1, got) then
    for i = #out, 1, -1 do out[i] = nil end
    out[1], out[2] = start, -3
  end
  return cmsgpack.pack(out)
end
