-- available.lua: Redisson's availablePermits on its own keys: the grants that
-- aged out give their permits back to the counter, which is returned. Like
-- Redisson it writes that refresh back and renews no TTL; a counter it has
-- to create takes the limiter's TTL (lib.lua is prepended).
--
-- KEYS[1] config hash (name), KEYS[2] {name}:value, KEYS[3] {name}:value:<client>,
-- KEYS[4] {name}:permits, KEYS[5] {name}:permits:<client>
-- ARGV[1] layout: 'legacy' | 'current'
-- ARGV[2] now in ms by the caller's clock
-- ARGV[3..6] the config the caller knows (rate, interval ms, type,
--         keepAliveTime ms) or ARGV[3] = '' (see lib.lua's config)
--
-- Reply: {1, value, rate, interval, type, keepAliveTime}, or {code} /
-- {code, detail} with code -1 not initialized, -3 config unreadable,
-- -5 state unreadable (detail: the offending member or counter).

local now = tonumber(ARGV[2])
local cfg, code = config(3)
if not cfg then return {code} end
local valueKey, permitsKey = state_keys(cfg)
local value, err, detail = refresh(cfg, valueKey, permitsKey, now)
if not value then return {err, detail} end
local r = {1, fmt(value)}
for _, x in ipairs(config_reply(cfg)) do table.insert(r, x) end
return r
