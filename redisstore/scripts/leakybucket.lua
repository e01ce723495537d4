-- leakybucket.lua: the leaky bucket (algorithm/leakybucket/leakybucket.go).
-- It keeps a deficit (deficit.lua): the work queued, draining at Rate per
-- Interval. It answers a request of n <= Capacity at the instant the work
-- ahead of it has drained (grants spaced Interval/Rate apart), refusing
-- with code 2 when the queue has no room for n; Release hands nothing back
-- (a grant let out has drained).

-- remaining: what a request could be granted at once: the queue's room,
-- if nothing is ahead of it.
local function leakybucket_remaining(c, owed)
  if owed > 0 then return 0 end -- work ahead: none at once
  return later(floor((c.capacity * c.interval - owed) / c.interval), 0)
end

algorithms['leaky-bucket'] = {
  unit = 1,
  most = 'capacity',
  decode = deficit_decode,
  encode = deficit_encode,

  acquire = function(c, S, n, maxWait)
    local d = deficit_advance(c, S)
    local owed, rate = d.Owed, c.rate
    local wait = ceildiv(owed, rate) -- the work ahead, rounded up to a whole µs
    -- Not before c.notBefore (algorithm.State's AcquireAt).
    local nb = (c.notBefore or 0) - c.now
    local deferred = nb > wait
    if deferred then wait = nb end
    local limit = (c.capacity - n) * c.interval
    local full = owed > limit and ceildiv(owed - limit, rate) > 0
    if full or c.probe or (maxWait >= 0 and wait > maxWait) then
      local code = 0
      if full then code = 2 end -- the queue is full
      return reply(c, code, leakybucket_remaining(c, owed), wait) -- a refusal changes nothing
    end
    local before = owed
    owed = owed + n * c.interval
    d.Owed = owed
    deficit_granted(c, d, c.now + wait)
    if deferred then deficit_defer(c, d, wait, before, n) end
    deficit_settle(c, S, d)
    return reply(c, 1, leakybucket_remaining(c, owed), wait)
  end,

  cancel = function(c, S, n, at)
    local d = deficit_advance(c, S)
    local got = deficit_cancel(c, d, true, n, at)
    deficit_settle(c, S, d)
    return reply(c, 1, got, 0)
  end,

  release = function(c, S, _, _)
    deficit_settle(c, S, deficit_advance(c, S))
    return reply(c, 1, 0, 0)
  end,

  available = function(c, S)
    return reply(c, 1, leakybucket_remaining(c, deficit_advance(c, S).Owed), 0)
  end,
}
