-- fixedwindow.lua: the fixed window (algorithm/fixedwindow/fixedwindow.go).
-- It keeps Windows (windows.lua): the current window of the grid aligned to
-- the Unix epoch and any later one holding reservations. It answers a
-- request at once while the current window has room, else at the start of
-- the first window that has (a reservation); Cancel and Release take
-- permits back out of their window.

local function fixedwindow_windows(c, S)
  local W = S.Windows
  if not W or c.forgotten then
    -- Past its expiry the state is empty, and a call on an empty state is
    -- always granted (or only reads): clearing it now is no refusal's write.
    W = {}
    S.Windows = W
  end
  return W
end

-- remaining: nothing while a reservation is queued, else the room left in
-- the current window.
local function fixedwindow_remaining(c, W)
  local now, interval = c.now, c.interval
  local t = windows_newest(W)
  if t and t > now then return 0 end
  local w = window_start(now, interval)
  return later(c.rate - windows_sum(W, w, w + interval), 0)
end

-- advance drops the windows before the current one.
local function fixedwindow_advance(c, S, W)
  W = windows_drop_before(W, window_start(c.now, c.interval))
  S.Windows = W
  return W
end

-- settle ends every change: the expiry is the end of the newest window.
local function fixedwindow_settle(c, S, W)
  local t = windows_newest(W)
  if not t then return save(c, S, nil) end
  save(c, S, window_start(t, c.interval) + c.interval)
end

algorithms['fixed-window'] = {
  unit = 1,
  most = 'rate',

  decode = function(v, k)
    local l = v[1]
    return {Last = l, Expiry = l + v[2], Windows = windows_decode(v, 3, k, l)}
  end,
  encode = function(c, S) return windows_encode(S.Windows, S.Last, {}) end,

  acquire = function(c, S, n, maxWait)
    local now, interval = c.now, c.interval
    if c.grantS == S and c.grantNow == now and not (c.probe or c.notBefore) then -- prelude.lua
      -- The call before granted S at this instant in its one window,
      -- the current one (nothing else changed S since): its count is
      -- all a grant now needs.
      local W = S.Windows
      local used = W[#W] + n
      if used <= c.rate then
        W[#W] = used
        return reply(c, 1, c.rate - used, 0)
      end
    end
    local expiry = S.Expiry or 0
    local W = fixedwindow_windows(c, S)
    local nb = c.notBefore or 0 -- not before it (algorithm.State's AcquireAt)
    local at = later(later(now, windows_newest(W) or now), nb)
    local w = window_start(at, interval)
    local used = windows_sum(W, w, w + interval)
    if used + n > c.rate then at = later(by_expiry(w + interval, now, expiry), nb) end
    local wait = at - now
    if c.probe or (maxWait >= 0 and wait > maxWait) then
      return reply(c, 0, fixedwindow_remaining(c, W), wait) -- a refusal changes nothing
    end
    W = fixedwindow_advance(c, S, W)
    windows_add(W, window_start(at, interval), n)
    fixedwindow_settle(c, S, W)
    if at == now and W[#W - 1] == w then
      -- Granted now in the window just counted (the common call): what
      -- is left is remaining's, from that count and n. The window is
      -- then W's only one, and the next call at this instant starts
      -- from it (above).
      c.grantS, c.grantNow = S, now
      return reply(c, 1, later(c.rate - used - n, 0), 0)
    end
    c.grantS = nil
    return reply(c, 1, fixedwindow_remaining(c, W), wait)
  end,

  cancel = function(c, S, n, at)
    c.grantS = nil
    local W = fixedwindow_advance(c, S, fixedwindow_windows(c, S))
    local got = windows_take(W, at, n, c.interval)
    fixedwindow_settle(c, S, W)
    return reply(c, 1, got, 0)
  end,

  release = function(c, S, n, _)
    c.grantS = nil
    local W = fixedwindow_advance(c, S, fixedwindow_windows(c, S))
    local got = windows_take(W, c.now, n, c.interval)
    fixedwindow_settle(c, S, W)
    return reply(c, 1, got, 0)
  end,

  -- Read-only: counts as if advanced (the sum looks only at the current window).
  available = function(c, S)
    if c.forgotten then return reply(c, 1, c.rate, 0) end
    return reply(c, 1, fixedwindow_remaining(c, S.Windows or {}), 0)
  end,
}
