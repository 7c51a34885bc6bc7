-- Concurrency slots of one key (issue 22): a sorted set of the requests in
-- flight, each scored by its start on Redis's clock, so that a slot whose
-- gateway died without releasing it drops out once it is older than the
-- request timeout. Every gateway reads one clock: Redis's.
--
-- KEYS[1]  the key's slot set
-- ARGV[1]  this request's slot ID (unique per gateway and request)
-- ARGV[2]  the most slots in flight
-- ARGV[3]  the request timeout, ms: a slot's longest life
--
-- Returns {taken (1 or 0), slots in flight after the call, ms until the
-- oldest slot ends when refused}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - life)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 0
  if oldest[2] then
    wait = tonumber(oldest[2]) + life - now
  end
  return {0, n, wait}
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], life)
return {1, n + 1, 0}
