-- prelude.lua: the helpers every algorithm shares, and the ALGS registry.
--
-- The script a Take runs is this file, then every lua/alg_*.lua in sorted
-- order, then take.lua, joined into one chunk (see script.go). Everything
-- is local: Redis refuses scripts that create globals.
--
-- Lua numbers are doubles. Every integer the algorithms handle stays below
-- 2^53 (limit.Validate guarantees it), where doubles are exact, so the
-- arithmetic below matches Go's int64 arithmetic bit for bit, as long as
-- two rules are kept: division goes through floordiv/ceildiv, and numbers
-- become strings through int_str.

-- ALGS maps an algorithm name to its function:
--   ALGS[name] = function(key, now, cost, count, period, burst)
--     -> allowed (1/0), remaining, retry_ms (0 if allowed, -1 never),
--        reset_ms, commit
-- An algorithm reads its state but never writes it: commit, a function of
-- no arguments returned for an allowed take, writes the new state, and
-- take.lua calls it only when every limit of the request allowed.
local ALGS = {}

-- int_str formats an integer-valued number exactly. tostring would print
-- 14 significant digits, rounding values above 1e14, and Unix milliseconds
-- times a rate get there quickly.
local function int_str(x)
  return string.format('%.0f', x)
end

-- floordiv returns floor(a / b) for integers a >= 0, b > 0. a / b is a
-- rounded double, so its floor can be one off when the exact quotient is
-- just below an integer; the products used to correct it are exact.
local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceildiv returns the ceiling of a / b for integers a >= 0, b > 0, as Go's
-- (a + b - 1) / b does. Not by that sum: for a near 2^53 it would round,
-- while q * b <= a is exact.
local function ceildiv(a, b)
  local q = floordiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- now_ms returns the time of this take in Unix ms: ARGV[1], or Redis's own
-- clock when ARGV[1] is '0', as production sends. Redis's clock, never the
-- gateways': their clocks drift apart. nil if ARGV[1] is not a number.
local function now_ms()
  local now = tonumber(ARGV[1])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

-- TEST_CLOCK is true when the caller passed the time (ARGV[1] ~= '0'):
-- only tests do, to drive a fake clock. Production sends '0' and the script
-- reads Redis's own clock.
local TEST_CLOCK = ARGV[1] ~= '0'

-- expire_ms returns the PX to store a state with, given the algorithm's TTL
-- in ms (the Outcome's TTL, at least 1). Redis expires keys by its own
-- clock; under a test clock that may run slower than real time, a key
-- expiring by real time would vanish before the fake clock says it may.
-- A state kept longer than its TTL changes no answer, so under a test clock
-- states are simply kept ten minutes longer. Every algorithm's commit must
-- write its expiry through this.
local function expire_ms(ttl)
  if TEST_CLOCK then
    return ttl + 600000
  end
  return ttl
end

-- bad_state raises an error reply for a stored value no algorithm wrote:
-- guessing a state could hand a client a full bucket, so the take fails and
-- the caller's outage policy decides.
local function bad_state(key, value)
  error({err = 'ERR sluice: malformed state at ' .. key .. ': ' .. string.format('%q', value)})
end
