-- prelude.lua: the helpers every algorithm shares, and the ALGS registry.
--
-- The library a take runs is this file, then every lua/alg_*.lua in sorted
-- order, then take.lua, joined into one chunk (see script.go). Everything
-- is local: Redis refuses code that creates globals. Loaded as a Redis
-- function library (FUNCTION LOAD), this top level runs once per load, not
-- per call, so it may only define: Redis offers no libraries (math,
-- string) to a library's top level, only to the functions it registers.
--
-- Lua numbers are doubles. Every integer the algorithms handle stays below
-- 2^53 (limit.Validate guarantees it), where doubles are exact, so the
-- arithmetic below matches Go's int64 arithmetic bit for bit, as long as
-- two rules are kept: division goes through floordiv/ceildiv, and
-- numbers become text only as described below.

-- ALGS maps an algorithm name to its function:
--   ALGS[name] = function(key, now, cost, count, period, burst, stored, elapsed)
--     -> allowed (1/0), remaining, retry_ms (0 if allowed, -1 never),
--        reset_ms, value, ttl
-- stored and elapsed are what take.lua read for a token bucket: the
-- credits stored (false for no bucket) and the ms since; the other
-- algorithms read their own keys. now is nil when the call has not read
-- the clock, which only a token bucket and a sliding window can be given:
-- the sliding window then tells the time from its key (and returns the
-- time it used as a seventh value, for the write). An algorithm reads
-- its state but never writes it. For an allowed take it returns the new
-- state instead: value, a string, that take.lua writes with its ttl (ms
-- from now, at least 1), or a function of no arguments that writes it (the
-- sliding log's list). take.lua writes only when every limit of the
-- request allowed. Values, not closures: a closure is an allocation per
-- limit per call, and what is written is one command.
local ALGS = {}

-- CHARGE maps the name of an algorithm that can be charged to its charge:
--   CHARGE[name] = function(key, now, cost, count, period, burst)
--     -> value, ttl, short, retry_ms
-- It takes cost tokens whatever the state under key holds (now is always
-- known), leaving debt of at most one burst where it is short, and
-- returns the state to write (take.lua writes it, as a take's), how many
-- tokens it was short of, and the ms until a take of cost fits after it.
-- A settle's positive delta and a refusal that counts
-- (limit.Limit.CountRefusals) are charges. The window algorithms' charge
-- is window_charge: their count never goes above the limit.
local CHARGE = {}

-- window_charge returns the charge of window algorithm alg (an ALGS
-- function): as much of cost as the window has room for, the count never
-- above the limit (a window holds no debt), the rest reported short. The
-- state may be a function that writes itself (the sliding log's list), or
-- nil when there was no room. Two passes of the algorithm at most: a
-- settle is rare, and the algorithm is then the one place that knows its
-- state.
local function window_charge(alg)
  return function(key, now, cost, count, period, burst)
    local c = cost
    if c > count then
      c = count
    end
    local allowed, remaining, _, _, value, ttl = alg(key, now, c, count, period, burst)
    if allowed ~= 1 then
      if remaining <= 0 then
        return nil, 0, cost, 0
      end
      c = remaining
      allowed, remaining, _, _, value, ttl = alg(key, now, c, count, period, burst)
    end
    return value, ttl, cost - c, 0
  end
end

-- call, fmt, floor, ceil, spack and sunpack are redis.call,
-- string.format, math.floor, math.ceil and the struct library's pack and
-- unpack, bound by bind() at the first call of a take: a library's top
-- level sees no libraries, and an upvalue is found faster than a global
-- table's field.
local call, fmt, floor, ceil, spack, sunpack

local function bind()
  call, fmt, floor, ceil = redis.call, string.format, math.floor, math.ceil
  spack, sunpack = struct.pack, struct.unpack
end

-- Numbers become text through string.format('%d', x) only: it converts x
-- to a 64-bit C long first, exact below 2^53, and formats several numbers
-- in one call. tostring and '..' print 14 significant digits, rounding
-- values above 1e14, and Unix milliseconds times a rate get there quickly.
-- A number passed to redis.call as it is, is printed by Redis with
-- '%.17g': exact, but that double formatting measured several times
-- dearer than an integer format, so commands get text.

-- floordiv returns floor(a / b) for integers a >= 0, b > 0. a / b is a
-- rounded double, so its floor can be one off when the exact quotient is
-- just below an integer; the products used to correct it are exact.
local function floordiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceildiv returns the ceiling of a / b for integers a >= 0, b > 0, as Go's
-- (a + b - 1) / b does. Not by that sum: for a near 2^53 it would round.
-- The ceiling of the rounded quotient is corrected as floordiv corrects
-- the floor, with exact products; not by calling floordiv, since a take
-- runs this two or three times per limit and a Lua call costs more than
-- the lines.
local function ceildiv(a, b)
  local q = ceil(a / b)
  if q * b < a then
    q = q + 1
  elseif (q - 1) * b >= a then
    q = q - 1
  end
  return q
end

-- FULL is an elapsed time that refills any bucket: times any count it is
-- at least 2^53, more than any capacity.
local FULL = 2^53

-- test_clock is true during a call whose caller passed the time (a second
-- argument): only tests do, to drive a fake clock. Production passes none
-- and the call reads Redis's own clock. take.lua sets it at every call.
local test_clock = false

-- last_s and last_ms cache the seconds of the last TIME read and their
-- value in ms: the seconds change once a second, and the text of a string
-- compares by identity in Lua, so most calls convert only the
-- microseconds.
local last_s, last_ms = nil, 0

-- redis_now returns Redis's clock in Unix ms. Redis's, never the
-- gateways': their clocks drift apart.
local function redis_now()
  local t = call('TIME')
  local s = t[1]
  if s ~= last_s then
    last_s, last_ms = s, tonumber(s) * 1000
  end
  return last_ms + floor(tonumber(t[2]) / 1000)
end

-- expire_ms returns the PX to store a state with, given the algorithm's TTL
-- in ms (the Outcome's TTL, at least 1). Redis expires keys by its own
-- clock; under a test clock that may run slower than real time, a key
-- expiring by real time would vanish before the fake clock says it may.
-- A state kept longer than its TTL changes no answer, so under a test clock
-- states are simply kept ten minutes longer. take.lua writes every value
-- an algorithm returns through this; the sliding log, which writes its own
-- list, calls it too.
local function expire_ms(ttl)
  if test_clock then
    return ttl + 600000
  end
  return ttl
end

-- bad_state raises an error reply for a stored value no algorithm wrote:
-- guessing a state could hand a client a full bucket, so the take fails and
-- the caller's outage policy decides.
local function bad_state(key, value)
  error({err = 'ERR sluice: malformed state at ' .. key .. ': ' .. fmt('%q', value)})
end
