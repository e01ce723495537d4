-- slidingcounter.lua: the sliding window counter
-- (algorithm/slidingcounter/slidingcounter.go). It keeps Windows
-- (windows.lua): the previous, current and reserved later windows of the
-- grid, and Tail, the instant of the latest grant. It weighs the previous
-- window's count by how much of it the sliding window still covers, and
-- answers a request at the first instant at or after Tail where the
-- weighed count leaves room for it; Cancel brings Tail back.

local function slidingcounter_windows(c, S)
  local W = S.Windows
  if not W or c.forgotten then
    -- Past its expiry the state is empty (see fixedwindow.lua).
    W = {}
    S.Windows = W
  end
  return W
end

-- counts: the window holding t, and the permits of the one before it and
-- of it (windows_sum over each, in one pass).
local function slidingcounter_counts(W, t, interval)
  local w = window_start(t, interval)
  local from, to, prev, cur = w - interval, w + interval, 0, 0
  for i = 1, #W - 1, 2 do
    local a = W[i]
    if a >= from and a < to then
      if a < w then prev = prev + W[i + 1] else cur = cur + W[i + 1] end
    end
  end
  return w, prev, cur
end

-- remaining: nothing while a reservation is queued, else what the weighed
-- count leaves.
local function slidingcounter_remaining(c, W, tail)
  local now, interval = c.now, c.interval
  if tail > now then return 0 end
  local w, prev, cur = slidingcounter_counts(W, now, interval)
  local weighed = ceildiv(prev * (interval - (now - w)), interval)
  return later(c.rate - cur - weighed, 0)
end

-- earliest: the first instant at or after at where n more fit; then the
-- window holding it and the counts it was found with (as counts gives).
local function slidingcounter_earliest(c, W, at, n)
  local rate, interval = c.rate, c.interval
  while true do
    local w, prev, cur = slidingcounter_counts(W, at, interval)
    local room = rate - cur - n
    if room >= 0 then
      local e = at - w
      if prev > 0 then e = later(e, interval - floor(room * interval / prev)) end
      if e < interval then return w + e, w, prev, cur end
    end
    at = w + interval
  end
end

-- advance drops the windows before the previous one.
local function slidingcounter_advance(c, S, W)
  W = windows_drop_before(W, window_start(c.now, c.interval) - c.interval)
  S.Windows = W
  return W
end

-- settle ends every change: the expiry is when the newest window stops
-- weighing.
local function slidingcounter_settle(c, S, W, tail)
  local t = windows_newest(W)
  if not t then
    S.Tail = nil
    return save(c, S, nil)
  end
  S.Tail = tail
  save(c, S, window_start(t, c.interval) + 2 * c.interval)
end

-- tail: the latest grant's instant (0 once the state is forgotten).
local function slidingcounter_tail(c, S)
  if c.forgotten then return 0 end
  return S.Tail or 0
end

algorithms['sliding-counter'] = {
  unit = 1,
  most = 'rate',

  decode = function(v, k)
    local l = v[1]
    local S = {Last = l, Expiry = l + v[2], Windows = windows_decode(v, 4, k, l)}
    if k >= 3 then S.Tail = l + v[3] end
    return S
  end,
  encode = function(c, S)
    local l = S.Last
    return windows_encode(S.Windows, l, {str((S.Tail or 0) - l)})
  end,

  acquire = function(c, S, n, maxWait)
    local now = c.now
    if c.grantS == S and c.grantNow == now and not (c.probe or c.notBefore) then -- prelude.lua
      -- The call before granted S at this instant in window scW, whose
      -- counts it left in scPrev and scCur (nothing else changed S
      -- since): a grant now needs only those, as earliest would find it.
      local w, prev, interval = c.scW, c.scPrev, c.interval
      local cur = c.scCur + n
      local room = c.rate - cur
      if room >= 0 and (prev == 0 or interval - floor(room * interval / prev) <= now - w) then
        local W = S.Windows
        W[#W] = W[#W] + n
        c.scCur = cur
        return reply(c, 1, later(room - ceildiv(prev * (interval - (now - w)), interval), 0), 0)
      end
    end
    local expiry = S.Expiry or 0
    local W = slidingcounter_windows(c, S)
    local tail = slidingcounter_tail(c, S)
    local nb = c.notBefore or 0 -- not before it (algorithm.State's AcquireAt)
    local e, w, prev, cur = slidingcounter_earliest(c, W, later(later(now, tail), nb), n)
    local at = later(by_expiry(e, now, expiry), nb)
    local wait = at - now
    if c.probe or (maxWait >= 0 and wait > maxWait) then
      return reply(c, 0, slidingcounter_remaining(c, W, tail), wait) -- a refusal changes nothing
    end
    W = slidingcounter_advance(c, S, W)
    windows_add(W, window_start(at, c.interval), n)
    slidingcounter_settle(c, S, W, at)
    if at == now and W[#W - 1] == w then
      -- Granted now (so earliest found now: e == now) in the window its
      -- counts were read in, the common call: what is left is
      -- remaining's, from those counts and n. The next call at this
      -- instant starts from them (above).
      local interval = c.interval
      c.grantS, c.grantNow, c.scW, c.scPrev, c.scCur = S, now, w, prev, cur + n
      return reply(c, 1, later(c.rate - cur - n - ceildiv(prev * (interval - (now - w)), interval), 0), 0)
    end
    c.grantS = nil
    return reply(c, 1, slidingcounter_remaining(c, W, at), wait)
  end,

  cancel = function(c, S, n, at)
    c.grantS = nil
    local W = slidingcounter_advance(c, S, slidingcounter_windows(c, S))
    local tail = slidingcounter_tail(c, S)
    local got = windows_take(W, at, n, c.interval)
    if got > 0 and #W >= 2 then
      -- The tail comes back to where the newest window's permits all fit.
      tail = math.min(tail, (slidingcounter_earliest(c, W, W[#W - 1], 0))) -- its instant alone
    end
    slidingcounter_settle(c, S, W, tail)
    return reply(c, 1, got, 0)
  end,

  release = function(c, S, n, _)
    c.grantS = nil
    local W = slidingcounter_advance(c, S, slidingcounter_windows(c, S))
    local tail, now, interval = slidingcounter_tail(c, S), c.now, c.interval
    local got
    if tail > now then
      got = windows_take(W, window_start(now, interval) - 1, n, 2 * interval)
    else
      got = windows_take(W, now, n, 2 * interval)
    end
    slidingcounter_settle(c, S, W, tail)
    return reply(c, 1, got, 0)
  end,

  -- Read-only: counts as if advanced (the sums look only at recent windows).
  available = function(c, S)
    if c.forgotten then return reply(c, 1, c.rate, 0) end
    return reply(c, 1, slidingcounter_remaining(c, S.Windows or {}, S.Tail or 0), 0)
  end,
}
