-- current_trysetrate.lua: the test's model of current Redisson's trySetRate
-- (the keepAliveTime era, late 2024 on), written for these tests from its
-- documented behaviour: each field only where missing; a created config with a
-- keepAliveTime expires after it.
--
-- KEYS[1] config hash
-- ARGV[1] rate, ARGV[2] interval ms, ARGV[3] type, ARGV[4] keepAliveTime ms
-- Reply: 1 when the type was written, else 0.

for i, field in ipairs({'rate', 'interval'}) do redis.call('HSETNX', KEYS[1], field, ARGV[i]) end
redis.call('HSETNX', KEYS[1], 'keepAliveTime', ARGV[4])
local created = redis.call('HSETNX', KEYS[1], 'type', ARGV[3])
if created == 1 and tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return created
