-- alg_token_bucket.lua: the token bucket, as limit/algorithm.go tokenBucket.
--
-- The bucket counts credits instead of fractional tokens: one token is
-- period (ms) credits and the bucket gains count credits each millisecond,
-- so refill is integer arithmetic, exact here and in Go alike.
--
-- State: 24 bytes, three little-endian doubles (struct '<ddd'), each an
-- integer below 2^53, which a double holds exactly:
--   credits  left after the last take
--   ttl      the ms the value was written to live
--   last     the ms of the last take, by Redis's clock, or 0 if the take
--            that wrote it never read the clock
-- and the key's expiry. The time since the last take is what a take needs,
-- and the state gives it without TIME:
--   last > 0, ttl > 0   written with PXAT last + ttl: now is last + ttl less
--                       the key's PTTL, and once one bucket of a request
--                       has told now, the others need no PTTL
--   last = 0, ttl > 0   written with PX ttl: ttl less PTTL is the time since
--   ttl = 0             written under a test clock, which runs apart from
--                       Redis's: last is the time
-- A take of a bucket that does not exist (full, the usual case for a quiet
-- key) needs no clock at all: its value is written with PX.
-- Binary rather than text: unpacking three numbers costs a fraction of
-- matching a pattern and converting strings (docs/redis.md). The key ends
-- in ':b' (redisstore/key.go), so a gateway of a version that kept
-- "<credits> <ms>" text never reads this format, nor this one the text.

-- tb_state returns the credits, ttl and last take a token bucket's stored
-- value holds, or raises bad_state for a value this file did not write: a
-- value of another length, or numbers that are not integers in range (NaN
-- fails every comparison).
local function tb_state(key, v)
  if #v ~= 24 then
    bad_state(key, v)
  end
  local credits, ttl, last = sunpack('<ddd', v)
  if not (credits >= 0 and credits < 2^53 and credits % 1 == 0 and
          ttl >= 0 and ttl < 2^53 and ttl % 1 == 0 and
          last > -2^53 and last < 2^53 and last % 1 == 0) then
    bad_state(key, v)
  end
  return credits, ttl, last
end

-- tb_value returns the value a take leaving left credits writes, to be
-- kept for ttl ms, at now (nil if this take never read the clock). take.lua
-- writes it with the expiry the value says.
local function tb_value(left, ttl, now)
  if test_clock then
    return spack('<ddd', left, 0, now)
  end
  return spack('<ddd', left, ttl, now or 0)
end

-- The token bucket takes what take.lua read for it instead of the key:
-- stored, the credits stored (false for a bucket that does not exist), and
-- elapsed, the ms since the take that stored them.
ALGS['token_bucket'] = function(key, now, cost, count, period, burst, stored, elapsed)
  local capacity = burst * period
  local credits = capacity -- a bucket never seen, or expired, is full
  if stored then
    credits = stored
    if credits > capacity then
      credits = capacity -- a lowered burst clamps what is stored
    end
    if elapsed > 0 then
      -- elapsed * count is exact below 2^53; at or above it, it is more
      -- than any capacity (limit.Validate keeps capacities below 2^53),
      -- and the bucket is full either way.
      local gain = elapsed * count
      if gain >= capacity - credits then
        credits = capacity
      else
        credits = credits + gain
      end
    end
  end
  if cost > burst then
    return 0, floordiv(credits, period), -1, ceildiv(capacity - credits, count), nil
  end
  local need = cost * period
  if credits < need then
    return 0, floordiv(credits, period), ceildiv(need - credits, count), ceildiv(capacity - credits, count), nil
  end
  local left = credits - need
  local reset = ceildiv(capacity - left, count)
  local ttl = reset
  if ttl < 1 then
    ttl = 1
  end
  return 1, floordiv(left, period), 0, reset, tb_value(left, ttl, now), ttl
end

-- tb_fresh returns what a take of want tokens leaves in a bucket that does
-- not exist, a full one: the algorithm's value and ttl for it. Only for
-- want <= burst, which a full bucket always gives.
local function tb_fresh(want, count, period, burst, now)
  local _, _, _, _, value, ttl = ALGS['token_bucket'](nil, now, want, count, period, burst, false, nil)
  return value, ttl
end

-- A token bucket's charge, as memstore.SettleState: credits left, or in
-- debt no credits and a last take in the future (now + the debt's refill
-- time), with ttl running to last + the time to fill, so that the value
-- tells its next take the time by its expiry as every value does: the
-- elapsed time is negative until the debt is paid, and the bucket refills
-- from then. cost is capped at two bursts: more leaves the same state.
CHARGE['token_bucket'] = function(key, now, cost, count, period, burst)
  local capacity = burst * period
  local credits = capacity
  local v = call('GET', key)
  if v then
    local c, ttl, last = tb_state(key, v)
    credits = math.min(c, capacity)
    local elapsed = now - last
    if not test_clock and ttl > 0 and last == 0 then
      -- Written with PX ttl, without the time: ttl less PTTL is the time
      -- since (no expiry, which only a hand outside sluice sets: full).
      local pttl = call('PTTL', key)
      elapsed = FULL
      if pttl >= 0 then
        elapsed = ttl - pttl
      end
    end
    if elapsed > 0 then
      if elapsed >= ceildiv(capacity - credits, count) then
        credits = capacity
      else
        credits = credits + elapsed * count
      end
    elseif elapsed < 0 then
      -- In debt until last: the debt counts against this charge, so that
      -- charges add up (to at most one burst).
      credits = -math.min(-elapsed, ceildiv(capacity, count)) * count
    end
  end
  local need = math.min(cost, 2 * burst) * period
  if credits >= need then
    local left = credits - need
    local ttl = math.max(ceildiv(capacity - left, count), 1)
    local retry = 0
    if left < cost * period then
      retry = ceildiv(cost * period - left, count)
    end
    return tb_value(left, ttl, now), ttl, 0, retry
  end
  local lack = math.min(need - credits, capacity) -- at most one burst of debt
  local wait = ceildiv(lack, count)
  local full = ceildiv(capacity, count)
  return tb_value(0, full, now + wait), wait + full, ceildiv(lack, period), wait + ceildiv(cost * period, count)
end
