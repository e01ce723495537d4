-- windows.lua: the windows the fixed window and the sliding counter keep
-- (algorithm/window.go). Windows is a flat list of pairs, oldest first:
-- {Start1, Permits1, Start2, Permits2, ...} (Go's []Window; pairs in one
-- table cost Redis's Lua less than a table per window). Stored after "last
-- expiry" as "start permits" per window, each start an offset from last.

-- window_start is the start of the window of length interval holding t
-- (algorithm.WindowStart).
local function window_start(t, interval) return t - t % interval end

-- windows_sum is the permits of the windows starting in [from, to)
-- (Windows.Sum).
local function windows_sum(W, from, to)
  local s = 0
  for i = 1, #W - 1, 2 do
    local a = W[i]
    if a >= from and a < to then s = s + W[i + 1] end
  end
  return s
end

-- windows_drop_before returns W without the windows starting before cut
-- (Windows.DropBefore).
local function windows_drop_before(W, cut)
  local k = 0
  while k < #W and W[k + 1] < cut do k = k + 2 end
  if k == 0 then return W end
  local kept = {}
  for i = k + 1, #W do kept[#kept + 1] = W[i] end
  return kept
end

-- windows_add counts n permits in the window starting at start, or in the
-- newest one if that starts later (Windows.Add).
local function windows_add(W, start, n)
  local m = #W
  if m >= 2 and W[m - 1] >= start then
    W[m] = W[m] + n
  else
    W[m + 1], W[m + 2] = start, n
  end
end

-- windows_take takes up to want permits from the newest window starting
-- at or before t and ending after it, windows being span long, dropping
-- it when emptied (Windows.Take).
local function windows_take(W, t, want, span)
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

-- windows_newest is the start of the newest window, or nil.
local function windows_newest(W)
  if #W >= 2 then return W[#W - 1] end
  return nil
end

-- windows_decode reads the pairs from v[from..k] (starts as offsets from
-- last) into a new list.
local function windows_decode(v, from, k, last)
  local W = {}
  for i = from, k do
    local x = v[i]
    if #W % 2 == 0 then x = last + x end -- a window's start
    W[#W + 1] = x
  end
  return W
end

-- windows_encode writes the pairs, starts as offsets from last, after the
-- parts already in p.
local function windows_encode(W, last, p)
  for i = 1, #W - 1, 2 do
    p[#p + 1] = str(W[i] - last)
    p[#p + 1] = str(W[i + 1])
  end
  return table.concat(p, ' ')
end
