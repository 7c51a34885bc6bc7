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
-- State: one string, the TAT, written with PSETEX, as redis-cell keeps
-- it. Its units depend on count, so the key holds them: limit.BucketID
-- ends in ":<per_ms>" for GCRA, and a value is only ever read in the units
-- it was written in. A rate change that keeps per_ms keeps the TAT as a
-- time; one that changes it finds a new key, a fresh bucket.

-- gcra_gcd returns the greatest common divisor of a, b > 0. math.fmod is
-- C's fmod, exact for doubles, so this is Go's a % b loop.
local function gcra_gcd(a, b)
  while b ~= 0 do
    a, b = b, math.fmod(a, b)
  end
  return a
end

-- gcra_state reads the state under key of a GCRA limit at now: the
-- limit's units (per ms, per token), its capacity and now in those units,
-- and the theoretical arrival time, now for a key never seen or expired (a
-- full bucket).
local function gcra_state(key, now, count, period, burst)
  local g = gcra_gcd(count, period)
  -- g divides both exactly, so these quotients are exact integers.
  local per_ms, per_token = count / g, period / g
  local at = now * per_ms
  local tat = at
  local stored = call('GET', key)
  if stored then
    local t = tonumber(string.match(stored, '^(%-?%d+)$'))
    if not t then
      bad_state(key, stored)
    end
    if t > at then
      tat = t
    end
  end
  return per_ms, per_token, burst * per_token, at, tat
end

ALGS['gcra'] = function(key, now, cost, count, period, burst)
  local per_ms, per_token, capacity, at, tat = gcra_state(key, now, count, period, burst)
  local debt = tat - at
  local reset = ceildiv(debt, per_ms)
  -- A burst lowered (or, in the same units, a rate raised) since the last
  -- take can leave more debt than the new capacity: then nothing is left,
  -- and the debt drains at the usual rate.
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
  return 1, floordiv(capacity - debt, per_token), 0, reset, fmt('%d', tat), math.max(reset, 1)
end

-- GCRA's charge, as memstore.SettleState: the theoretical arrival time
-- moves on by the cost, at most one burst past the bucket's reach, which
-- GCRA then answers as it is.
CHARGE['gcra'] = function(key, now, cost, count, period, burst)
  local per_ms, per_token, capacity, at, tat = gcra_state(key, now, count, period, burst)
  tat = math.min(tat + math.min(cost, 2 * burst) * per_token, at + 2 * capacity)
  local short, retry = 0, 0
  if tat - at > capacity then
    short = ceildiv(tat - at - capacity, per_token)
  end
  if tat - at > capacity - cost * per_token then
    retry = ceildiv(tat - at - (capacity - cost * per_token), per_ms)
  end
  return fmt('%d', tat), math.max(ceildiv(tat - at, per_ms), 1), short, retry
end
