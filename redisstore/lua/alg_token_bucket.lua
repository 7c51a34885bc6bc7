-- alg_token_bucket.lua: the token bucket, as limit/algorithm.go tokenBucket.
--
-- The bucket counts credits instead of fractional tokens: one token is
-- period (ms) credits and the bucket gains count credits each millisecond,
-- so refill is integer arithmetic, exact here and in Go alike.
--
-- State: one string "<credits> <ms of last take>", written with PSETEX.
-- A string holds the two numbers in about 60 bytes of Redis memory, against
-- about 100 for a two-field hash, and PSETEX writes the value and its
-- expiry in one command where a hash needs HSET and PEXPIRE. Text, not
-- packed binary: readable in redis-cli, and the format every gateway
-- version shares, so a rolling upgrade never misreads a bucket.
ALGS['token_bucket'] = function(key, now, cost, count, period, burst)
  local capacity = burst * period
  local credits = capacity -- a bucket never seen, or expired, is full
  local stored = redis.call('GET', key)
  if stored then
    local a, b = string.match(stored, '^(%d+) (%-?%d+)$')
    if not a then
      bad_state(key, stored)
    end
    credits = math.min(tonumber(a), capacity) -- a lowered burst clamps what is stored
    local elapsed = now - tonumber(b)
    if elapsed > 0 then
      -- Compare before multiplying: elapsed * count can pass 2^53 after a
      -- long idle time, the comparison never does.
      if elapsed >= ceildiv(capacity - credits, count) then
        credits = capacity
      else
        credits = credits + elapsed * count
      end
    end
  end
  local reset = ceildiv(capacity - credits, count)
  if cost > burst then
    return 0, floordiv(credits, period), -1, reset, nil
  end
  local need = cost * period
  if credits < need then
    return 0, floordiv(credits, period), ceildiv(need - credits, count), reset, nil
  end
  local left = credits - need
  reset = ceildiv(capacity - left, count)
  return 1, floordiv(left, period), 0, reset, string.format('%d %d', left, now), expire_ms(math.max(reset, 1))
end
