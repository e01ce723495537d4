-- config.lua: reads a limiter's config. A script rather than a plain HGET
-- so that it runs on the primary even when the client reads from replicas.
--
-- KEYS[1] the limiter hash (see limiter.lua)
-- Reply: the config, "algorithm mode rate interval epoch burst capacity", or nil
return redis.call('HGET', KEYS[1], 'c')
