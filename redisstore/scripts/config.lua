-- config.lua: reads a limiter's config. A script rather than a plain HMGET
-- so that it runs on the primary even when the client reads from replicas.
--
-- KEYS[1] the limiter hash (see limiter.lua)
-- Reply: {algorithm, mode, rate, interval, epoch, burst, capacity}, nil where missing
return redis.call('HMGET', KEYS[1], 'A', 'M', 'R', 'I', 'E', 'B', 'C')
