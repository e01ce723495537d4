-- limiter.lua: a batch of calls on one limiter (one state: the Overall one
-- or one client's), atomically, under any algorithm. The rules are those of
-- algorithm/<name> (the Go code is the truth; differential tests hold this
-- script to it decision for decision, calls of a batch being taken one after
-- another at the same instant). Section by section it follows the Go files:
-- prelude, then sliding-log, fixed-window and sliding-counter, token-bucket
-- and leaky-bucket, then the batch loop. The state is loaded once and written
-- once per batch; that is what makes a batch cheaper than its calls alone.
-- Functions are made once per run, never per call, and a call only touches
-- Redis where its algorithm keeps a list (the sliding log).
--
-- A run may carry several limiters (the store groups the calls of
-- different limiters on one server): KEYS and ARGV hold one group per
-- limiter, taken one after another, each with the rules below.
--
-- Time is in microseconds since the Unix epoch (Redis TIME has them), so the
-- fixed window, the sliding counter and the buckets keep to their spacing
-- for rates up to 10^6 per second. The sliding log counts milliseconds
-- inside (its list has an entry per ms): its instants, waits and
-- retry-afters are whole ms, still sent and answered in µs. Every value
-- stays below 2^53, exact as a Lua number (redlimit.MaxCountTimesInterval).
--
-- KEYS, four per limiter:
--   1 the limiter hash: field c, its config, field t, the instant (µs) it
--     took effect when it kept the epoch of another or was restored (the
--     buckets count the time before it at the config their state was last
--     changed under; absent: as if always), and field s, its Overall
--     state. It persists until Delete or Expire; the state counts as empty
--     past its expiry.
--   2 the Overall sliding-log list: [at1, permits1, at2, permits2, ...],
--     oldest first (the only algorithm whose state is a list)
--   3 this client's state (PerClient; a string with a TTL), 4 its sliding-log list
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
-- limiter's keys small. A state is "last expiry" (last: the latest now it
-- saw; past expiry it counts as empty) followed by, per algorithm: total
-- (sliding-log); start permits start permits ... of its windows, oldest
-- first (fixed-window); the tail, then the windows (sliding-counter); owed
-- scale rate burst, the config owed is counted under, then while a queue of
-- reservations is open its head and tail, live grants and held debt
-- (buckets; algorithm.Deficit). Instants after the first are offsets from
-- it. The states in µs (all but the
-- sliding log's, in ms) start with the mark "u": one without it was written
-- in ms by an older redlimit and is gone, as a state of another epoch (and
-- such a redlimit, finding no number first, takes ours as gone too). A
-- client's state starts with the epoch of its config; one of another epoch
-- is gone (a reset). The Overall state goes with its epoch (setconfig.lua).
--
-- Reply: one MessagePack array (cmsgpack.pack), per limiter: now, flag, then
--   flag -1: not initialized, -3: stored config unreadable (nothing follows)
--   flag 0: the stored config is the one the client sent; 1: it is not, and
--           follows, as one string
--   then for each call: code, value, wait
--   code  1 granted / done, 0 refused, 2 refused: a leaky bucket's queue is full,
--         -2 permits exceed the most grantable at once
--   value acquire, available: permits left; cancel, release: permits handed back
--   wait  acquire: µs from now until the grant (granted: at now + wait), or
--         the retry-after (refused)
-- Errors are replies, never raw Lua errors; a limiter whose keys hold what
-- redlimit did not write answers -3 alone.

---------------------------------------------------------------- prelude
-- Library functions, taken on the first run: a function library's loading
-- sees no globals but redis.
local floor, fmt
local function str(x) return fmt('%d', x) end
local function later(a, b) if a > b then return a end return b end
local function ceildiv(a, b) return floor((a + b - 1) / b) end

-- The run: its KEYS and ARGV, whether the caller gave the time, its instant.
local keys, argv, injected, start

-- The limiter being served: set by load.
local now, alg, mode, rate, interval, epoch, burst, capacity, most
local unit -- the limiter's unit of time in µs: 1000 (sliding log) or 1
local since -- when the stored config took effect (field t; 0: unknown)
local perClient, stateKey, listKey, hasList
local S, W -- state fields (numbers), windows (fixed-window, sliding-counter)
local dirty -- S changed: write it at the end of the limiter's calls
local tailAt, tailPermits, tailKnown -- the sliding log's tail, read once
local headK, headSum, headCut -- its head pairs at or before headCut: list elements, permits

-- A grant at the tail's instant adds to the tail pair here, not in the
-- list: write_tail puts it there once, before the list is read or changed
-- otherwise, and at the end of the limiter's calls.
local tailDirty

local function write_tail()
  if tailDirty then
    redis.call('LSET', listKey, -1, str(tailPermits))
    tailDirty = false
  end
end


local algorithms = {['sliding-log'] = true, ['fixed-window'] = true, ['sliding-counter'] = true,
  ['token-bucket'] = true, ['leaky-bucket'] = true}
local epochText -- the config's epoch as stored, which a state must carry
local hadState -- a state was stored (so an empty one is deleted)

-- parse reads a config: {algorithm, mode, epoch text, rate, interval,
-- epoch, burst, capacity, the most one request can be granted}, or false
-- when it is unreadable.
local function parse(cfg)
  local A, M, R, I, E, B, C = string.match(cfg, '^(%S+) (%S+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not A or not algorithms[A] or (M ~= 'overall' and M ~= 'per-client') then return false end
  local c = {A, M, E, tonumber(R), tonumber(I), tonumber(E), tonumber(B), tonumber(C), tonumber(R)}
  if A == 'token-bucket' then c[9] = c[7] elseif A == 'leaky-bucket' then c[9] = c[8] end
  if c[4] < 1 or c[5] < 1 or c[9] < 1 then return false end
  return c
end

-- parsed keeps the configs read, by their text: a function library's
-- locals live from one run to the next (a script's do not, and parse
-- again). It is emptied when it holds 256.
local parsed, parsedCount = {}, 0

-- load reads the config and the state of the limiter whose KEYS start after
-- k and whose ARGV start at a. It returns the flag of the reply (0 or 1,
-- or an error: -1, -3) and the stored config.
local function load(k, a)
  now = start
  local got = redis.call('HMGET', keys[k + 1], 'c', 's', 't')
  local cfg, st = got[1], got[2]
  since = tonumber(got[3]) or 0
  local flag = 0 -- the stored config is the one the client sent
  if not cfg then
    if argv[a] == '' then return -1 end
    cfg, st = argv[a], false
    -- A limiter hash without a config holds no state either.
    if got[2] then redis.call('HDEL', keys[k + 1], 's') end
    -- The states left (a client's) count at their own config until now.
    since = now
    redis.call('HSET', keys[k + 1], 'c', cfg, 't', str(since))
  elseif cfg ~= argv[a] then
    flag = 1
  end
  local c = parsed[cfg]
  if c == nil then
    c = parse(cfg)
    if parsedCount == 256 then parsed, parsedCount = {}, 0 end
    parsed[cfg], parsedCount = c, parsedCount + 1
  end
  if not c then return -3 end
  alg, mode, epochText, rate, interval, epoch, burst, capacity, most =
    c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
  -- The sliding log counts ms (its entries are per ms), the others µs.
  unit = 1
  if alg == 'sliding-log' then unit = 1000 end
  now, interval = floor(start / unit), interval * 1000 / unit

  perClient = mode == 'per-client'
  stateKey, listKey = keys[k + 1], keys[k + 2]
  if perClient then
    stateKey, listKey = keys[k + 3], keys[k + 4]
    st = redis.call('GET', stateKey)
  end
  hasList = alg == 'sliding-log'
  S, W = {}, nil
  if alg == 'fixed-window' or alg == 'sliding-counter' then W = {} end
  hadState = st and true or false
  if st then
    -- The Overall state always belongs to the config (setconfig.lua drops
    -- it with the epoch); a client's carries its epoch first.
    -- A state counted in µs starts with its mark; one without it was
    -- written in ms by an older redlimit, and is gone (a new epoch).
    local i, same, mark = 0, not perClient, unit == 1
    if perClient then i = -1 end
    for v in string.gmatch(st, '%S+') do
      if i == -1 then
        same = v == epochText
        if not same then break end
      elseif mark then
        same = v == 'u'
        if not same then break end
        mark = false
        i = i - 1
      else
        local x = tonumber(v)
        if not x then
          same = false -- garbage: the state is gone
          break
        end
        if i == 0 then S.l = x
        elseif i == 1 then S.x = S.l + x
        elseif alg == 'sliding-log' then S.t = x
        elseif alg == 'sliding-counter' and i == 2 then S.a = S.l + x
        elseif W then
          if #W % 2 == 0 then x = S.l + x end -- a window's start
          W[#W + 1] = x
        elseif i == 2 then S.o = x
        elseif i == 3 then S.s = x
        elseif i == 4 then S.r = x
        elseif i == 5 then S.b = x
        elseif i == 6 then S.qh = S.l + x -- the queue of reservations (Deficit)
        elseif i == 7 then S.qt = S.l + x
        elseif i == 8 then S.ql = x
        else S.qd = x
        end
      end
      i = i + 1
    end
    if not same or not S.x then
      -- State of another epoch (a reset), or unreadable: it is gone.
      if perClient then redis.call('DEL', stateKey) end
      if hasList then redis.call('DEL', listKey) end
      S = {}
      if W then W = {} end
      hadState = not perClient
    end
  elseif hasList and redis.call('EXISTS', listKey) == 1 then
    redis.call('DEL', listKey) -- a list whose state is gone
  end
  dirty = false
  tailAt, tailPermits, tailKnown, tailDirty = nil, 0, false, false
  headK, headSum, headCut = 0, 0, nil
  return flag, cfg
end

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
local function save(newExpiry)
  dirty = true
  if not newExpiry then
    if hasList then redis.call('DEL', listKey); tailDirty = false end
    S = {}
    if W then W = {} end
    return
  end
  S.l, S.x = now, newExpiry
end

-- flush writes the state once, as one string, with the TTL of the keys
-- that hold only state (the limiter hash keeps its config, and its own TTL).
local function flush()
  if hasList then write_tail() end
  if not dirty then return end
  if not S.x then
    if not hadState then return end
    if perClient then redis.call('DEL', stateKey) else redis.call('HDEL', stateKey, 's') end
    return
  end
  -- Instants are written after the first as offsets from it: shorter, so
  -- the limiter hash stays in Redis's compact encoding. A state in µs
  -- starts with its mark, u.
  local l = S.l
  local st
  if alg == 'sliding-log' then
    st = fmt('%d %d %d', l, S.x - l, S.t)
  elseif W then
    local parts = {str(l), str(S.x - l)}
    if alg == 'sliding-counter' then parts[3] = str((S.a or 0) - l) end
    for i = 1, #W - 1, 2 do
      parts[#parts + 1] = str(W[i] - l)
      parts[#parts + 1] = str(W[i + 1])
    end
    st = table.concat(parts, ' ')
  else
    st = fmt('%d %d %d %d %d %d', l, S.x - l, S.o, S.s, S.r, S.b)
    if (S.ql or 0) > 0 then st = st .. fmt(' %d %d %d %d', S.qh - l, S.qt - l, S.ql, S.qd) end
  end
  if unit == 1 then st = 'u ' .. st end
  if perClient then st = epochText .. ' ' .. st end
  -- With a caller's clock Redis still expires keys by its own, so keep them
  -- a minute longer (the expiry in the state decides when it counts as empty).
  local ttl = ceildiv((S.x - now) * unit, 1000) -- ms
  if injected then ttl = ttl + 60000 end
  if ttl < 1 then ttl = 1 end
  if perClient then
    redis.call('SET', stateKey, st, 'PX', ttl)
  else
    redis.call('HSET', stateKey, 's', st)
  end
  if hasList then redis.call('PEXPIRE', listKey, ttl) end
end

-- out is the reply: for each limiter the time, the config flag (and the
-- stored config when it is not the one sent), then code, value and wait for
-- each call. It goes as one MessagePack string, which the client reads
-- without an allocation per element, as it would need for an array.
local out

-- reply answers a call. A grant's instant is now + wait, which the client
-- works out itself, so at is not sent.
local function reply(code, value, wait, at)
  local k = #out
  out[k + 1], out[k + 2], out[k + 3] = code, value, wait * unit
end

---------------------------------------------------------------- sliding-log
-- The list holds pairs [instant, permits], oldest first. Within a batch its
-- tail and its expired head are read once and then followed in Lua.

local function tail()
  if not tailKnown then
    local t = redis.call('LRANGE', listKey, -2, -1)
    if #t < 2 then tailAt, tailPermits = nil, 0 else tailAt, tailPermits = tonumber(t[1]), tonumber(t[2]) end
    tailKnown = true
  end
  return tailAt, tailPermits
end

-- Pairs at the head at or before cut: their count as list elements and
-- their permits.
local function head_before(cut)
  if headCut == cut then return headK, headSum end
  write_tail()
  -- Chunks that double from one pair: the head has mostly left the window
  -- by a pair or two, and every element read costs a Lua string.
  local idx, sum, size = 0, 0, 2
  while true do
    local chunk = redis.call('LRANGE', listKey, idx, idx + size - 1)
    local i = 1
    while i < #chunk do
      if tonumber(chunk[i]) > cut then break end
      sum = sum + tonumber(chunk[i + 1])
      i = i + 2
    end
    idx = idx + i - 1
    if i <= #chunk or #chunk < size then
      headK, headSum, headCut = idx, sum, cut
      return idx, sum
    end
    if size < 64 then size = size * 2 end
  end
end

-- Walks the pairs from the newest back; f(index, at, permits) returns true to stop.
local function from_tail(f)
  write_tail()
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
  tailKnown, headCut = false, nil
  if want == permits then
    redis.call('LSET', listKey, idx, '-')
    redis.call('LSET', listKey, idx + 1, '-')
    redis.call('LREM', listKey, 2, '-')
  else
    redis.call('LSET', listKey, idx + 1, str(permits - want))
  end
  return want
end

-- sl_commit writes back the live log: nothing past its expiry, else all but
-- the k list elements at the head that have left the window. Only a change
-- writes it back: a refusal changes nothing (State.Acquire).
local function sl_commit(k)
  if forgotten then
    redis.call('DEL', listKey)
    tailAt, tailPermits, tailKnown, tailDirty = nil, 0, true, false
  elseif k > 0 then
    write_tail()
    redis.call('LTRIM', listKey, k, -1)
    tailKnown = false -- after a change of interval the trim can reach the tail
  end
  -- Nothing at or before the cut is left, and within a batch now (and so
  -- the cut) stays the same.
  headK, headSum, headCut = 0, 0, now - interval
end

-- sl_finish saves the log's total and expiry after a cancel or release.
local function sl_finish(total)
  local t = tail()
  S.t = total
  if t then save(t + interval) else save(nil) end
end

local function sliding_log(op, n, arg3)
  local total = S.t or 0
  if op == 'available' then
    if forgotten then return reply(1, rate, 0, 0) end
    local _, sum = head_before(now - interval)
    total = total - sum
    local t = tail()
    if t and t > now then return reply(1, 0, 0, 0) end
    return reply(1, later(rate - total, 0), 0, 0)
  end
  -- The live log: all but the k list elements at the head that have left
  -- the window (sl_commit writes it back).
  local k, sum = 0, 0
  if forgotten then
    total = 0
  else
    k, sum = head_before(now - interval)
    total = total - sum
  end
  if op == 'cancel' then
    sl_commit(k)
    local got = 0
    from_tail(function(idx, a, p)
      if a < arg3 then return true end
      if a == arg3 then got = take(idx, p, n); return true end
    end)
    total = total - got
    sl_finish(total)
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    sl_commit(k)
    local got = 0
    from_tail(function(idx, a, p)
      if a <= now and (arg3 < 0 or a <= arg3) then got = got + take(idx, p, n - got) end
      return got >= n
    end)
    total = total - got
    sl_finish(total)
    return reply(1, got, 0, 0)
  end

  -- acquire: the earliest instant, at or after now and the tail, where n fit.
  -- A tail that has left the window is before now, so it changes nothing
  -- below whether or not sl_commit drops it.
  local maxWait = arg3
  local tAt, tPermits = tail()
  if forgotten then tAt, tPermits = nil, 0 end
  local at = now
  if tAt and tAt > at then at = tAt end
  local need = total + n - rate
  if need > 0 then
    local dropped, idx, found = 0, k, false
    write_tail()
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
    if tAt and tAt > now then left = 0 end
    return reply(0, left, wait, 0)
  end
  sl_commit(k)
  if tAt and tAt >= at then -- at is the tail: one entry per instant
    tailPermits, tailDirty = tPermits + n, true
  else
    write_tail()
    redis.call('RPUSH', listKey, str(at), str(n))
    tailAt, tailPermits = at, n
  end
  tailKnown = true
  total = total + n
  S.t = total
  save(at + interval) -- the new tail is at
  local left = later(rate - total, 0)
  if at > now then left = 0 end
  return reply(1, left, wait, at)
end

---------------------------------------------------------------- fixed-window and sliding-counter
-- Both keep a few windows in W (algorithm.Windows); the counter also keeps
-- its tail (S.a).
local function window_start(t) return t - t % interval end

-- Sum of the permits of windows starting in [from, to) (Windows.Sum).
local function w_sum(from, to)
  local s = 0
  for i = 1, #W - 1, 2 do
    local a = W[i]
    if a >= from and a < to then s = s + W[i + 1] end
  end
  return s
end

-- Drops the windows starting before cut (Windows.DropBefore).
local function w_drop_before(cut)
  local k = 0
  while k < #W and W[k + 1] < cut do k = k + 2 end
  if k > 0 then
    local kept = {}
    for i = k + 1, #W do kept[#kept + 1] = W[i] end
    W = kept
  end
end

-- Adds n permits to the newest window if it starts at or after start, else
-- appends a window (Windows.Add).
local function w_add(start, permits)
  local m = #W
  if m >= 2 and W[m - 1] >= start then
    W[m] = W[m] + permits
  else
    W[m + 1], W[m + 2] = start, permits
  end
end

-- Takes up to want permits from the newest window starting at or before t
-- and ending after it, windows being span long (Windows.Take).
local function w_take(t, want, span)
  for i = #W - 1, 1, -2 do
    local a, p = W[i], W[i + 1]
    if a <= t then
      if a + span <= t then return 0 end
      if want > p then want = p end
      if want == p then
        table.remove(W, i + 1)
        table.remove(W, i)
      else
        W[i + 1] = p - want
      end
      return want
    end
  end
  return 0
end

local function w_tail() if #W >= 2 then return W[#W - 1] end return nil end

local function w_counts(t)
  local w = window_start(t)
  return w, w_sum(w - interval, w), w_sum(w, w + interval)
end

-- The call being served: whether it is the counter, the windows a state
-- keeps after the current one starts, the counter's tail.
local wCounter, wKeep, wTailAt

local function w_newest_tail(t0)
  if wCounter then return later(t0, wTailAt) end
  local t = w_tail()
  if t then return later(t0, t) end
  return t0
end

local function w_remaining()
  if w_newest_tail(now) > now then return 0 end
  local w, prev, cur = w_counts(now)
  local weighed = 0
  if wCounter then weighed = ceildiv(prev * (interval - (now - w)), interval) end
  return later(rate - cur - weighed, 0)
end

local function w_finish()
  local t = w_tail()
  if not t then
    S.a = nil
    save(nil)
  elseif wCounter then
    S.a = wTailAt
    save(window_start(t) + 2 * interval)
  else
    save(window_start(t) + interval)
  end
end

local function w_prune() w_drop_before(window_start(now) - wKeep + interval) end

-- The sliding counter's first instant at or after at where n more fit
-- (slidingcounter's earliest).
local function sc_earliest(at, n)
  while true do
    local w, prev, cur = w_counts(at)
    local room = rate - cur - n
    if room >= 0 then
      local e = at - w
      if prev > 0 then e = later(e, interval - floor(room * interval / prev)) end
      if e < interval then return w + e end
    end
    at = w + interval
  end
end

local function windows(counter, op, n, arg3)
  wCounter, wKeep = counter, interval
  if counter then wKeep = 2 * interval end
  wTailAt = S.a or 0
  if forgotten then
    -- Past its expiry the state is empty, and a call on an empty state is
    -- always granted (or only reads): clearing it now is no refusal's write.
    if op ~= 'available' then W = {} end
    wTailAt = 0
  end

  if op == 'available' then
    if forgotten then return reply(1, rate, 0, 0) end
    -- Read-only: count as if pruned (sums look only at recent windows).
    return reply(1, w_remaining(), 0, 0)
  end
  if op == 'cancel' then
    w_prune()
    local got = w_take(arg3, n, interval)
    if counter and got > 0 and #W >= 2 then
      -- The tail comes back to where the newest window's permits all fit.
      wTailAt = math.min(wTailAt, sc_earliest(W[#W - 1], 0))
    end
    w_finish()
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    w_prune()
    local got
    if not counter then
      got = w_take(now, n, interval)
    elseif wTailAt > now then
      got = w_take(window_start(now) - 1, n, 2 * interval)
    else
      got = w_take(now, n, 2 * interval)
    end
    w_finish()
    return reply(1, got, 0, 0)
  end

  -- acquire
  local maxWait = arg3
  local at = w_newest_tail(now)
  if counter then
    at = sc_earliest(at, n)
  else
    local w = window_start(at)
    if w_sum(w, w + interval) + n > rate then at = w + interval end
  end
  at = by_expiry(at)
  local wait = at - now
  if maxWait >= 0 and wait > maxWait then
    return reply(0, w_remaining(), wait, 0) -- a refusal changes nothing
  end
  w_prune()
  w_add(window_start(at), n)
  if counter then wTailAt = at end
  w_finish()
  return reply(1, w_remaining(), wait, at)
end

---------------------------------------------------------------- token-bucket and leaky-bucket
-- Both keep a deficit (algorithm.Deficit): owed = permits x scale still to drain.
local function b_remaining(leaky, owed)
  if leaky then
    if owed > 0 then return 0 end -- work ahead: none at once
    return later(floor((capacity * interval - owed) / interval), 0)
  end
  return later(floor((burst * interval - owed) / interval), 0)
end

-- The queue of reservations (Deficit's Head, Tail, Live, Held): qh, qt,
-- ql, qd, read by bucket and written back by b_finish.
local qh, qt, ql, qd

local function b_finish(owed)
  if owed == 0 then
    S.o, S.s, S.r, S.b, S.qh, S.qt, S.ql, S.qd = nil, nil, nil, nil, nil, nil, nil, nil
    save(nil)
  else
    S.o, S.s, S.r, S.b, S.qh, S.qt, S.ql, S.qd = owed, interval, rate, burst, qh, qt, ql, qd
    save(now + ceildiv(owed, rate))
  end
end

-- b_drain is owed drained from l to t at r per time unit (Deficit.drain).
local function b_drain(owed, l, t, r)
  if t - l > 0 and owed > 0 then
    if t - l >= ceildiv(owed, r) then return 0 end
    return owed - (t - l) * r
  end
  return owed
end

local maxOwed = 2 ^ 53 -- algorithm.maxOwed

-- b_advance brings the deficit to now under the config (Deficit.Advance):
-- a config that took effect after the state last changed applies from
-- that instant on only, the state's own config draining it up to there.
local function b_advance()
  local owed, scale, r, b = S.o or 0, S.s or 0, S.r or rate, S.b or burst
  local l = last
  qh, qt, ql, qd = S.qh or 0, S.qt or 0, S.ql or 0, S.qd or 0
  if scale ~= 0 and (r ~= rate or scale ~= interval or b ~= burst) then
    qh, qt, ql, qd = 0, 0, 0, 0 -- a change of config closes the queue
    if since > l then
      local mid = since
      if now < mid then mid = now end
      owed = b_drain(owed, l, mid, r)
      l = mid
    end
    local full = b * scale
    if owed > full then
      -- Work beyond the bucket keeps the instant it drains at.
      local t = ceildiv(owed - full, r)
      local base = burst * interval
      if t > floor((maxOwed - base) / rate) then owed = maxOwed else owed = base + t * rate end
    elseif owed > 0 then
      -- Tokens carry over, capped at the new burst (algorithm rescale).
      local tokens, t = full - owed, 0
      if scale == interval then
        t = tokens
        if t > burst * interval then t = burst * interval end
      else
        local q, rem = floor(tokens / scale), tokens % scale
        if q >= burst then t = burst * interval
        else t = q * interval + floor(floor(rem * 65536 / scale) * interval / 65536) end
      end
      owed = later(0, burst * interval - t)
    end
  end
  owed = b_drain(owed, l, now, rate)
  if ql > 0 and (now > qt or owed == 0) then qh, qt, ql, qd = 0, 0, 0, 0 end
  return owed
end

-- Deficit.Granted: a grant for at opens the queue or counts in it.
local function b_granted(at)
  if ql > 0 then
    ql = ql + 1
    qt = later(qt, at)
  elseif at > now then
    qh, qt, ql = now, at, 1
  end
end

-- Deficit.Cancel: the last live grant of the open queue hands back all it
-- held; before that a token bucket hands back what no later grant was
-- promised, a leaky bucket only a reservation nothing is queued after.
local function b_cancel(leaky, owed, n, at)
  if at < now then return owed, 0 end
  local debt = n * interval
  if ql == 0 or at <= qh or at > qt then
    if ql > 0 or at > now then return owed, 0 end
    local give = math.min(debt, owed)
    return owed - give, floor(give / interval)
  end
  if ql == 1 then
    owed = later(0, owed - debt - qd)
    qh, qt, ql, qd = 0, 0, 0, 0
    return owed, n
  end
  ql = ql - 1
  local after = (qt - at) * rate + rate - 1
  local give = 0
  if leaky then
    after = math.min(after, owed - (at - now) * rate - debt + rate - 1)
    if after < interval then give = debt end
  else
    give = later(0, debt - after)
  end
  give = math.min(give, owed)
  qd = qd + debt - give
  return owed - give, floor(give / interval)
end

-- Deficit.GiveBack: hand back only what no later reservation built on.
local function b_give_back(owed, n, at, hold)
  local after = later(0, owed - (at - now) * rate - hold)
  local give = math.min(later(0, n * interval - after), owed)
  return owed - give, floor(give / interval)
end

local function bucket(leaky, op, n, arg3)
  local owed = b_advance()
  local hold = burst * interval

  if op == 'available' then return reply(1, b_remaining(leaky, owed), 0, 0) end
  if op == 'cancel' then
    local got
    owed, got = b_cancel(leaky, owed, n, arg3)
    b_finish(owed)
    return reply(1, got, 0, 0)
  end
  if op == 'release' then
    local got = 0
    if not leaky then owed, got = b_give_back(owed, n, now, hold) end
    b_finish(owed)
    return reply(1, got, 0, 0)
  end

  -- acquire
  local wait, refuse
  if leaky then
    wait = ceildiv(owed, rate) -- the work ahead, rounded up to a whole µs
    local limit = (capacity - n) * interval
    refuse = owed > limit and ceildiv(owed - limit, rate) > 0
  else
    local limit, o = burst * interval, owed + n * interval
    wait = 0
    if o > limit then wait = ceildiv(o - limit, rate) end
    refuse = false
  end
  if refuse or (arg3 >= 0 and wait > arg3) then
    local code = 0
    if refuse then code = 2 end -- the leaky bucket's queue is full
    return reply(code, b_remaining(leaky, owed), wait, 0) -- a refusal changes nothing
  end
  owed = owed + n * interval
  b_granted(now + wait)
  b_finish(owed)
  return reply(1, b_remaining(leaky, owed), wait, now + wait)
end

---------------------------------------------------------------- the batch loop
local function handle(op, n, a3)
  if alg == 'sliding-log' then return sliding_log(op, n, a3)
  elseif alg == 'fixed-window' then return windows(false, op, n, a3)
  elseif alg == 'sliding-counter' then return windows(true, op, n, a3)
  elseif alg == 'token-bucket' then return bucket(false, op, n, a3)
  end
  return bucket(true, op, n, a3)
end

-- serve answers the calls of the limiter whose KEYS start after k and whose
-- ARGV start at a, from out[head] on.
local function serve(k, a, calls, head)
  local flag, cfg = load(k, a)
  out[head], out[head + 1] = start, flag
  if flag == 1 then out[head + 2] = cfg end
  if flag < 0 then return end
  for i = a + 2, a - 1 + 3 * calls, 3 do
    local op, n = argv[i], tonumber(argv[i + 1])
    if op == 'acquire' and n > most then
      reply(-2, 0, 0, 0)
    else
      begin()
      -- A wait or an instant in µs, in the limiter's unit (a wait rounded
      -- down: never longer than the caller allowed).
      local a3 = tonumber(argv[i + 2])
      if a3 > 0 then a3 = floor(a3 / unit) end
      handle(op, n, a3)
    end
  end
  flush()
  out[head] = now * unit
end

-- main serves one run. The file is loaded both as a script (EVALSHA, with
-- "return main(KEYS, ARGV)" appended) and, where Redis has them (7.0+), as a
-- function library, whose definitions above are then made once instead of
-- on every run.
local function main(runKeys, runArgv)
  keys, argv, out = runKeys, runArgv, {}
  if not floor then floor, fmt = math.floor, string.format end
  injected = argv[1] ~= ''
  if injected then
    start = tonumber(argv[1])
  else
    local t = redis.call('TIME')
    start = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local k, a = 0, 2
  while a + 1 <= #argv do
    local calls = tonumber(argv[a + 1]) or 0
    local head = #out + 1
    -- A limiter whose keys hold what redlimit did not write (a wrong type,
    -- garbage) answers "unreadable" alone: the others of the run go on.
    if not pcall(serve, k, a, calls, head) then
      for i = #out, head, -1 do out[i] = nil end
      out[head], out[head + 1] = start, -3
    end
    k, a = k + 4, a + 2 + 3 * calls
  end
  return cmsgpack.pack(out)
end
