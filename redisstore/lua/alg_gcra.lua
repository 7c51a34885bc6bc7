-- alg_gcra.lua: GCRA, the generic cell rate algorithm, as limit/gcra.go gcra.
--
-- GCRA is the token bucket kept as one timestamp, the theoretical arrival
-- time (TAT): when the bucket would be full again. What the bucket lacks
-- is the debt TAT - now, so it answers exactly as the token bucket with the
-- same rate and burst.
--
-- Time is counted in units of 1/per_ms ms, where per_ms = count / g and
-- g = gcd(count, period): a millisecond is per_ms units and a token is
-- per_token = period / g units, so every step is an integer. Dividing by g
-- keeps the timestamps small; limit.Validate refuses rates whose timestamps
-- would pass 2^53 before 2109.
--
-- State: one string "<tat> <count> <owed>", written with SET ... PX. The
-- units of the TAT depend on count, which the key does not hold (two rules
-- may name the same limit at different rates, and a rule change may change
-- the rate), so the count the TAT was counted at is stored beside it, and
-- the debt the take that wrote it left, from which the time of that take
-- follows: so a debt counted at another rate can be converted as the token
-- bucket would see it. The debt rather than the time because it is
-- shorter, which keeps the value as small as the token bucket's. A bare
-- "<tat>", as written before the rate was stored, is read as counted at
-- the current rate.

-- gcra_gcd returns the greatest common divisor of a, b > 0. math.fmod is
-- C's fmod, exact for doubles, so this is Go's a % b loop.
local function gcra_gcd(a, b)
  while b ~= 0 do
    a, b = b, math.fmod(a, b)
  end
  return a
end

-- gcra_convert returns the debt, in units of 1/per_ms ms, of a TAT counted
-- at old_count whose last take left owed: as limit/gcra.go gcraDebt, the
-- token bucket's steps after the same change of rate. The debt the last
-- take left becomes credits (tokens x period, whatever the rate), clamped
-- to the capacity, refilled since that take at count, and rounded up to
-- the new units, so the conversion never gives a token.
local function gcra_convert(tat, old_count, owed, now, count, period, burst, g)
  local old_g = gcra_gcd(old_count, period)
  -- TAT = time x units + debt, so the take was at (tat - owed) / units.
  local last = floordiv(tat - owed, old_count / old_g)
  local full = burst * period
  -- Compare before multiplying, so that the credits stay below 2^53.
  local lacking = full
  if owed < ceildiv(full, old_g) then
    lacking = owed * old_g
  end
  local elapsed = now - last
  if elapsed > 0 then
    if elapsed >= ceildiv(lacking, count) then
      lacking = 0
    else
      lacking = lacking - elapsed * count
    end
  end
  return ceildiv(lacking, g)
end

ALGS['gcra'] = function(key, now, cost, count, period, burst)
  local g = gcra_gcd(count, period)
  -- g divides both exactly, so these quotients are exact integers.
  local per_ms, per_token = count / g, period / g
  local capacity = burst * per_token
  local at = now * per_ms
  local debt = 0 -- a key never seen, or expired, is a full bucket
  local stored = redis.call('GET', key)
  if stored then
    local a, b, c = string.match(stored, '^(%-?%d+) (%d+) (%d+)$')
    local tat, old_count, owed
    if a then
      tat, old_count, owed = tonumber(a), tonumber(b), tonumber(c)
    else
      tat, old_count = tonumber(string.match(stored, '^(%-?%d+)$')), count
    end
    if not tat or old_count < 1 then
      bad_state(key, stored)
    end
    if old_count == count then
      if tat > at then
        debt = tat - at
      end
    else
      debt = gcra_convert(tat, old_count, owed, now, count, period, burst, g)
    end
  end
  local reset = ceildiv(debt, per_ms)
  -- A burst lowered since the last take can leave more debt than the new
  -- capacity: then nothing is left, and the debt drains at the usual rate.
  local remaining = floordiv(math.max(capacity - debt, 0), per_token)
  if cost > burst then
    return 0, remaining, -1, reset, nil
  end
  local need = cost * per_token
  -- Not debt + need > capacity: with a lowered burst that sum could pass
  -- 2^53 and round.
  if debt > capacity - need then
    return 0, remaining, ceildiv(debt - (capacity - need), per_ms), reset, nil
  end
  debt = debt + need
  reset = ceildiv(debt, per_ms)
  local tat = at + debt
  return 1, floordiv(capacity - debt, per_token), 0, reset, function()
    redis.call('SET', key, int_str(tat) .. ' ' .. int_str(count) .. ' ' .. int_str(debt),
      'PX', int_str(expire_ms(math.max(reset, 1))))
  end
end
