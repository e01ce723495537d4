-- current_setrate.lua: the test's model of current Redisson's setRate (the
-- keepAliveTime era, late 2024 on; state not kept), written for these tests
-- from its documented behaviour: every field overwritten, then the counter and the
-- log of the new type deleted (this client's, for PER_CLIENT).
--
-- KEYS[1] config hash, KEYS[2] {name}:value, KEYS[3] {name}:value:<id>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<id>
-- ARGV[1] rate, ARGV[2] interval ms, ARGV[3] type, ARGV[4] keepAliveTime ms
-- Reply: nil.

redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'interval', ARGV[2], 'type', ARGV[3], 'keepAliveTime', ARGV[4])
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[3], KEYS[5])
else
  redis.call('DEL', KEYS[2], KEYS[4])
end
return nil
