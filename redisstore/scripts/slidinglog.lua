-- slidinglog.lua: the sliding-window log (algorithm/slidinglog/slidinglog.go).
-- It keeps Total, the permits of its entries, in the state string ("last
-- expiry Total", in ms, with no mark), and its Entries in a Redis list
-- beside it: [At1, Permits1, At2, Permits2, ...], oldest first, one entry
-- per ms. It answers a request at the earliest instant, at or after now and
-- the newest entry, where at most Rate permits fall in every window of
-- Interval; Cancel takes a reservation's permits out of its entry, Release
-- the newest granted at or before now (and before the caller's upTo).
-- A keyed policy's short log lives in its state string instead, with no
-- list (slidinglog_inline, below).
--
-- Within a limiter's calls the list's tail and its expired head are read
-- once and then followed here, in c: tailAt, tailPermits (tailKnown: read),
-- and headK, headSum, the list elements and permits at the head at or
-- before headCut. A grant at the tail's instant adds to tailPermits, not to
-- the list (tailDirty): slidinglog_write_tail puts it there once, before the
-- list is read or changed otherwise, and after the limiter's calls.

local function slidinglog_write_tail(c)
  if c.tailDirty then
    redis.call('LSET', c.listKey, -1, str(c.tailPermits))
    c.tailDirty = false
  end
end

-- tail: the newest entry's instant (nil: none) and permits.
local function slidinglog_tail(c)
  if not c.tailKnown then
    local t = redis.call('LRANGE', c.listKey, -2, -1)
    if #t < 2 then c.tailAt, c.tailPermits = nil, 0 else c.tailAt, c.tailPermits = tonumber(t[1]), tonumber(t[2]) end
    c.tailKnown = true
  end
  return c.tailAt, c.tailPermits
end

-- head_before: the entries at the head at or before cut, as a count of
-- list elements and their permits.
local function slidinglog_head_before(c, cut)
  if c.headCut == cut then return c.headK, c.headSum end
  slidinglog_write_tail(c)
  -- Chunks that double from one entry: the head has mostly left the window
  -- by an entry or two, and every element read costs a Lua string.
  local listKey = c.listKey
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
      c.headK, c.headSum, c.headCut = idx, sum, cut
      return idx, sum
    end
    if size < 64 then size = size * 2 end
  end
end

-- from_tail walks the entries from the newest back; f(index, At, Permits)
-- returns true to stop.
local function slidinglog_from_tail(c, f)
  slidinglog_write_tail(c)
  local listKey = c.listKey
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

-- take removes up to want permits from the entry at list index idx,
-- dropping it when emptied (State.take).
local function slidinglog_take(c, idx, permits, want)
  local listKey = c.listKey
  if want > permits then want = permits end
  c.tailKnown, c.headCut = false, nil
  if want == permits then
    redis.call('LSET', listKey, idx, '-')
    redis.call('LSET', listKey, idx + 1, '-')
    redis.call('LREM', listKey, 2, '-')
  else
    redis.call('LSET', listKey, idx + 1, str(permits - want))
  end
  return want
end

-- advance writes back the live log (State.advance): nothing past its
-- expiry, else all but the k list elements at the head that have left the
-- window. Only a change writes it back: a refusal changes nothing.
local function slidinglog_advance(c, k)
  if c.forgotten then
    redis.call('DEL', c.listKey)
    c.tailAt, c.tailPermits, c.tailKnown, c.tailDirty = nil, 0, true, false
  elseif k > 0 then
    slidinglog_write_tail(c)
    redis.call('LTRIM', c.listKey, k, -1)
    c.tailKnown = false -- after a change of interval the trim can reach the tail
  end
  -- Nothing at or before the cut is left, and within a limiter's calls now
  -- (and so the cut) stays the same.
  c.headK, c.headSum, c.headCut = 0, 0, c.now - c.interval
end

-- settle ends every change: the expiry is one interval after the newest
-- entry; with none the log is empty.
local function slidinglog_settle(c, S, total)
  local t = slidinglog_tail(c)
  if t then
    S.Total = total
    return save(c, S, t + c.interval)
  end
  redis.call('DEL', c.listKey)
  c.tailDirty = false
  S.Total = nil
  save(c, S, nil)
end

-- live: the list elements at the head that have left the window, and the
-- permits of the entries left.
local function slidinglog_live(c, S)
  if c.forgotten then return 0, 0 end
  local k, sum = slidinglog_head_before(c, c.now - c.interval)
  return k, (S.Total or 0) - sum
end

algorithms['sliding-log'] = {
  unit = 1000,
  most = 'rate',
  list = true,

  open = function(c)
    c.tailAt, c.tailPermits, c.tailKnown, c.tailDirty = nil, 0, false, false
    c.headK, c.headSum, c.headCut = 0, 0, nil
  end,
  finish = slidinglog_write_tail,

  decode = function(v, k)
    local l = v[1]
    local S = {Last = l, Expiry = l + v[2]}
    if k >= 3 then S.Total = v[k] end
    return S
  end,
  encode = function(c, S) return str(S.Total) end,

  acquire = function(c, S, n, maxWait)
    local now, rate, interval = c.now, c.rate, c.interval
    if c.grantS == S and c.grantNow == now and not (c.probe or c.notBefore) then -- prelude.lua
      -- The call before granted S at this instant, the tail's (nothing
      -- else changed S since): S.Total is the live total, and a grant
      -- now adds to the tail.
      local total = S.Total + n
      if total <= rate then
        S.Total = total
        c.tailPermits, c.tailDirty = c.tailPermits + n, true
        return reply(c, 1, rate - total, 0)
      end
    end
    local expiry = S.Expiry or 0
    local k, total = slidinglog_live(c, S)
    -- The earliest instant, at or after now and the tail, where n fit.
    -- A tail that has left the window is before now, so it changes
    -- nothing below whether or not advance drops it.
    local tAt, tPermits = slidinglog_tail(c)
    if c.forgotten then tAt, tPermits = nil, 0 end
    local nb = c.notBefore or 0 -- not before it (algorithm.State's AcquireAt)
    local at = later(now, nb)
    if tAt and tAt > at then at = tAt end
    local need = total + n - rate
    if need > 0 then
      local listKey = c.listKey
      local dropped, idx, found = 0, k, false
      slidinglog_write_tail(c)
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
    at = later(by_expiry(at, now, expiry), nb)
    local wait = at - now
    if c.probe or (maxWait >= 0 and wait > maxWait) then
      local left = later(rate - total, 0)
      if tAt and tAt > now then left = 0 end
      return reply(c, 0, left, wait) -- a refusal changes nothing
    end
    slidinglog_advance(c, k)
    if tAt and tAt >= at then -- at is the tail: one entry per instant
      c.tailPermits, c.tailDirty = tPermits + n, true
    else
      slidinglog_write_tail(c)
      redis.call('RPUSH', c.listKey, str(at), str(n))
      c.tailAt, c.tailPermits = at, n
    end
    c.tailKnown = true
    total = total + n
    S.Total = total
    save(c, S, at + interval) -- the new tail is at
    local left = later(rate - total, 0)
    if at > now then
      left, c.grantS = 0, nil
    else
      c.grantS, c.grantNow = S, now -- the next call at this instant starts here (above)
    end
    return reply(c, 1, left, wait)
  end,

  cancel = function(c, S, n, at)
    c.grantS = nil
    local k, total = slidinglog_live(c, S)
    slidinglog_advance(c, k)
    local got = 0
    slidinglog_from_tail(c, function(idx, a, p)
      if a < at then return true end
      if a == at then got = slidinglog_take(c, idx, p, n); return true end
    end)
    slidinglog_settle(c, S, total - got)
    return reply(c, 1, got, 0)
  end,

  release = function(c, S, n, upTo)
    c.grantS = nil
    local k, total = slidinglog_live(c, S)
    slidinglog_advance(c, k)
    local got, now = 0, c.now
    slidinglog_from_tail(c, function(idx, a, p)
      if a <= now and (upTo < 0 or a <= upTo) then got = got + slidinglog_take(c, idx, p, n - got) end
      return got >= n
    end)
    slidinglog_settle(c, S, total - got)
    return reply(c, 1, got, 0)
  end,

  available = function(c, S)
    if c.forgotten then return reply(c, 1, c.rate, 0) end
    local _, total = slidinglog_live(c, S)
    local t = slidinglog_tail(c)
    if t and t > c.now then return reply(c, 1, 0, 0) end
    return reply(c, 1, later(c.rate - total, 0), 0)
  end,
}

-- A keyed log's list expires at the first multiple of its interval after
-- its state's expiry (slidinglog_list_end), not at that expiry: a call
-- whose expiry stays within one such step leaves the list's TTL as it is
-- (on Redis's clock: a caller's clock sets it every call, its steps not
-- being Redis's), one PEXPIRE a step rather than one a call. A list then
-- outlives its state by at most an interval, and is never read so (a
-- key with no state starts anew).
local function slidinglog_list_end(expiry, interval)
  return (floor(expiry / interval) + 1) * interval
end

-- slidinglog_list_ttl is the TTL (ms, as numText's text) the fast path
-- sets on a list whose log's newest entry is at now (ms).
local function slidinglog_list_ttl(now, interval, start, injected, numText)
  return numText(key_ttl(slidinglog_list_end(now + interval, interval) * 1000, start, injected))
end

-- slidinglogFast: false makes slidinglog_fast serve nothing, so that every
-- call takes the general path (tests compare the two).
local slidinglogFast = true

-- slidinglogChunk is how many list elements slidinglog_fast reads from the
-- head at once: the whole log of a key asked a few times a window. The
-- numbers it sends Redis go as text (slidinglogTrims: the LTRIM of k
-- elements): Redis prints a Lua number it is sent with "%.17g". (A
-- function library's loading sees no globals: no tostring here.)
local slidinglogChunk = 16
local slidinglogTrims = {[2] = '2', [4] = '4', [6] = '6', [8] = '8', [10] = '10', [12] = '12', [14] = '14', [16] = '16'}

-- slidinglogNow, slidinglogNowText: the text of the latest instant
-- slidinglog_fast pushed, made once for the calls of a batch at one ms.
local slidinglogNow, slidinglogNowText

local function slidinglog_now_text(now)
  if now ~= slidinglogNow then slidinglogNow, slidinglogNowText = now, str(now) end
  return slidinglogNowText
end

-- slidinglogNow36, slidinglogState36: the base-36 text of the instant and
-- interval a state starts with, "NOW INTERVAL", made once for the calls
-- of a batch at one ms (slidinglog_text36).
local slidinglogNow36, slidinglogInterval36, slidinglogState36

local function slidinglog_text36(now, interval, b36)
  if now ~= slidinglogNow36 or interval ~= slidinglogInterval36 then
    slidinglogNow36, slidinglogInterval36 = now, interval
    slidinglogState36 = b36(now) .. ' ' .. b36(interval)
  end
  return slidinglogState36
end

-- The latest grant slidinglog_fast made, for the calls alike that follow
-- it on its key in a batch (slidinglog_again): its key (nil: none), list,
-- instant (ms), its state's text up to the total, the live total and the
-- tail's permits after it, and the expiry (µs). slDirty: a grant since
-- (slidinglog_again's) is not written yet.
-- slList is nil for a log kept in its state string (slidinglog_inline):
-- slPre is then its text up to the tail's permits. slPost is the text
-- after the tail's permits of a log in its list (slidinglog_extras).
local slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty, slPost

-- slidinglog_write_kept writes what slidinglog_again granted, if
-- anything, and forgets the grant: the key's TTLs are those of the grant
-- it followed, at the same instant, so they stay. b36 and numText are as
-- slidinglog_fast takes them.
local function slidinglog_write_kept(b36, numText)
  if slDirty then
    if slList then
      rcall('LSET', slList, '-1', numText(slTail))
      rcall('SET', slKey, slPre .. b36(slTotal) .. ' ' .. b36(slTail) .. slPost, 'KEEPTTL')
    else
      rcall('SET', slKey, slPre .. b36(slTail), 'KEEPTTL')
    end
    slDirty = false
  end
  slKey = nil
end

-- slidinglog_again is slidinglog_fast's acquire of n on key right after
-- its grant on key at the same instant, nothing else having written the
-- key since (policy_batch's calls alike): the log's total and tail in
-- hand, a grant at once adds to them, written later (slidinglog_write_kept).
-- Else it returns nil, the grants written first, and the call goes on.
local function slidinglog_again(key, start, rate, n, b36, numText)
  if slKey ~= key or slNow ~= floor(start / 1000) then return nil end
  local total = slTotal + n
  if total > rate then
    slidinglog_write_kept(b36, numText)
    return nil
  end
  slTotal, slTail, slDirty = total, slTail + n, true
  return {start, 1, rate - total, later(slE - start, 0)}
end

-- A log of at most slidinglogInline entries, none after the state's
-- last, is kept in its state string (policy.lua writes it after the
-- letter "i"): no list beside it, so a key is one string, and a call on
-- it one read and one write. It is "LAST OFFSET PERMITS ...", oldest
-- first, each entry's instant an offset back from last, but for the
-- newest entry at last itself (nearly every state written), which is
-- only its PERMITS: an odd count of numbers after LAST says so. The
-- general path keeps the list and writes the log inline after the call
-- (slidinglog_inline); the fast path reads and writes the inline form
-- itself.
local slidinglogInline = 4

-- slA, slP: a log's entries as the fast path reads them, instants (ms)
-- and permits, oldest first; slT the texts it reads them from: tables
-- kept from call to call.
local slA, slP, slT = {}, {}, {}

-- slidinglog_inline is the log of c, settled in S, as its inline text,
-- its list deleted; nil, the list kept, when the log holds more than
-- slidinglogInline entries, one after S's last (a reservation), or
-- expires other than one interval after its newest entry (a state kept
-- from an older version's interval): then with its head's instant, for
-- slidinglog_extras.
local function slidinglog_inline(c, S, b36)
  local listKey = c.listKey
  local t = rcall('LRANGE', listKey, '0', '8') -- one more than 2 * slidinglogInline elements
  local m = #t
  if m < 2 then return nil end
  local head = tonum(t[1])
  if m > 2 * slidinglogInline then return nil, head end
  if m % 2 == 1 then return nil end
  local l = S.Last
  local newest = tonum(t[m - 1])
  if not newest or newest > l or S.Expiry ~= newest + c.interval then return nil, head end
  local text = b36(l)
  for i = 1, m - 1, 2 do
    if i == m - 1 and newest == l then
      text = text .. ' ' .. b36(tonum(t[i + 1]))
    else
      text = text .. ' ' .. b36(l - tonum(t[i])) .. ' ' .. b36(tonum(t[i + 1]))
    end
  end
  rcall('DEL', listKey)
  return text
end

-- A log kept in its list has a state that says its tail and its head
-- too, where the list's are those its expiry and last tell (the tail
-- one interval before the expiry, at or before last): "LAST X TOTAL
-- TAILPERMITS HEADBACK", the head's instant HEADBACK before last. So the
-- fast path reads no list where no entry has left the window, nor the
-- tail of a long one. slidinglog_extras is that text after the total, in
-- decimal, of the log of c, settled in S, whose head is at head (ms); ""
-- for a log whose list is not so.
local function slidinglog_extras(c, S, head)
  local t, p = slidinglog_tail(c)
  if not t or not head or head > t or t > S.Last or S.Expiry ~= t + c.interval then return '' end
  return fmt(' %d %d', p, S.Last - head)
end

-- slidinglog_uninline reads an inline log's numbers v[1..nv] into the
-- state the algorithm's file reads, its expiry one interval I (ms) after
-- its newest entry; the entries, as list elements, go in c.inlined, for
-- the caller to push into the list (slidinglog_push_inlined) once every
-- limit is read.
local function slidinglog_uninline(c, v, nv, I)
  if nv < 2 then error('unreadable state') end
  local l, total, prev = v[1], 0, nil
  local items = {}
  for j = 2, nv, 2 do
    local a, p = l - v[j], v[j + 1]
    if j == nv then a, p = l, v[j] end -- the newest, at last
    if v[j] < 0 or p < 1 or (prev and a <= prev) then error('unreadable state') end
    items[#items + 1], items[#items + 2] = str(a), str(p)
    total, prev = total + p, a
  end
  c.inlined = items
  return {Last = l, Expiry = prev + I, Total = total}
end

-- slidinglog_push_inlined makes c's list the inline log it read, if any.
local function slidinglog_push_inlined(c)
  local items = c.inlined
  if items then
    rcall('DEL', c.listKey)
    rcall('RPUSH', c.listKey, unpack(items))
  end
end

-- slidinglogHead, slidinglogHeadNow, slidinglogHeadText: the text of an
-- inline state up to its entries, "HEAD NOW", made once for the calls of
-- a batch at one ms (slidinglog_head_text); slidinglogHeadPre, the same
-- and a space.
local slidinglogHead, slidinglogHeadNow, slidinglogHeadText, slidinglogHeadPre

local function slidinglog_head_text(head, now, b36)
  if now ~= slidinglogHeadNow or head ~= slidinglogHead then
    slidinglogHead, slidinglogHeadNow = head, now
    slidinglogHeadText = head .. b36(now)
    slidinglogHeadPre = slidinglogHeadText .. ' '
  end
  return slidinglogHeadText, slidinglogHeadPre
end

-- slidinglog_put_inline writes key's state as an inline log: the entries
-- slA, slP [first..last], all before now, then one at now of tail
-- permits, the state's last. It returns the text up to the tail's
-- permits (slidinglog_again). keep: the key's TTL stays (SET KEEPTTL),
-- else it is ttl (ms, text).
local function slidinglog_put_inline(key, head, now, first, last, tail, keep, ttl, b36)
  local h, pre = slidinglog_head_text(head, now, b36)
  local A, P = slA, slP
  local older = last - first + 1
  if older == 1 then
    pre = h .. ' ' .. b36(now - A[first]) .. ' ' .. b36(P[first]) .. ' '
  elseif older == 2 then
    pre = h .. ' ' .. b36(now - A[first]) .. ' ' .. b36(P[first]) .. ' ' .. b36(now - A[last]) .. ' ' ..
      b36(P[last]) .. ' '
  elseif older > 2 then
    pre = h
    for j = first, last do pre = pre .. ' ' .. b36(now - A[j]) .. ' ' .. b36(P[j]) end
    pre = pre .. ' '
  end
  if keep then
    rcall('SET', key, pre .. b36(tail), 'KEEPTTL')
  else
    rcall('SET', key, pre .. b36(tail), 'PX', ttl)
  end
  return pre
end

-- slidinglog_refuse answers on the fast path an acquire that does not
-- fit at once (by need permits) on a log whose live entries are slA,
-- slP [first..k]: a refusal for a wait beyond maxWait (µs); nil, for the
-- general path, for a reservation or a wait with no bound.
local function slidinglog_refuse(start, now, expiry, interval, rate, total, need, maxWait, first, k)
  if maxWait > 0 then maxWait = floor(maxWait / 1000) end
  if maxWait < 0 then return nil end
  local at, dropped = now, 0
  for j = first, k do
    dropped = dropped + slP[j]
    if dropped >= need then
      at = later(at, slA[j] + interval)
      break
    end
  end
  local wait = by_expiry(at, now, expiry) - now
  if wait <= maxWait then return nil end -- a reservation
  wait = wait * 1000
  return {start, 0, 0, 0, 1, wait, later(rate - total, 0), later(expiry * 1000 - start, 0), wait}
end

-- slidinglog_fast_inline is slidinglog_fast_read on a state of this
-- epoch and version in the inline form (raw, after heads.i): the same
-- acquire, granted at once, or refused; nil, having changed nothing, for
-- a reservation or a state it does not read (the general path tells). A
-- log that grows past slidinglogInline entries goes in
-- its list (the state then as slidinglog_fast_read writes one).
local function slidinglog_fast_inline(key, listKey, raw, heads, start, injected, rate, interval, n, maxWait, b36,
    numText)
  local L, t1, t2, t3, t4, t5, t6, t7, t8 = smatch(raw, heads.ipat)
  if not L then return nil end
  local T = slT
  T[1], T[2], T[3], T[4], T[5], T[6], T[7], T[8] = t1, t2, t3, t4, t5, t6, t7, t8
  -- m numbers after last, one separator before each, none after an
  -- empty capture: the length tells.
  local m, size = 0, heads.ni - 1 + #L
  for j = 1, 8 do
    local t = T[j]
    if t == '' then break end
    m, size = j, size + #t + 1
  end
  if #raw ~= size then return nil end
  local l = tonum(L, 36)
  if not l then return nil end
  local A, P = slA, slP
  local k = 0
  for j = 1, m, 2 do
    local a, p
    if j == m then
      a, p = l, tonum(T[j], 36) -- the newest, at last
    else
      a, p = tonum(T[j], 36), tonum(T[j + 1], 36)
      if not a then return nil end
      a = l - a
    end
    if not p or p < 1 or (k > 0 and a <= A[k]) then return nil end
    k = k + 1
    A[k], P[k] = a, p
  end
  local now = floor(start / 1000)
  local expiry = A[k] + interval
  if l > now then now = l end
  local first, total, keep = 1, 0, false
  if now >= expiry then
    first = k + 1 -- past its expiry: empty
  else
    -- The newest entry at now: the state's TTL ends where it would set it.
    keep = not injected and A[k] == now
    local cut = now - interval
    while first <= k and A[first] <= cut do first = first + 1 end
    for j = first, k do total = total + P[j] end
    local need = total + n - rate
    if need > 0 then
      return slidinglog_refuse(start, now, expiry, interval, rate, total, need, maxWait, first, k)
    end
  end
  -- Granted at now: added to the newest entry if it is at now.
  local last, tail = k, n
  if first <= k and A[k] == now then last, tail = k - 1, P[k] + n end
  total = total + n
  local e = (now + interval) * 1000
  if last - first + 2 <= slidinglogInline then
    local ttl = nil
    if not keep then ttl = numText(key_ttl(e, start, injected)) end
    local pre = slidinglog_put_inline(key, heads.i, now, first, last, tail, keep, ttl, b36)
    slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty = key, nil, now, pre, total, tail, e, false
    return {start, 1, later(rate - total, 0), later(e - start, 0)}
  end
  -- Into the list, made anew: a list left beside the string is not the log's.
  local items, m = slT, 0
  for j = first, last do
    items[m + 1], items[m + 2], m = str(A[j]), numText(P[j]), m + 2
  end
  items[m + 1], items[m + 2] = slidinglog_now_text(now), numText(tail)
  rcall('DEL', listKey)
  rcall('RPUSH', listKey, unpack(items, 1, m + 2))
  rcall('PEXPIRE', listKey, slidinglog_list_ttl(now, interval, start, injected, numText))
  local ttl = numText(key_ttl(e, start, injected))
  local pre = heads.l .. slidinglog_text36(now, interval, b36) .. ' '
  local post = ' ' .. b36(now - A[first])
  rcall('SET', key, pre .. b36(total) .. ' ' .. b36(tail) .. post, 'PX', ttl)
  slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty = key, listKey, now, pre, total, tail, e, false
  slPost = post
  return {start, 1, later(rate - total, 0), later(e - start, 0)}
end

-- slidinglog_fast_read is the acquire of a keyed policy of one sliding log
-- (policy.lua), on a key whose state is empty, past its expiry, or of this
-- epoch and version (raw starting with heads.l or, inline, heads.i) with
-- its newest entry at or before now: granted at once, or refused for a
-- wait beyond maxWait (µs) where the log's live entries lie in its first
-- slidinglogChunk elements. Nothing else: it returns nil, having changed
-- nothing, and the general path serves the call. It writes what that path
-- writes (the acquire above, its state string and TTLs: the log inline
-- when short enough), with no table but its reply, no Lua pcall, and the
-- list read at most once: not at all where the state tells that no entry
-- left the window (slidinglog_extras), else one LRANGE from the head,
-- which holds the tail too when the log is short (the state tells it
-- otherwise), each element read as a number at most once. b36 and
-- numText are policy.lua's policy_b36 and policy_ttl (a number's decimal
-- text, kept); interval is in ms, rate and n in permits.
local function slidinglog_fast_read(key, listKey, raw, heads, start, injected, rate, interval, n, maxWait, b36, numText)
  local now = floor(start / 1000)
  local total, expiry, trim = 0, 0, 0 -- trim: list elements to drop at the head
  local tAt, tPermits, head -- head: the list's first entry left in the window
  -- m: the list elements read from the head (-1: none read, the state
  -- telling that none left the window and the grant fits).
  local m, chunk = 0, nil
  -- empty: the log starts anew, 'del' (the state past its expiry: the
  -- list is deleted) or 'new' (no state: a list left over is not read
  -- again, and expires).
  local empty = 'new'
  -- kept: the state and the list expire at the instant this call would
  -- set (a call in the same ms as the state's last): their TTLs stay.
  local kept = false
  if raw then
    if sfind(raw, heads.i, 1, true) == 1 then
      return slidinglog_fast_inline(key, listKey, raw, heads, start, injected, rate, interval, n, maxWait, b36,
        numText)
    end
    if sfind(raw, heads.l, 1, true) ~= 1 then return nil end
    local l, x, t, tp, hb = smatch(raw, '^(%w+) (%w+) (%w+) ?(%w*) ?(%w*)$', heads.nl)
    if not l then return nil end
    l = tonum(l, 36)
    expiry = l + tonum(x, 36)
    if l > now then now = l end
    if expiry ~= 0 and now >= expiry then
      empty = 'del'
    else
      empty = nil
      kept = not injected and expiry == now + interval and l == now
      total = tonum(t, 36)
      local cut = now - interval
      if hb ~= '' then
        -- The list's tail and head, as the state says (slidinglog_extras).
        tAt, tPermits, head = expiry - interval, tonum(tp, 36), tonum(hb, 36)
        if not tPermits or not head then return nil end
        head = l - head
        if head > cut and total + n <= rate then m = -1 end
      elseif tp ~= '' then
        return nil
      end
      if m == 0 then
        chunk = rcall('LRANGE', listKey, '0', '15')
        m = #chunk
        if m < 2 or m % 2 == 1 then return nil end
        -- The elements at the head that have left the window; a, the
        -- instant of the first entry left (nil: none).
        local sum, a = 0, nil
        while trim < m do
          a = tonum(chunk[trim + 1])
          if not a then return nil end
          if a > cut then break end
          local p = tonum(chunk[trim + 2])
          if not p then return nil end
          sum = sum + p
          trim = trim + 2
        end
        head = a
        if hb ~= '' then
          if trim == m and m == slidinglogChunk then return nil end -- the head goes on past the chunk
        elseif m < slidinglogChunk then
          tAt, tPermits = a, chunk[m] -- the permits read only when needed
          if trim < m - 2 then tAt = tonum(chunk[m - 1]) end
        elseif trim == m then
          return nil -- the head goes on past the chunk
        else
          local t = rcall('LRANGE', listKey, '-2', '-1')
          tAt, tPermits = tonum(t[1]), t[2]
        end
        total = total - sum
      end
      if not tAt or tAt > now then return nil end -- unreadable, or a reservation
      if tAt == now then
        tPermits = tonum(tPermits)
        if not tPermits then return nil end
      end
      local need = total + n - rate
      if need > 0 then
        -- Answered here only of a log all read.
        if m == slidinglogChunk then return nil end
        local A, P, k = slA, slP, 0
        for i = trim + 1, m - 1, 2 do
          local a, p = tonum(chunk[i]), tonum(chunk[i + 1])
          if not a or not p then return nil end
          k = k + 1
          A[k], P[k] = a, p
        end
        return slidinglog_refuse(start, now, expiry, interval, rate, total, need, maxWait, 1, k)
      end
    end
  end
  -- Granted at now, the newest entry's instant or later: inline when the
  -- log then holds at most slidinglogInline entries.
  local last, tail = 0, n
  if not empty then
    if m == -1 then
      -- The log held more than slidinglogInline entries (else it would
      -- be inline), and none has left.
      last = slidinglogInline + 1
    elseif m == slidinglogChunk then
      -- The list's length is not known: with no more than
      -- slidinglogInline entries left in the chunk, the general path
      -- tells.
      if m - trim <= 2 * slidinglogInline then return nil end
      last = slidinglogInline + 1
    else
      local A, P = slA, slP
      local to = m - 1
      if tAt == now then to, tail = m - 3, tPermits + n end
      if (to - trim + 1) / 2 < slidinglogInline then
        for i = trim + 1, to, 2 do
          local a, p = tonum(chunk[i]), tonum(chunk[i + 1])
          if not a or not p then return nil end
          last = last + 1
          A[last], P[last] = a, p
        end
      else
        last = slidinglogInline + 1
      end
    end
  end
  total = total + n
  local e = (now + interval) * 1000
  if last < slidinglogInline then
    if empty ~= 'new' then rcall('DEL', listKey) end
    local ttl = nil
    if not kept then ttl = numText(key_ttl(e, start, injected)) end
    local pre = slidinglog_put_inline(key, heads.i, now, 1, last, tail, kept, ttl, b36)
    slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty = key, nil, now, pre, total, tail, e, false
    return {start, 1, later(rate - total, 0), later(e - start, 0)}
  end
  if trim > 0 then rcall('LTRIM', listKey, slidinglogTrims[trim], '-1') end
  -- A list not read (m -1) may be gone, its state not (evicted alone):
  -- then nothing is written, and the general path tells. (A list read
  -- is there, and trimmed it keeps its entries left.)
  if tAt == now then
    tail = tPermits + n
    local r = redis.pcall('LSET', listKey, '-1', numText(tail))
    if type(r) == 'table' and r.err then return nil end
  elseif rcall('RPUSHX', listKey, slidinglog_now_text(now), numText(n)) == 0 then
    return nil
  end
  local pre = heads.l .. slidinglog_text36(now, interval, b36) .. ' '
  local post = ' ' .. b36(now - head)
  local st = pre .. b36(total) .. ' ' .. b36(tail) .. post
  if kept then
    -- SET keeps the state's TTL (Redis rewrites no command either), and
    -- the list's stays.
    rcall('SET', key, st, 'KEEPTTL')
  else
    if injected or floor(expiry / interval) ~= floor(now / interval) + 1 then
      rcall('PEXPIRE', listKey, slidinglog_list_ttl(now, interval, start, injected, numText))
    end
    rcall('SET', key, st, 'PX', numText(key_ttl(e, start, injected)))
  end
  slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty = key, listKey, now, pre, total, tail, e, false
  slPost = post
  return {start, 1, later(rate - total, 0), later(e - start, 0)}
end

-- slidinglogNxGet: Redis takes SET's NX and GET together (7.0 and newer).
local slidinglogNxGet

-- slidinglogFound weighs how often the latest keys slidinglog_fast read
-- had a state (16 times the share, over about the last 16 keys): a SET
-- NX GET that finds one costs Redis more than the GET it stands for, so
-- where most keys have one (a few busy keys) slidinglog_fast reads them
-- by GET. slidinglogAdapt: false makes it try SET NX GET on every key
-- (tests).
local slidinglogFound, slidinglogAdapt = 0, true

-- slidinglog_fast is slidinglog_fast_read on a key whose state is not read
-- yet; it returns the reply (nil: the general path serves the call) and
-- the state it read (nil: none read). A key with no state is the common
-- call of a service counting requests per key: its state, known before
-- it is read (one entry, inline), is written by one SET NX GET that reads
-- it too, and only when another state is there does the call go on as
-- slidinglog_fast_read: one command, not a GET then a SET, where most keys
-- have no state (slidinglogFound). heads is policy.lua's (policy_heads).
local function slidinglog_fast(key, listKey, heads, start, injected, rate, interval, n, maxWait, b36, numText)
  if not slidinglogFast then return nil, nil end
  if slidinglogNxGet == nil then
    slidinglogNxGet = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
  end
  local raw
  local nxGet = slidinglogNxGet and (slidinglogFound < 9 or not slidinglogAdapt)
  slidinglogFound = slidinglogFound - slidinglogFound / 16
  if nxGet then
    -- What slidinglog_fast_read writes for a key with no state.
    local now = floor(start / 1000)
    local e = (now + interval) * 1000
    local ttl = numText(key_ttl(e, start, injected))
    local _, pre = slidinglog_head_text(heads.i, now, b36)
    raw = rcall('SET', key, pre .. b36(n), 'PX', ttl, 'NX', 'GET')
    if not raw then
      slKey, slList, slNow, slPre, slTotal, slTail, slE, slDirty = key, nil, now, pre, n, n, e, false
      return {start, 1, later(rate - n, 0), later(e - start, 0)}, false
    end
  else
    raw = rcall('GET', key)
  end
  if raw then slidinglogFound = slidinglogFound + 1 end
  return slidinglog_fast_read(key, listKey, raw, heads, start, injected, rate, interval, n, maxWait, b36, numText), raw
end
