-- tokenbucket.lua: the token bucket (algorithm/tokenbucket/tokenbucket.go).
-- It keeps a deficit (deficit.lua): how far the bucket of Burst tokens is
-- from full, refilled at Rate per Interval. It answers a request of n <=
-- Burst at once while n tokens are left, else at the instant they will
-- be, which a caller may wait for (a reservation, counted in the queue);
-- Release hands back tokens no later reservation built on.

-- remaining: the whole tokens the bucket holds.
local function tokenbucket_remaining(c, owed)
  return later(floor((c.burst * c.interval - owed) / c.interval), 0)
end

algorithms['token-bucket'] = {
  unit = 1,
  most = 'burst',
  decode = deficit_decode,
  encode = deficit_encode,

  acquire = function(c, S, n, maxWait)
    local now = c.now
    if c.dS == S and c.dNow == now and not (c.probe or c.notBefore) then
      -- The call before settled S at this instant (deficit_settle): with
      -- no queue, a grant now is its debt added to d and the expiry moved.
      local d, interval = c.d, c.interval
      local owed, limit = d.Owed + n * interval, c.burst * interval
      if owed <= limit and d.Live == 0 then
        d.Owed, S.Owed, S.Expiry = owed, owed, now + ceildiv(owed, c.rate)
        return reply(c, 1, floor((limit - owed) / interval), 0)
      end
    end
    local d = deficit_advance(c, S)
    local limit, owed = c.burst * c.interval, d.Owed + n * c.interval
    local wait = 0
    if owed > limit then wait = ceildiv(owed - limit, c.rate) end
    -- Not before c.notBefore (algorithm.State's AcquireAt).
    local nb = (c.notBefore or 0) - c.now
    local deferred = nb > wait
    if deferred then wait = nb end
    if c.probe or (maxWait >= 0 and wait > maxWait) then
      return reply(c, 0, tokenbucket_remaining(c, d.Owed), wait) -- a refusal changes nothing
    end
    local before = d.Owed
    d.Owed = owed
    deficit_granted(c, d, c.now + wait)
    if deferred then deficit_defer(c, d, wait, before, n) end
    deficit_settle(c, S, d)
    return reply(c, 1, tokenbucket_remaining(c, d.Owed), wait)
  end,

  cancel = function(c, S, n, at)
    local d = deficit_advance(c, S)
    local got = deficit_cancel(c, d, false, n, at)
    deficit_settle(c, S, d)
    return reply(c, 1, got, 0)
  end,

  release = function(c, S, n, _)
    local d = deficit_advance(c, S)
    local got = deficit_give_back(c, d, n, c.now, c.burst * c.interval)
    deficit_settle(c, S, d)
    return reply(c, 1, got, 0)
  end,

  available = function(c, S)
    return reply(c, 1, tokenbucket_remaining(c, deficit_advance(c, S).Owed), 0)
  end,
}
