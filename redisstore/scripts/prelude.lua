-- prelude.lua: what every algorithm's file uses. The files of the limiter
-- library are joined in this order (redisstore's limiterFiles): prelude,
-- windows, deficit, one file per algorithm (named as its Go package in
-- algorithm/), then limiter (the batch loop). Each algorithm file
-- registers its rules in the table algorithms, by the algorithm's name;
-- the batch loop dispatches through it.
--
-- Time is in microseconds since the Unix epoch (Redis TIME has them), so
-- the fixed window, the sliding counter and the buckets keep to their
-- spacing for rates up to 10^6 per second. The sliding log counts
-- milliseconds inside (its list has an entry per ms): its instants, waits
-- and retry-afters are whole ms, still sent and answered in µs. Every value
-- stays below 2^53, exact as a Lua number (redlimit.MaxCountTimesInterval).
--
-- The limiter being served is a context table, c, passed to every
-- function explicitly. It is one table that the batch loop's load fills
-- anew for each limiter in turn (a table made per limiter would cost
-- Redis's Lua more than many a limiter's rules: its allocation, its
-- growth field by field, its collection), so nothing of one limiter
-- outlives its turn. Its fields:
--   now          the call's instant, in the limiter's unit (never back)
--   unit         the unit in µs: 1000 (sliding log) or 1
--   rate, interval (in the unit), burst, capacity, since (field t: when
--                the stored config took effect, in µs; 0: unknown)
--   S            the state, fields named as in the Go State of algorithm/<name>
--   forgotten    the state is past its expiry at now: it counts as empty
--   dirty        the state changed: write it after the limiter's calls
--   out          the run's reply, which reply appends to
--   notBefore    acquire grants no earlier than this instant (in the unit;
--                nil: none), algorithm.State's AcquireAt (policy.lua)
--   probe        acquire only answers, changing nothing: code 0 (or 2, a
--                full queue) and the wait with no bound (policy.lua)
-- An algorithm may keep more of its own in c (the sliding log its list's
-- tail and head, read once per limiter): fields its open sets for each
-- limiter, or that it writes before it reads them (deficit.lua's d).
--
-- A state is stored as one string: "last expiry" (instants after the first
-- are offsets from it) then the algorithm's fields (its encode and decode).
-- The states in µs start with the mark "u": one without it was written in
-- ms by an older redlimit and is gone, as a state of another epoch. A
-- client's state starts with the epoch of its config; one of another epoch
-- is gone (a reset).

-- Library functions, taken on the first run: a function library's loading
-- sees no globals but redis. A function's global is a lookup in its
-- globals' table, then through the __index of that table's metatable
-- (Redis keeps the real ones there), so the hot paths use these locals:
-- rcall (redis.call), tonum (tonumber), sfind and smatch (string.find
-- and string.match).
local floor, fmt, rcall, tonum, sfind, smatch
local function str(x) return fmt('%d', x) end
local function later(a, b) if a > b then return a end return b end
local function ceildiv(a, b) return floor((a + b - 1) / b) end

-- key_ttl is the TTL (ms) of a key whose state expires at e (µs) seen
-- from start: at least 1 ms; with a caller's clock a minute longer, as
-- Redis still expires keys by its own (the state's expiry decides when
-- it counts as empty).
local function key_ttl(e, start, injected)
  local ttl = later(ceildiv(e - start, 1000), 1)
  if injected then ttl = ttl + 60000 end
  return ttl
end

-- run_start is a run's instant in microseconds and whether it was
-- injected: a test's clock passes it as argv[1], else it is Redis TIME.
-- It also takes the library functions on the first run.
local function run_start(argv)
  if not floor then
    floor, fmt, rcall, tonum = math.floor, string.format, redis.call, tonumber
    sfind, smatch = string.find, string.match
  end
  if argv[1] ~= '' then return tonumber(argv[1]), true end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), false
end

-- algorithms maps an algorithm's name to its rules, each file adding its
-- own: {unit, most (the config field bounding one request: 'rate', 'burst'
-- or 'capacity'), list (it keeps a Redis list beside its state), decode(v,
-- k) (the state from the numbers v[1..k]: last, expiry offset, then its
-- own; nil when unreadable), encode(c, S) (its own fields, as text after
-- "last expiry"), acquire(c, S, n, maxWait), cancel(c, S, n, at),
-- release(c, S, n, upTo), available(c, S), finish(c) (optional: before the
-- state is written)}. maxWait, at and upTo come in the limiter's unit.
local algorithms = {}

-- by_expiry caps a grant instant at the state's expiry, after which it is
-- empty and anything fits (algorithm.ByExpiry).
local function by_expiry(at, now, expiry)
  if expiry > now and at > expiry then return expiry end
  return at
end

-- save ends every change: the state's expiry, or nil when it is empty (the
-- algorithm has cleared its own fields, as Go's settle does). The state is
-- written once, after the limiter's calls.
local function save(c, S, expiry)
  c.dirty = true
  if not expiry then
    S.Last, S.Expiry = nil, nil
    return
  end
  S.Last, S.Expiry = c.now, expiry
end

-- c.grantS, c.grantNow mark a grant made at once on state S at instant
-- now by an algorithm's acquire: the next plain acquire (not c.probe nor
-- c.notBefore) on S at that instant, in a limiter's run, is decided from
-- what that grant left, nothing having moved since. An acquire that
-- waits or reserves, a cancel and a release clear it (c.grantS = nil).
-- The buckets follow the same rule with deficit.lua's own mark, c.dS and
-- c.dNow, which every change of their deficit sets (deficit_settle). The
-- test is written out in each acquire: a function call there costs more
-- than the rest of the test.

-- reply answers a call: code, value and wait (in µs). A grant's instant is
-- now + wait, which the client works out itself, so it is not sent.
--   code  1 granted / done, 0 refused, 2 refused: a leaky bucket's queue is
--         full, -2 permits exceed the most grantable at once
--   value acquire, available: permits left; cancel, release: permits handed back
--   wait  acquire: from now until the grant, or the retry-after (refused)
local function reply(c, code, value, wait)
  local out = c.out
  local k = #out
  out[k + 1], out[k + 2], out[k + 3] = code, value, wait * c.unit
end

-- decode_state reads a stored state string st into the algorithm's state
-- table, or returns nil when it is gone: of another epoch (epochText, for
-- a client's state; nil for the Overall one), written in ms by an older
-- redlimit (no mark where the unit is µs), or unreadable.
local function decode_state(impl, st, epochText, v)
  local k, i, mark = 0, 0, impl.unit == 1
  local tonumber = tonumber -- a global costs a table lookup per use
  if epochText then i = -1 end
  for x in string.gmatch(st, '%S+') do
    if i == -1 then
      if x ~= epochText then return nil end
      i = 0
    elseif mark then
      if x ~= 'u' then return nil end
      mark = false
    else
      local n = tonumber(x)
      if not n then return nil end -- garbage: the state is gone
      k = k + 1
      v[k] = n
    end
  end
  if k < 2 then return nil end
  return impl.decode(v, k)
end

-- encode_state is the state as stored (without a client's epoch), made
-- as one string: every string Redis's Lua makes is hashed and collected.
local function encode_state(impl, c, S)
  local l = S.Last
  local own = impl.encode(c, S)
  local mark = ''
  if impl.unit == 1 then mark = 'u ' end
  if own == '' then return fmt('%s%d %d', mark, l, S.Expiry - l) end
  return fmt('%s%d %d %s', mark, l, S.Expiry - l, own)
end
