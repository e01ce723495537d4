-- policy.lua: the calls of a keyed policy (redlimit.PolicyStore) on one
-- key, every limit of the policy in one run. It is part of the limiter
-- library (after limiter.lua, whose parse it uses) and runs each limit by
-- its algorithm's file, as a limiter's state: a request is granted only if
-- every limit grants it, then charged to all of them, at once or reserved
-- on all of them at one instant; a refusal charges none
-- (algorithm.AcquireAll). A cancel hands a reservation back on every limit. The policy's config lives in another slot
-- (policyconfig.lua), so the client sends the one it knows with each call.
--
-- KEYS[1] the key's state, PREFIX{POLICY%:KEY}, a string with a TTL:
--   "EPOCH VERSION|STATE1|STATE2|..." (epoch and version in base 36), one
--   state per limit, "" when empty, else a letter naming the algorithm
--   then its state as prelude.lua writes it (without the "u" mark), its
--   numbers in base 36: a key's memory is mostly its name and this string.
--   A bucket's leaves out its expiry (and the config it is counted under,
--   when it is its version's); a window's has a short form, which leaves
--   out what the windows' grid tells (policy_short). A sliding log of a
--   few entries is written inline, after the letter "i", with no list
--   (slidinglog.lua's slidinglog_inline); a longer one's state says its
--   list's tail and head too (slidinglog_extras).
--   The state is that of the policy's version VERSION. It expires when
--   its last limit counts as empty.
-- KEYS[1+i] limit i's sliding-log list, PREFIX{POLICY%:KEY}I (TTL too,
--   at a step of the interval: slidinglog.lua's slidinglog_list_end)
-- ARGV[1] now in µs, or "" to read Redis TIME
-- ARGV[2] op: "acquire" | "cancel" | "release" | "status"
-- ARGV[3] permits; ARGV[4] acquire: the maximum wait in µs (-1: no bound),
--   cancel: the reservation's instant in µs
-- ARGV[5] the policy's epoch, ARGV[6] its version (both base 36), ARGV[7]
--   the instant its limits took effect (µs, 0: unknown), ARGV[8] "1" when
--   the client has just read the policy from Redis (a state of another
--   epoch is then gone, whatever its version)
-- ARGV[9] the number of limits L, ARGV[10..9+L] the limits, one config
--   each (limiter.lua's form); ARGV[10+L] a version of the policy older
--   than ARGV[6] (base 36, or ""), ARGV[11+L..] its limits as the client
--   found them (none: it found none)
-- Or, for a lone acquire of one limit whose ARGV[7] is "0", ARGV[8] ""
-- and ARGV[11] "" (policy_lone), just five: ARGV[1] now, ARGV[2] permits,
-- ARGV[3] the maximum wait, ARGV[4] "EPOCH VERSION", ARGV[5] the limit.
--
-- Reply: one MessagePack array of integers (cmsgpack.pack), {now (µs),
-- flag, ...}: one string the client reads in place, where a Redis array
-- costs it an allocation per element:
--   flag -4: stale: the key's state was written under a newer version of
--            the policy than the one sent; the client reads it again
--   flag -5: a bucket's state was written under the older version that
--            follows, whose limits the client sends (ARGV[10+L..]) and asks
--            again
--   flag -3: the key holds what redlimit did not write; -2: permits exceed
--            what a limit can grant at once
--   flag 0: acquire and status: granted (1/0), full (1/0), the index of the
--            refusing limit (1-based, 0: none), wait (µs), then per limit
--            remaining, reset-after (µs), wait (µs);
--           cancel and release: the fewest permits a limit handed back
--   flag 1: acquire of a one-limit policy granted at once, no wait: then
--           remaining, reset-after (µs): half the numbers to reply

-- policyCodes names each algorithm's state in the key by a letter (an
-- algorithm added to the registry adds its own; one without a letter
-- keeps no state from one call to the next).
local policyCodes = {['sliding-log'] = 'l', ['fixed-window'] = 'f', ['sliding-counter'] = 'c',
  ['token-bucket'] = 't', ['leaky-bucket'] = 'q'}

-- policyBuckets: the codes of the algorithms that keep a deficit.
local policyBuckets = {t = true, q = true}

-- policy_to36 writes a whole number in base 36 (lower case, "-" first
-- when negative); policy_from36 reads one back (tonumber(x, 36) takes no
-- sign). policy_to36 makes one string per number, by one concatenation
-- of its pairs of digits (policyPairs: "00" to "zz", made when first
-- used) with no loop per digit: every string Redis's Lua makes is hashed
-- and collected, and the keyed call writes a state per key.
local fixedImpl, bucketImpl, leakyImpl, counterImpl, logImpl
local function policy_digit(d)
  if d < 10 then return d + 48 end -- '0'..'9'
  return d + 87 -- 'a'..'z'
end
-- policyPairs and policyLeads are made at the first run: a function
-- library's loading sees no globals but redis.
local policyPairs, policyLeads
local function policy_init()
  policyPairs = setmetatable({}, {__index = function(t, d)
    local v = string.char(policy_digit((d - d % 36) / 36), policy_digit(d % 36))
    t[d] = v
    return v
  end})
  -- policyLeads is policyPairs without a leading zero: a number's first digits.
  policyLeads = setmetatable({}, {__index = function(t, d)
    local v = d < 36 and string.char(policy_digit(d)) or policyPairs[d]
    t[d] = v
    return v
  end})
  fixedImpl, bucketImpl, leakyImpl = algorithms['fixed-window'], algorithms['token-bucket'], algorithms['leaky-bucket']
  counterImpl = algorithms['sliding-counter']
  logImpl = algorithms['sliding-log']
end
local function policy_b36(x)
  if x < 1296 then
    if x < 0 then return '-' .. policy_b36(-x) end
    return policyLeads[x]
  end
  local a = x % 1296
  x = (x - a) / 1296
  if x < 1296 then return policyLeads[x] .. policyPairs[a] end
  local b = x % 1296
  x = (x - b) / 1296
  if x < 1296 then return policyLeads[x] .. policyPairs[b] .. policyPairs[a] end
  local c = x % 1296
  x = (x - c) / 1296
  if x < 1296 then return policyLeads[x] .. policyPairs[c] .. policyPairs[b] .. policyPairs[a] end
  local d = x % 1296
  x = (x - d) / 1296
  return policy_b36(x) .. policyPairs[d] .. policyPairs[c] .. policyPairs[b] .. policyPairs[a]
end
-- policy_p36 is policy_b36(x) in pieces, its sign ("" or "-") then five
-- runs of digits ("" where none), for a state's one concatenation: a
-- number's own text would be one more string made, hashed and collected.
local function policy_p36(x)
  local sign = ''
  if x < 0 then sign, x = '-', -x end
  if x < 1296 then return sign, policyLeads[x], '', '', '', '' end
  local a = x % 1296
  x = (x - a) / 1296
  if x < 1296 then return sign, policyLeads[x], policyPairs[a], '', '', '' end
  local b = x % 1296
  x = (x - b) / 1296
  if x < 1296 then return sign, policyLeads[x], policyPairs[b], policyPairs[a], '', '' end
  local c = x % 1296
  x = (x - c) / 1296
  if x < 1296 then return sign, policyLeads[x], policyPairs[c], policyPairs[b], policyPairs[a], '' end
  local d = x % 1296
  x = (x - d) / 1296
  if x < 1296 then return sign, policyLeads[x], policyPairs[d], policyPairs[c], policyPairs[b], policyPairs[a] end
  return sign, policy_b36(x * 1296 + d), policyPairs[c], policyPairs[b], policyPairs[a], ''
end
local function policy_to36(x)
  return policy_b36(tonumber(x))
end
-- policy_numbers36 reads a state's numbers, in base 36, for the
-- algorithm's decode: decode_state without the decimal text between. It
-- returns them and their count (fewer than two: the state is gone).
-- policyNumbers is the table it reads them into, one for every call, as
-- limiter.lua's numbers.
local policyNumbers = {}
local function policy_numbers36(text)
  local v, k = policyNumbers, 0
  local tonumber = tonumber -- a global costs a table lookup per use
  for x in string.gmatch(text, '%S+') do
    local n
    if string.byte(x) == 45 then -- '-'
      n = tonumber(string.sub(x, 2), 36)
      if n then n = -n end
    else
      n = tonumber(x, 36)
    end
    if not n then error('unreadable state') end
    k = k + 1
    v[k] = n
  end
  return v, k
end
local function policy_from36(x)
  if string.sub(x, 1, 1) == '-' then return fmt('%d', -tonumber(string.sub(x, 2), 36)) end
  return fmt('%d', tonumber(x, 36))
end

-- policy_short is a window's state in its short form, as text in decimal
-- (nil when the state has no short form): the form of nearly every state
-- written, and a busy key's memory is mostly its state. A fixed window's
-- "last permits" is one window, the one holding last, its expiry that
-- window's end. A sliding counter's "last permits" is the window holding
-- last (its tail, last itself), then the permits of the window before
-- if it has any, its expiry the end of the window after. The long form
-- says each start and the expiry: with a window, more than three
-- numbers. A state with no window left is written empty (policy_serve),
-- never in a long form a short one could be taken for.
local function policy_short(c, S)
  local l, W, I = S.Last, S.Windows, c.interval
  local w = l - l % I
  if c.code == 'f' then
    if #W == 2 and W[1] == w and S.Expiry == w + I then return fmt('%d %d', l, W[2]) end
  elseif c.code == 'c' and S.Tail == l and S.Expiry == w + 2 * I then
    if #W == 2 and W[1] == w then return fmt('%d %d', l, W[2]) end
    if #W == 4 and W[3] == w and W[1] == w - I then return fmt('%d %d %d', l, W[4], W[2]) end
  end
  return nil
end

-- policy_is_short reports whether nv numbers of a state of code are its
-- short form (policy_short).
local function policy_is_short(code, nv)
  return (code == 'f' and nv == 2) or (code == 'c' and (nv == 2 or nv == 3))
end

-- policy_unshort turns the numbers v[1..nv] of a short form, counted
-- with windows interval I long, into the long form's, which the
-- algorithm's decode reads; it returns their count.
local function policy_unshort(code, v, nv, I)
  local l = v[1]
  local w = l - l % I
  if code == 'f' then
    v[2], v[3], v[4] = w + I - l, w - l, v[2]
    return 4
  end
  if nv == 2 then
    v[2], v[3], v[4], v[5] = w + 2 * I - l, 0, w - l, v[2]
    return 5
  end
  v[2], v[3], v[4], v[5], v[6], v[7] = w + 2 * I - l, 0, w - I - l, v[3], w - l, v[2]
  return 7
end

-- policy_state_limit is the limit (parsed) limit i's state was counted
-- under: p, the call's, for a state of this version; else the client's
-- copy of version sv's (ARGV[11+L..]; none found: p stands in). nil when
-- the client sent no copy of version sv: it is asked for one (flag -5).
local function policy_state_limit(argv, b, L, i, p, sv, version, oldText)
  if sv == version then return p end
  if not oldText or oldText == '' or tonumber(oldText, 36) ~= sv then return nil end
  local ot = argv[b + 5 + L + i]
  local q = ot and parse(ot) or p
  if not q or q.impl ~= p.impl then q = p end
  return q
end

-- policy_num is tonumber(s) for the decimal ARGV of a call (permits,
-- wait, the count of limits, a batch's counts), through policyNums: the
-- same few texts come on every call, and reading one anew costs more
-- than the rest of its use. Emptied when it holds 256, as parsed.
local policyNums, policyNumCount = {}, 0
local function policy_num(s)
  if s == nil then return nil end
  local v = policyNums[s]
  if v == nil then
    v = tonumber(s) or false
    if policyNumCount == 256 then policyNums, policyNumCount = {}, 0 end
    policyNums[s], policyNumCount = v, policyNumCount + 1
  end
  return v or nil
end

-- policy_ttl is the decimal text of a TTL in ms, through policyTTLs (a
-- number passed to redis.call is written out by printf on every call).
-- Emptied when it holds 4096.
local policyTTLs, policyTTLCount = {}, 0
local function policy_ttl(ms)
  local v = policyTTLs[ms]
  if not v then
    v = fmt('%d', ms)
    if policyTTLCount == 4096 then policyTTLs, policyTTLCount = {}, 0 end
    policyTTLs[ms], policyTTLCount = v, policyTTLCount + 1
  end
  return v
end

-- policy_heads gives, for a policy's epoch and version (ARGV texts), the
-- head of its key's state with each fast algorithm's letter, "EPOCH
-- VERSION|f" and so on: made once, not per call, and a state is known
-- as this version's by a plain prefix test instead of two captures.
-- policy_heads1 is the same for the "EPOCH VERSION" a lone call sends.
local policyHeads, policyHeadCount = {}, 0
local policyHeads1, policyHead1Count = {}, 0
local function policy_make_heads(ev)
  local base = ev .. '|'
  local h = {f = base .. 'f', c = base .. 'c', t = base .. 't', q = base .. 'q'}
  h.nf, h.nc, h.nt, h.nq = #h.f + 1, #h.c + 1, #h.t + 1, #h.q + 1
  h.l, h.i = base .. 'l', base .. 'i'
  h.nl, h.ni = #h.l + 1, #h.i + 1
  -- A window's state after its head (policy_fast), the head in the
  -- pattern, escaped: one match, no find before it.
  local quoted = string.gsub(base, '%W', '%%%0')
  h.fpat = '^' .. quoted .. 'f(%w+) (%w+) (%-?)(%w+) (%w+)$'
  h.fshort = '^' .. quoted .. 'f(%w+) (%w+)$'
  h.cshort = '^' .. quoted .. 'c(%w+) (%w+) ?(%w*)$'
  h.cpat = '^' .. quoted .. 'c(%w+) (%w+) (%-?%w+) (%-?)(%w+) (%w+) ?(%-?)(%w*) ?(%w*)$'
  -- A sliding log's inline form (slidinglog.lua's slidinglog_inline):
  -- last, then up to eight numbers: four entries.
  h.ipat = '^' .. quoted .. 'i(%w+) (%w+) ?(%w*) ?(%w*) ?(%w*) ?(%w*) ?(%w*) ?(%w*) ?(%w*)$'
  return h
end
local function policy_heads(epoch, versionText)
  local byVersion = policyHeads[epoch]
  local h = byVersion and byVersion[versionText]
  if h then return h end
  if policyHeadCount == 256 then policyHeads, policyHeadCount = {}, 0 end
  byVersion = policyHeads[epoch]
  if not byVersion then
    byVersion = {}
    policyHeads[epoch] = byVersion
  end
  h = policy_make_heads(epoch .. ' ' .. versionText)
  byVersion[versionText], policyHeadCount = h, policyHeadCount + 1
  return h
end
local function policy_heads1(ev)
  local h = policyHeads1[ev]
  if h then return h end
  if policyHead1Count == 256 then policyHeads1, policyHead1Count = {}, 0 end
  h = policy_make_heads(ev)
  policyHeads1[ev], policyHead1Count = h, policyHead1Count + 1
  return h
end


-- policyValues keeps the numbers of the base-36 texts of the counts a
-- window's state holds: small counts recur from key to key, and a lookup
-- costs a fraction of reading the text anew. Emptied when it holds 4096.
-- Not the instants a state holds, nor their offsets, read at once: they
-- are when its key was last written, seldom another key's, so a lookup
-- would mostly miss and add an entry.
--
-- policy_memo36 is the text of x, a number a window's state is written
-- with at place i (1: the instant, then offsets from it), kept until
-- another number is written there: the calls of a run share an instant
-- and a window, so each text is made once a run, and a lone call makes
-- it once as ever, adding nothing to collect.
local policyMemo = {}
local function policy_memo36(i, x)
  local m = policyMemo
  if m[i] ~= x then
    m[i], m[i + 4] = x, policy_b36(x)
  end
  return m[i + 4]
end
-- policy_value36 reads a whole number in base 36 ("-" first when
-- negative; nil when unreadable), as policyValues[s] or policy_value36(s).
local policyValues, policyValueCount = {}, 0
local function policy_value36(s)
  local v
  if string.byte(s) == 45 then -- '-'
    v = tonumber(string.sub(s, 2), 36)
    if v then v = -v end
  else
    v = tonumber(s, 36)
  end
  if not v then return nil end
  if policyValueCount == 4096 then policyValues, policyValueCount = {}, 0 end
  policyValues[s], policyValueCount = v, policyValueCount + 1
  return v
end

-- A batch's calls alike on one key, one after another (policy_batch),
-- each take the state the one before left: policy_fast, told to defer,
-- keeps the key's new state here instead of writing it, and the next call
-- on the key reads it from here. pendKey is the key (nil: nothing kept),
-- pendSt its state, pendE that state's expiry, pendWas the expiry of the
-- state the key holds in Redis (where its TTL ends; 0: none).
local pendKey, pendSt, pendE, pendWas = nil, nil, 0, 0
-- pendImpl is the algorithm of the state kept, and pendNow, pendA..pendD
-- its numbers as the next call would parse them from pendSt: the
-- instant, then a window's start and count (a counter's two windows: A,
-- B, C, D, C nil for one), or a bucket's owed.
local pendImpl, pendNow, pendA, pendB, pendC, pendD

-- policy_flush writes the state kept for a key, if any (policy_fast's
-- write, once for the key's calls).
local function policy_flush(start, injected)
  slidinglog_write_kept(policy_b36, policy_ttl)
  if not pendKey then return end
  if pendE == pendWas and not injected then
    redis.call('SET', pendKey, pendSt, 'KEEPTTL')
  else
    redis.call('SET', pendKey, pendSt, 'PX', policy_ttl(key_ttl(pendE, start, injected)))
  end
  pendKey, pendSt, pendImpl = nil, nil, nil
end

-- policy_fast is the acquire of a policy of one fixed window, sliding
-- counter, token bucket or leaky bucket, on a key whose state is empty or
-- of this epoch and version, with at most one window (a counter: two)
-- and no reservation, or no queue (a bucket): granted at once, or refused
-- for a wait beyond maxWait or a full queue (a counter's refusals go to
-- the general path). Nothing else: it returns nil, having changed
-- nothing, and the general path serves the call. It returns the reply
-- that path gives (the algorithm's file's acquire, its state string
-- written the same), made at once, with no other table, no pcall and a
-- string per number of the state: the common call of a service that
-- counts requests per descriptor. With defer, the state is kept for the
-- next call on key instead (pendKey, raw then being pendSt when pendKey
-- is key), to be written by policy_flush.
local function policy_fast(key, raw, start, injected, p, n, maxWait, heads, defer)
  local rate, interval = p.rate, p.interval * 1000
  local now, e = start, 0
  -- raw is the state kept for key: its numbers are at hand, unparsed.
  local kept = defer and pendKey == key and pendImpl == p.impl
  local p36 = policy_p36
  local st -- the key's string written: one concatenation
  local left
  local was = 0 -- the expiry of the state read (0: none, or past it)
  if p.impl == fixedImpl then
    local ws, q, expiry = nil, 0, 0
    local head = heads.f
    local values = policyValues
    if kept then
      local l = pendNow
      ws, q, expiry = pendA, pendB, pendE
      if l > now then now = l end
      if now >= expiry then ws = nil else was = expiry end -- past its expiry: empty
      if ws and ws > now then return nil end -- a reservation
    elseif raw then
      -- "last permits" after the head (the short form: the window
      -- holding last), or "last expiry start permits", the start an
      -- offset from last (maybe negative), the window's end expiry.
      local l
      local L, M = string.match(raw, heads.fshort)
      if L then
        l, q = tonumber(L, 36), values[M] or policy_value36(M)
        if not (l and q) or q < 0 then return nil end
        ws = l - l % interval
        expiry = ws + interval
      else
        local X, G, W
        L, X, G, W, M = string.match(raw, heads.fpat)
        if not L then return nil end
        -- The instants read at once, the counts through policyValues.
        local x
        l, x = tonumber(L, 36), tonumber(X, 36)
        ws, q = tonumber(W, 36), values[M] or policy_value36(M)
        if not (l and x and ws and q) or q < 0 then return nil end
        if G ~= '' then ws = -ws end
        ws, expiry = l + ws, l + x
      end
      if l > now then now = l end
      if now >= expiry then ws = nil else was = expiry end -- past its expiry: empty
      if ws and ws > now then return nil end -- a reservation
    end
    local ok, a1, a2, a3 = window_grant(now, rate, interval, n, ws, q, expiry, maxWait)
    if ok == nil then return nil end -- a reservation
    if not ok then -- a1 permits left, a2 the wait
      return {start, 0, 0, 0, 1, a2, a1, later(expiry - start, 0), a2}
    end
    q, ws, e = a1, a2, a3
    left = rate - q
    pendA, pendB = ws, q
    if ws == now - now % interval then -- the short form (policy_short)
      st = head .. policy_memo36(1, now) .. ' ' .. policy_b36(q)
    else
      st = head .. policy_memo36(1, now) .. ' ' .. policy_memo36(2, e - now) .. ' ' .. policy_memo36(3, ws - now) ..
        ' ' .. policy_b36(q)
    end
  elseif p.impl == counterImpl then
    local tail, s1, p1, s2, p2 = 0, nil, 0, nil, 0
    local head = heads.c
    local values = policyValues
    if kept then
      local L = pendNow
      if L > now then now = L end
      if now < pendE then -- else past its expiry: empty
        was, tail, s1, p1, s2, p2 = pendE, L, pendA, pendB, pendC, pendD or 0
      end
    elseif raw then
      local l, C, P = string.match(raw, heads.cshort)
      if l then
        -- The short form (policy_short): "last permits", the window
        -- holding last, then the one before's permits if it has any.
        if #raw ~= heads.nc + #l + #C + (P ~= '' and #P + 1 or 0) then return nil end
        local L = tonumber(l, 36)
        if not L then return nil end
        local w = L - L % interval
        local expiry = w + 2 * interval
        if L > now then now = L end
        if now < expiry then -- else past its expiry: empty
          was, tail = expiry, L
          local c1 = values[C] or policy_value36(C)
          if not c1 or c1 < 0 then return nil end
          if P == '' then
            s1, p1 = w, c1
          else
            local c0 = values[P] or policy_value36(P)
            if not c0 or c0 < 0 then return nil end
            s1, p1, s2, p2 = w - interval, c0, w, c1
          end
        end
      else
        -- "last expiry tail start permits", then a second window's "start
        -- permits" if the state has one; every separator there: the
        -- length tells.
        local l, x, t, g1, a1, b1, g2, a2, b2 = string.match(raw, heads.cpat)
        if not l then return nil end
        local size = heads.nc + #l + #x + #t + #g1 + #a1 + #b1 + 3
        if a2 ~= '' then size = size + #g2 + #a2 + #b2 + 2 elseif g2 ~= '' then return nil end
        if #raw ~= size or (a2 == '') ~= (b2 == '') then return nil end
        -- The instants read at once, the counts through policyValues.
        local L, X = tonumber(l, 36), tonumber(x, 36)
        if not (L and X) then return nil end
        local expiry = L + X
        if L > now then now = L end
        if now < expiry then -- else past its expiry: empty
          was = expiry
          -- The fast path writes the tail as 0.
          local T = values[t] or policy_value36(t)
          s1, p1 = tonumber(a1, 36), values[b1] or policy_value36(b1)
          if not (T and s1 and p1) or p1 < 0 then return nil end
          if g1 ~= '' then s1 = -s1 end
          tail, s1 = L + T, L + s1
          if a2 ~= '' then
            s2, p2 = tonumber(a2, 36), values[b2] or policy_value36(b2)
            if not (s2 and p2) or p2 < 0 then return nil end
            if g2 ~= '' then s2 = -s2 end
            s2 = L + s2
          end
        end
      end
    end
    local ok, k
    ok, left, e, k, s1, p1, s2, p2 = counter_grant(now, rate, interval, n, tail, s1, p1, s2, p2)
    if not ok then return nil end
    if k == 2 then pendA, pendB, pendC, pendD = s1, p1, s2, p2 else pendA, pendB, pendC, pendD = s1, p1, nil, nil end
    -- The tail is now: 0, or, in the short form (policy_short), not
    -- written.
    local w = now - now % interval
    if k == 1 and s1 == w then
      st = head .. policy_memo36(1, now) .. ' ' .. policy_b36(p1)
    elseif k == 2 and s2 == w and s1 == w - interval then
      st = head .. policy_memo36(1, now) .. ' ' .. policy_b36(p2) .. ' ' .. policy_b36(p1)
    elseif k == 2 then
      st = head .. policy_memo36(1, now) .. ' ' .. policy_memo36(2, e - now) .. ' 0 ' ..
        policy_memo36(3, s1 - now) .. ' ' .. policy_b36(p1) .. ' ' .. policy_memo36(4, s2 - now) .. ' ' .. policy_b36(p2)
    else
      st = head .. policy_memo36(1, now) .. ' ' .. policy_memo36(2, e - now) .. ' 0 ' ..
        policy_memo36(3, s1 - now) .. ' ' .. policy_b36(p1)
    end
  else
    -- A bucket's state "last owed": counted under this version's limit.
    local burst, owed, l, expiry = p.burst, 0, 0, 0
    local leaky = p.impl == leakyImpl
    local head, at = heads.t, heads.nt
    if leaky then head, at = heads.q, heads.nq end
    if kept then
      l, owed = pendNow, pendA
      expiry = l + ceildiv(owed, rate)
      if l > now then now = l end
    elseif raw then
      if string.find(raw, head, 1, true) ~= 1 then return nil end
      local L, o = string.match(raw, '^(%w+) (%w+)$', at)
      if not L then return nil end
      l, owed = tonumber(L, 36), tonumber(o, 36)
      expiry = l + ceildiv(owed, rate)
      if l > now then now = l end
    end
    local ok, a1, a2, a3 = bucket_grant(leaky, now, rate, interval, burst, p.capacity, n, owed, l, maxWait)
    if ok == nil then return nil end -- a reservation
    if not ok then -- a1 full (a leaky bucket), a2 permits left, a3 the wait
      return {start, 0, 0, (a1 and maxWait ~= 0) and 1 or 0, 1, a3, a2, later(expiry - start, 0), a3}
    end
    local after = a2
    left = a1
    e = now + ceildiv(after, rate)
    pendA = after
    local n1, n2, n3, n4, n5, n6 = p36(now)
    local a1, a2, a3, a4, a5, a6 = p36(after)
    st = head .. n1 .. n2 .. n3 .. n4 .. n5 .. n6 .. ' ' .. a1 .. a2 .. a3 .. a4 .. a5 .. a6
  end
  if defer then
    -- The first call kept for key read its state from Redis: its TTL's end.
    if pendKey ~= key then pendKey, pendWas = key, was end
    pendSt, pendE, pendImpl, pendNow = st, e, p.impl, now
  elseif e == was and not injected then
    -- The key's TTL already ends there: SET sets none, so Redis neither
    -- drops and adds the key's expiry nor rewrites the command.
    redis.call('SET', key, st, 'KEEPTTL')
  else
    redis.call('SET', key, st, 'PX', policy_ttl(key_ttl(e, start, injected)))
  end
  return {start, 1, left, later(e - start, 0)}
end

-- policy_fast_log is policy_fast for a policy of one sliding log, whose
-- list is keys[k + 2] (slidinglog.lua's slidinglog_fast): it reads the
-- key's state itself, and returns the reply (nil: none) and the state it
-- read (nil: none read).
local function policy_fast_log(keys, k, start, injected, p, n, maxWait, heads)
  return slidinglog_fast(keys[k + 1], keys[k + 2], heads, start, injected, p.rate, p.interval, n, maxWait,
    policy_b36, policy_ttl)
end

-- policy_call runs op on limit c and returns its reply: code, value, wait (µs).
local function policy_call(c, op, n, a)
  local out = {}
  c.out = out
  local S = c.S
  local now, expiry = later(c.now, S.Last or 0), S.Expiry or 0
  c.now, c.forgotten = now, expiry ~= 0 and now >= expiry
  if a > 0 then a = floor(a / c.unit) end
  if op == 'available' then c.impl.available(c, S) else c.impl[op](c, S, n, a) end
  return out[1], out[2], out[3]
end

-- policy_serve serves one call and returns its reply: its KEYS are
-- keys[k + 1..], its ARGV[2..4] argv[a..a + 2] and its ARGV[5..] argv[b..]
-- (a batch's calls of one policy share those): read in place, no table
-- copied per call. raw is the key's state when the caller has read it
-- (policy_lone), nil to read it here.
local function policy_serve(keys, k, argv, a, b, start, injected, raw)
  local op, n, arg = argv[a], policy_num(argv[a + 1]), policy_num(argv[a + 2])
  local epoch, versionText = argv[b], argv[b + 1]
  local L = policy_num(argv[b + 4])
  if not policyPairs then policy_init() end
  local stateKey = keys[k + 1]
  if raw == nil then
    local p
    if L == 1 and op == 'acquire' and n and arg then p = parsed_config(argv[b + 5]) end
    if p and p.impl == logImpl and n >= 1 and n <= p.most then
      local r
      r, raw = policy_fast_log(keys, k, start, injected, p, n, arg, policy_heads(epoch, versionText))
      if r then return r end
      if raw == nil then raw = redis.call('GET', stateKey) end
    else
      raw = redis.call('GET', stateKey)
      if p and (p.impl == fixedImpl or p.impl == bucketImpl or p.impl == leakyImpl or p.impl == counterImpl) and n >= 1 and n <= p.most then
        local r = policy_fast(stateKey, raw, start, injected, p, n, arg, policy_heads(epoch, versionText))
        if r then return r end
      end
    end
  end
  local since, version = tonumber(argv[b + 2]), tonumber(versionText, 36)
  local oldText = argv[b + 5 + L]
  local olds, convert, sv
  local res = {start, 0}
  if raw then
    local e, v, rest = string.match(raw, '^(%w+) (%w+)|(.*)$')
    sv = v and tonumber(v, 36)
    if sv then
      if sv > version and (e == epoch or argv[b + 3] ~= '1') then
        res[2], res[3] = -4, sv
        return res
      end
      if e == epoch then
        -- A state of an older version is made the new one's (a limit
        -- whose algorithm changed starts empty) and written, even by a
        -- status: as the Go store keeps it.
        convert = sv ~= version
        olds = {}
        for st in string.gmatch(rest .. '|', '([^|]*)|') do olds[#olds + 1] = st end
      end
    end
  end
  local cs = {}
  for i = 1, L do
    local text = argv[b + 4 + i]
    local p = parsed_config(text)
    if not p then error('unreadable limit') end
    local impl = p.impl
    local unit = impl.unit
    local code = p.policyCode -- kept with the parsed config: one match per config
    if not code then
      code = policyCodes[string.match(text, '^%S+')] or '?'
      p.policyCode = code
    end
    local c = {impl = impl, unit = unit, code = code, now = floor(start / unit),
      rate = p.rate, interval = p.interval * 1000 / unit, burst = p.burst, capacity = p.capacity,
      most = p.most, since = since, listKey = keys[k + 1 + i], dirty = false, forgotten = false}
    if impl.open then impl.open(c) end
    local S
    local old = olds and olds[i]
    if old and old ~= '' then
      local code, rest = string.match(old, '^(.)(.*)$')
      -- A sliding log inline (slidinglog_inline).
      local inline = code == 'i' and c.code == 'l'
      if inline or (code == c.code and code ~= '?' and not policyBuckets[code]) then
        local v, nv = policy_numbers36(rest)
        if inline or policy_is_short(code, nv) then
          -- A short window's grid, and an inline log's expiry (one
          -- interval after its newest entry), are of the interval of
          -- the state's version.
          local q = policy_state_limit(argv, b, L, i, p, sv, version, oldText)
          if not q then
            res[2], res[3] = -5, sv
            return res
          end
          local I = q.interval * 1000 / unit
          if inline then S = slidinglog_uninline(c, v, nv, I) else nv = policy_unshort(code, v, nv, I) end
        end
        if code == 'l' and nv == 5 then
          nv = 3 -- a long log's tail and head after its total (slidinglog_extras)
        elseif code == 'l' and nv > 3 then
          error('unreadable state')
        end
        if not inline and nv >= 2 then S = impl.decode(v, nv) end
      elseif code == c.code and code ~= '?' then
        rest = string.gsub(rest, '[^ ]+', policy_from36)
        if policyBuckets[code] then
          -- "last owed", the config it was counted under that of the
          -- state's version; or "last owed scale rate burst queue...".
          -- The expiry is where the owed drains (deficit_settle).
          local last, owed, more = string.match(rest, '^(%S+) (%S+)(.*)$')
          if not last then error('unreadable state') end
          if more == '' then
            local q = policy_state_limit(argv, b, L, i, p, sv, version, oldText)
            if not q then
              res[2], res[3] = -5, sv
              return res
            end
            more = fmt(' %d %d %d', q.interval * 1000, q.rate, q.burst)
          end
          local r = tonumber(string.match(more, '^ %S+ (%S+)'))
          rest = fmt('%s %d %s', last, ceildiv(tonumber(owed), r), owed) .. more
        end
        if unit == 1 then rest = 'u ' .. rest end
        S = decode_state(impl, rest, nil, policyNumbers)
      end
    end
    if not S and impl.list and redis.call('EXISTS', c.listKey) == 1 then
      redis.call('DEL', c.listKey) -- a list whose state is gone
    end
    c.S = S or {}
    if op == 'acquire' and n > c.most then
      res[2] = -2
      return res
    end
    cs[i] = c
  end
  -- Every limit read: an inline log goes in its list, for its file's rules.
  for _, c in ipairs(cs) do slidinglog_push_inlined(c) end

  if op == 'acquire' or op == 'status' then
    local granted, full, refused, wait = 1, 0, 0, 0
    local rem, waits = {}, {}
    if op == 'status' then
      for i, c in ipairs(cs) do
        local _, v = policy_call(c, 'available', 1, 0)
        rem[i], waits[i] = v, 0
        if v < 1 then granted = 0 end
      end
    elseif L == 1 then
      -- A single limit is its algorithm's acquire, reservations and all.
      local c = cs[1]
      local code, v, w = policy_call(c, 'acquire', n, arg)
      rem[1], waits[1], wait = v, w, w
      if code ~= 1 then
        granted, refused = 0, 1
        if code == 2 and arg ~= 0 then full = 1 end
      end
    else
      -- Every limit is asked first without a change (c.probe), in order,
      -- for its earliest instant; the one that would make the request
      -- wait longest refuses it, if anything does (the first of equals, a
      -- full queue before any wait). The request's instant is the latest
      -- of theirs, a whole ms when a limit counts in ms, and every limit
      -- reserves it there (c.notBefore): all at one instant, or none.
      local at, ms = start, false
      for i, c in ipairs(cs) do
        if c.unit > 1 then ms = true end
        c.probe = true
        local code, _, w = policy_call(c, 'acquire', n, -1)
        c.probe = nil
        if code == 2 then
          if full == 0 or w > wait then refused = i end
          granted, full = 0, 1
        else
          if w > 0 and full == 0 and (refused == 0 or w > wait) then refused = i end
          at = later(at, c.now * c.unit + w)
        end
        wait = later(wait, w)
        local _, v = policy_call(c, 'available', 1, 0)
        rem[i], waits[i] = v, w
      end
      if at > start and ms then at = ceildiv(at, 1000) * 1000 end
      if full == 1 or (arg >= 0 and at - start > arg) then
        granted = 0
      else
        granted, refused, wait = 1, 0, at - start
        for i, c in ipairs(cs) do
          c.notBefore = floor(at / c.unit)
          local _, v, w = policy_call(c, 'acquire', n, -1)
          c.notBefore = nil
          rem[i], waits[i] = v, w
        end
      end
    end
    res[3], res[4], res[5], res[6] = granted, full, refused, wait
    for i, c in ipairs(cs) do
      local k, reset = #res, 0
      local e = c.S.Expiry
      if e then reset = later(e * c.unit - start, 0) end
      res[k + 1], res[k + 2], res[k + 3] = rem[i], reset, waits[i]
    end
  else
    -- cancel, release: the fewest a limit handed back.
    local least
    for _, c in ipairs(cs) do
      local a = arg
      if op == 'release' then a = -1 end
      local _, got = policy_call(c, op, n, a)
      if not least or got < least then least = got end
    end
    res[3] = least or 0
  end

  -- Written once, if anything changed, with the TTL of its latest limit.
  local dirty = convert
  for _, c in ipairs(cs) do
    if c.impl.finish then c.impl.finish(c) end
    if c.dirty then dirty = true end
  end
  if not dirty then
    -- Unchanged: a log read inline stays so, its list made for the call gone.
    for _, c in ipairs(cs) do
      if c.inlined then redis.call('DEL', c.listKey) end
    end
    return res
  end
  local parts, last = {}, 0
  for i, c in ipairs(cs) do
    local S = c.S
    local inline, head
    if S.Expiry and c.impl.list then inline, head = slidinglog_inline(c, S, policy_b36) end
    if inline then
      parts[i] = 'i' .. inline
      local e = S.Expiry * c.unit
      if e > last then last = e end
    elseif S.Expiry and not (S.Windows and #S.Windows == 0) then
      -- (A window state with no window left counts nothing: it is empty,
      -- as Go's settle makes it, and written so; its long form would
      -- read back as a short one.)
      local st = encode_state(c.impl, c, S)
      if c.unit == 1 then st = string.sub(st, 3) end -- the "u" mark: the letter says it
      if head then st = st .. slidinglog_extras(c, S, head) end
      if policyBuckets[c.code] then
        -- Neither the expiry nor, with the queue closed, the config the
        -- owed is counted under (settled: this version's) is written.
        local last, owed, more = string.match(st, '^(%S+) %S+ (%S+)(.*)$')
        if S.Scale == c.interval and S.Rate == c.rate and S.Burst == c.burst and (S.Live or 0) == 0 then more = '' end
        st = last .. ' ' .. owed .. more
      else
        st = policy_short(c, S) or st
      end
      parts[i] = c.code .. string.gsub(st, '[^ ]+', policy_to36)
      local e = S.Expiry * c.unit
      if e > last then last = e end
      if c.impl.list then
        redis.call('PEXPIRE', c.listKey, key_ttl(slidinglog_list_end(S.Expiry, c.interval) * c.unit, start, injected))
      end
    else
      parts[i] = ''
    end
  end
  if last == 0 then
    if raw then redis.call('DEL', stateKey) end
    return res
  end
  -- With a caller's clock Redis still expires keys by its own, so keep
  -- them a minute longer (the states' expiries decide when they count).
  local ttl = key_ttl(last, start, injected)
  redis.call('SET', stateKey, epoch .. ' ' .. versionText .. '|' .. table.concat(parts, '|'), 'PX', ttl)
  return res
end

-- policy_lone serves a lone acquire of a one-limit policy whose limits
-- took effect at an unknown instant (ARGV[7] "0"), the client's copy not
-- just read (ARGV[8] "") and no older version sent: the keyed call of a
-- service counting requests per key. It sends five ARGV, not eleven
-- (each is a string Redis parses and its Lua interns): now, permits,
-- the maximum wait, "EPOCH VERSION" and the limit. A call the fast path
-- does not serve goes on as policy_serve with the ARGV it stands for.
local function policy_lone(keys, argv, start, injected)
  if not policyPairs then policy_init() end
  local n, arg, ev, text = policy_num(argv[2]), policy_num(argv[3]), argv[4], argv[5]
  local stateKey = keys[1]
  local p = parsed_config(text)
  local raw
  if n and arg and p and p.impl == logImpl and keys[2] and n >= 1 and n <= p.most then
    local r
    r, raw = policy_fast_log(keys, 0, start, injected, p, n, arg, policy_heads1(ev))
    if r then return r end
  end
  if raw == nil then raw = rcall('GET', stateKey) end
  if n and arg and p and (p.impl == fixedImpl or p.impl == bucketImpl or p.impl == leakyImpl or p.impl == counterImpl) and n >= 1 and n <= p.most then
    local r = policy_fast(stateKey, raw, start, injected, p, n, arg, policy_heads1(ev))
    if r then return r end
  end
  local epoch, versionText = string.match(ev, '^(%S+) (%S+)$')
  if not epoch then error('unreadable call') end
  local full = {argv[1], 'acquire', argv[2], argv[3], epoch, versionText, '0', '', '1', text, ''}
  return policy_serve(keys, 0, full, 2, 5, start, injected, raw)
end

-- policy_main serves one keyed call, in the ARGV above or, when it
-- sends five, policy_lone's; registered beside main.
local function policy_main(keys, argv)
  local start, injected = run_start(argv)
  local ok, res
  if #argv == 5 then
    ok, res = pcall(policy_lone, keys, argv, start, injected)
  else
    ok, res = pcall(policy_serve, keys, 0, argv, 2, 5, start, injected)
  end
  if not ok then res = {start, -3} end
  return cmsgpack.pack(res)
end

-- policy_fast_plan is what policy_fast takes of a call whose ARGV[2..4]
-- are argv[a..a + 2] and ARGV[5..] argv[b..]: its limit, permits, maximum
-- wait and heads; nil when the fast path cannot serve it (policy_serve's
-- test). A batch makes it once for a run of calls alike ("=").
local function policy_fast_plan(argv, a, b)
  if argv[a] ~= 'acquire' or policy_num(argv[b + 4]) ~= 1 then return nil end
  local n, arg, p = policy_num(argv[a + 1]), policy_num(argv[a + 2]), parsed_config(argv[b + 5])
  if n and arg and p and (p.impl == fixedImpl or p.impl == bucketImpl or p.impl == leakyImpl or p.impl == counterImpl or p.impl == logImpl) and n >= 1 and n <= p.most then
    return p, n, arg, policy_heads(argv[b], argv[b + 1])
  end
  return nil
end

-- policy_planned serves a call of a batch by its plan (policy_fast_plan),
-- as policy_serve does: the fast path, else the general one.
local function policy_planned(keys, k, argv, a, b, start, injected, p, n, arg, heads)
  local r, raw
  if p.impl == logImpl then
    r = slidinglog_again(keys[k + 1], start, p.rate, n, policy_b36, policy_ttl)
    if r then return r end
    r, raw = slidinglog_fast(keys[k + 1], keys[k + 2], heads, start, injected, p.rate, p.interval, n, arg,
      policy_b36, policy_ttl)
    if r then return r end
    if raw == nil then raw = rcall('GET', keys[k + 1]) end
  else
    local key = keys[k + 1]
    if pendKey == key then raw = pendSt else raw = rcall('GET', key) end
    r = policy_fast(key, raw, start, injected, p, n, arg, heads, true)
    if r then return r end
  end
  -- The general path reads and writes the key in Redis.
  policy_flush(start, injected)
  return policy_serve(keys, k, argv, a, b, start, injected, raw)
end

-- policy_batch serves several keyed calls in one run, one after another at
-- one instant (the store puts concurrent calls together): ARGV[1] now, as
-- above, then per call the number of its KEYS and of the ARGV it sends
-- (counting ARGV[1]), then those ARGV[2..] as policy_main takes them; a
-- call that sends only ARGV[2..4] (op, permits, wait or instant) has the
-- ARGV[5..] of the call before it (calls of one policy send it once); a
-- call that sends only "=" is the call before it again on its own KEYS
-- (as many), the common run of calls alike on many keys: one ARGV, not
-- five, for Redis to read and its Lua to intern per call.
-- KEYS are the calls' KEYS in turn. Reply: one MessagePack array holding,
-- per call, policy_main's array (an empty one: ARGV unreadable). Calls
-- alike on one key in a row keep its state in hand, written once
-- (policy_flush) when the run leaves the key.
local function policy_batch(keys, argv)
  local start, injected = run_start(argv)
  pendKey, pendImpl, slKey = nil, nil, nil -- nothing kept from a run that ended in an error
  local out = {}
  if not policyPairs then policy_init() end
  local k, i, m, a, b, nk = 0, 2, #argv, nil, nil, nil
  -- The plan of the calls alike the one before ("="), made at the first
  -- of them: false when the fast path cannot serve them.
  local planned, p, n, arg, heads
  while i <= m do
    local step = 1
    local ok, res
    if argv[i] ~= '=' then
      local na
      nk, na = policy_num(argv[i]), policy_num(argv[i + 1])
      if not nk or not na or na < 4 or i + na > m then policy_flush(start, injected); return cmsgpack.pack({}) end
      if na > 4 then b = i + 5 elseif not b then policy_flush(start, injected); return cmsgpack.pack({}) end
      a, step, planned = i + 2, na + 1, nil
      policy_flush(start, injected)
      ok, res = pcall(policy_serve, keys, k, argv, a, b, start, injected)
    elseif not a then
      policy_flush(start, injected)
      return cmsgpack.pack({})
    else
      -- A state kept for another key is written before this call's.
      local key = keys[k + 1]
      if (pendKey and pendKey ~= key) or (slKey and slKey ~= key) then policy_flush(start, injected) end
      if planned == nil then
        planned, p, n, arg, heads = pcall(policy_fast_plan, argv, a, b)
        planned = planned and p ~= nil
      end
      if planned then
        ok, res = pcall(policy_planned, keys, k, argv, a, b, start, injected, p, n, arg, heads)
      else
        ok, res = pcall(policy_serve, keys, k, argv, a, b, start, injected)
      end
    end
    if not ok then res = {start, -3} end
    out[#out + 1] = res
    k, i = k + nk, i + step
  end
  policy_flush(start, injected)
  return cmsgpack.pack(out)
end
