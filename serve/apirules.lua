-- Sets or removes one rule set through the API, in one step: the rule,
-- the version that tells the instances, the audit record and the
-- announcement.
-- KEYS[1] the rules hash, KEYS[2] the version counter, KEYS[3] the audit list
-- ARGV[1] the rule's field, ARGV[2] its new value ("" removes it),
-- ARGV[3] the audit record up to its "old" member's value, ARGV[4] the
-- audit list's cap, ARGV[5] the channel announcing a change
-- Reply: {} when removing a rule that is not there (nothing written);
-- else {old value or "", new version}
local old = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if not old then
    return {}
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local version = redis.call('INCR', KEYS[2])
redis.call('LPUSH', KEYS[3], ARGV[3] .. (old or 'null') .. '}')
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
redis.call('PUBLISH', ARGV[5], tostring(version))
return {old or '', tostring(version)}
