-- policyconfig.lua: a keyed policy's config (redlimit.PolicyStore's
-- SetPolicy and DeletePolicy), and the message that tells every client.
--
-- KEYS[1] the policy hash, PREFIX{name}:policy: field l, its limits (one
--   config per limit as limiter.lua reads them, joined by ","), v its
--   version, e its epoch, t the instant (µs) its limits took effect keeping
--   the keys' states (0: unknown), and hVERSION the limits of each of the
--   last 16 versions (a key's bucket state is counted under the limits of
--   the version it was written under, which it does not repeat). It
--   persists until deleted: the only key of a policy without a TTL.
-- ARGV[1] how: "if-absent" | "keep" | "reset" | "restore" (as if-absent,
--   with the epoch, version and instant given: a policy Redis lost, put
--   back from a client's copy) | "delete"
-- ARGV[2] the limits; ARGV[3] a fresh epoch (restore: the copy's)
-- ARGV[4] now in µs, or "" to read Redis TIME
-- ARGV[5] the channel to publish the policy's name on when it changes,
--   ARGV[6] the name; ARGV[7] restore: the copy's version; ARGV[8] its instant
--
-- Reply: {set (1 or 0), limits, version, epoch, instant} of the policy
-- stored afterwards; delete: {deleted (1 or 0)}.

local cur = redis.call('HMGET', KEYS[1], 'l', 'v', 'e', 't')
local how = ARGV[1]
if how == 'delete' then
  if not cur[1] then return {0} end
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
  return {1}
end
if cur[1] and (how == 'if-absent' or how == 'restore') then
  return {0, cur[1], tonumber(cur[2]) or 0, cur[3] or '0', cur[4] or '0'}
end
local version, epoch, since = (tonumber(cur[2]) or 0) + 1, ARGV[3], '0'
if how == 'restore' then
  version, since = tonumber(ARGV[7]), ARGV[8]
elseif cur[1] and how == 'keep' then
  epoch = cur[3]
  since = ARGV[4]
  if since == '' then
    local t = redis.call('TIME')
    since = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  end
end
redis.call('HSET', KEYS[1], 'l', ARGV[2], 'v', string.format('%d', version), 'e', epoch, 't', since,
  string.format('h%d', version), ARGV[2])
redis.call('HDEL', KEYS[1], string.format('h%d', version - 16))
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {1, ARGV[2], version, epoch, since}
