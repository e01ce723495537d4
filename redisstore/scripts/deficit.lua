-- deficit.lua: the deficit both buckets keep (algorithm/deficit.go).
-- Owed is permits x Scale still to drain, counted under the config Rate,
-- Scale, Burst it was last changed under; Head, Tail, Live and Held are the
-- queue of reservations, kept while it is open (Live > 0). Stored after
-- "last expiry" as "Owed Scale Rate Burst", then while the queue is open
-- "Head Tail Live Held" (Head and Tail as offsets from last).
--
-- A call works on a copy, d (Go's d := s.Deficit): deficit_advance fills
-- it, the call changes it, deficit_settle writes it to the state. A refusal
-- never settles, and so changes nothing. d is one table, made on first
-- use and kept in c (c.d) for every limiter after: deficit_advance sets
-- each of its fields.

local maxOwed = 2 ^ 53 -- algorithm.maxOwed

-- deficit_decode reads the fields after "last expiry" (v[3..k]).
local function deficit_decode(v, k)
  local l = v[1]
  local S = {Last = l, Expiry = l + v[2], Owed = v[3], Scale = v[4], Rate = v[5], Burst = v[6]}
  if k >= 7 then S.Head = l + v[7] end
  if k >= 8 then S.Tail = l + v[8] end
  if k >= 9 then S.Live = v[9] end
  if k >= 10 then S.Held = v[k] end
  return S
end

local function deficit_encode(c, S)
  local st = fmt('%d %d %d %d', S.Owed, S.Scale, S.Rate, S.Burst)
  if (S.Live or 0) > 0 then
    local l = S.Last
    st = st .. fmt(' %d %d %d %d', S.Head - l, S.Tail - l, S.Live, S.Held)
  end
  return st
end

-- deficit_drain is owed drained from l to t at r per time unit (Deficit.drain).
local function deficit_drain(owed, l, t, r)
  if t - l > 0 and owed > 0 then
    if t - l >= ceildiv(owed, r) then return 0 end
    return owed - (t - l) * r
  end
  return owed
end

-- deficit_advance brings the state's deficit to now under the config, in
-- d (Deficit.Advance): a config that took effect after the state last
-- changed applies from that instant on only, the state's own config
-- draining it up to there.
local function deficit_advance(c, S)
  local d = c.d
  if not d then d = {}; c.d = d end
  local now, rate, interval, burst = c.now, c.rate, c.interval, c.burst
  if c.dS == S and c.dNow == now then
    -- The call before, at this instant, settled S from d (deficit_settle):
    -- brought to now again, S is d as it stands (nothing drains in no
    -- time, and its queue's tail is not before now).
    return d
  end
  local owed, scale, r, b = S.Owed or 0, S.Scale or 0, S.Rate or rate, S.Burst or burst
  local l = S.Last or 0
  local qh, qt, ql, qd = S.Head or 0, S.Tail or 0, S.Live or 0, S.Held or 0
  if scale ~= 0 and (r ~= rate or scale ~= interval or b ~= burst) then
    qh, qt, ql, qd = 0, 0, 0, 0 -- a change of config closes the queue
    local since = c.since
    if since > l then
      local mid = since
      if now < mid then mid = now end
      owed = deficit_drain(owed, l, mid, r)
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
  owed = deficit_drain(owed, l, now, rate)
  if ql > 0 and (now > qt or owed == 0) then qh, qt, ql, qd = 0, 0, 0, 0 end
  d.Owed, d.Head, d.Tail, d.Live, d.Held = owed, qh, qt, ql, qd
  return d
end

-- deficit_settle writes d to the state with its expiry, or empties the
-- state when nothing is owed (Deficit.Settle).
local function deficit_settle(c, S, d)
  local owed = d.Owed
  if owed == 0 then
    S.Owed, S.Scale, S.Rate, S.Burst, S.Head, S.Tail, S.Live, S.Held = nil, nil, nil, nil, nil, nil, nil, nil
    save(c, S, nil)
    c.dS = nil
  else
    S.Owed, S.Scale, S.Rate, S.Burst = owed, c.interval, c.rate, c.burst
    S.Head, S.Tail, S.Live, S.Held = d.Head, d.Tail, d.Live, d.Held
    save(c, S, c.now + ceildiv(owed, c.rate))
    -- d is S's deficit at c.now: the next call at this instant takes it
    -- as it is (deficit_advance).
    c.dS, c.dNow = S, c.now
  end
end

-- deficit_granted books a grant for at in the queue: it opens the queue or
-- counts in it (Deficit.Granted).
local function deficit_granted(c, d, at)
  if d.Live > 0 then
    d.Live = d.Live + 1
    d.Tail = later(d.Tail, at)
  elseif at > c.now then
    d.Head, d.Tail, d.Live = c.now, at, 1
  end
end

-- deficit_defer books a grant of n permits for now+wait, later than its
-- own instant, after deficit_granted (Deficit.Defer): the time until then
-- is work owed, and held. before is the owed before the grant's debt.
local function deficit_defer(c, d, wait, before, n)
  local debt = n * c.interval
  local target = maxOwed
  if wait <= floor((maxOwed - debt) / c.rate) then target = wait * c.rate + debt end
  local extra = target - (before + debt)
  if extra > 0 then
    d.Owed = d.Owed + extra
    d.Held = d.Held + extra
  end
end

-- deficit_cancel hands back a reservation of n permits for at and returns
-- the whole permits handed back (Deficit.Cancel): the last live grant of
-- the open queue hands back all it held; before that a token bucket hands
-- back what no later grant was promised, a leaky bucket only a reservation
-- nothing is queued after.
local function deficit_cancel(c, d, leaky, n, at)
  local now, rate, interval = c.now, c.rate, c.interval
  if at < now then return 0 end
  local owed, ql = d.Owed, d.Live
  local debt = n * interval
  if ql == 0 or at <= d.Head or at > d.Tail then
    if ql > 0 or at > now then return 0 end
    local give = math.min(debt, owed)
    d.Owed = owed - give
    return floor(give / interval)
  end
  if ql == 1 then
    d.Owed = later(0, owed - debt - d.Held)
    d.Head, d.Tail, d.Live, d.Held = 0, 0, 0, 0
    return n
  end
  d.Live = ql - 1
  local after = (d.Tail - at) * rate + rate - 1
  local give = 0
  if leaky then
    after = math.min(after, owed - (at - now) * rate - debt + rate - 1)
    if after < interval then give = debt end
  else
    give = later(0, debt - after)
  end
  give = math.min(give, owed)
  d.Held = d.Held + debt - give
  d.Owed = owed - give
  return floor(give / interval)
end

-- deficit_give_back hands back only what no later reservation built on
-- (Deficit.GiveBack) and returns the whole permits handed back.
local function deficit_give_back(c, d, n, at, hold)
  local owed = d.Owed
  local after = later(0, owed - (at - c.now) * c.rate - hold)
  local give = math.min(later(0, n * c.interval - after), owed)
  d.Owed = owed - give
  return floor(give / c.interval)
end
