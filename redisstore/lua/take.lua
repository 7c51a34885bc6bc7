-- take.lua: the one entry of every take, after the prelude and the
-- algorithms: a Take (want = cost) and the TakeUpTo a token lease draws its
-- batches with (want > cost). script.go ends the library with a line that
-- registers take as a Redis function (FCALL), or, for a server without
-- functions, with one that calls it on KEYS and ARGV (EVALSHA).
--
-- keys[i]      the state of limit i: <prefix>{<encoded request key>}:<bucket id>
-- args[1]      now in Unix ms, or '0' to read Redis's clock (production)
-- args[2]      cost
-- args[3]      want, at least cost: the most tokens to take
-- args[3 + i]  limit i: '<algorithm> <count> <period ms> <burst>'
--
-- Reply: a flat array of integers: granted (0 when refused, else cost to
-- want), then for each limit allowed (1/0), remaining, retry_ms, reset_ms.
-- Go combines the limits with limit.Decide, so both stores pick the limit
-- the headers describe alike.
--
-- A take is one call so that it is atomic: Redis runs it to the end before
-- any other command, so two gateways can never both spend the last token,
-- and a refused request takes from no limit.
--
-- What a call costs Redis is what bounds a shard, so the body avoids what
-- measured dear (docs/redis.md): converting text to numbers (each tonumber
-- is a strtod), allocating (closures, tables), and commands. The tables
-- below live as long as the library and are reused by every call; Redis
-- runs one call at a time, and each call writes what it reads first.

-- SPECS caches parsed limit specs, args[3 + i], by their text: a fleet has
-- few distinct limits, so a take finds its limits here instead of parsing
-- four fields. Emptied when it grows past SPECS_MAX, so rule churn cannot
-- grow it without bound. Under EVALSHA it lives for one call only.
local SPECS, nspecs, SPECS_MAX = {}, 0, 4096

-- LIM[i] is limit i's spec in this call, OUT[6i-5 .. 6i] its algorithm's
-- answer, and REPLY the reply; all reused from call to call.
local LIM, OUT, REPLY = {}, {}, {}

-- last_s and last_ms cache the seconds of the last TIME read and their
-- value in ms: the seconds change once a second, and the text of a string
-- compares by identity in Lua, so most calls convert only the
-- microseconds.
local last_s, last_ms = nil, 0

-- redis_now returns Redis's clock in Unix ms. Redis's, never the
-- gateways': their clocks drift apart.
local function redis_now()
  local t = redis.call('TIME')
  local s = t[1]
  if s ~= last_s then
    last_s, last_ms = s, tonumber(s) * 1000
  end
  return last_ms + math.floor(tonumber(t[2]) / 1000)
end

-- spec returns limit i's parsed spec {algorithm function, count, period,
-- burst}, from SPECS or by parsing it.
local function spec(text, i)
  local sp = SPECS[text]
  if sp then
    return sp
  end
  local name, count, period, burst = string.match(text, '^([%w_]+) (%d+) (%d+) (%d+)$')
  if not name then
    error({err = 'ERR sluice: limit ' .. i .. ' is ' .. string.format('%q', text) .. ', want "<algorithm> <count> <period ms> <burst>"'})
  end
  local alg = ALGS[name]
  if not alg then
    error({err = 'ERR sluice: unknown algorithm ' .. string.format('%q', name)})
  end
  if nspecs >= SPECS_MAX then
    SPECS, nspecs = {}, 0
  end
  sp = {alg, tonumber(count), tonumber(period), tonumber(burst)}
  SPECS[text], nspecs = sp, nspecs + 1
  return sp
end

-- eval runs every limit's algorithm for a take of c tokens into OUT,
-- writing nothing, and returns 1 if all allowed, else 0.
local function eval(keys, n, now, c)
  local all = 1
  for i = 1, n do
    local sp = LIM[i]
    local allowed, remaining, retry, reset, value, px = sp[1](keys[i], now, c, sp[2], sp[3], sp[4])
    if allowed ~= 1 then
      all = 0
    end
    local o = 6 * i - 5
    OUT[o], OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5] = allowed, remaining, retry, reset, value, px
  end
  return all
end

local function take(keys, args)
  local n = #keys
  -- Equal strings are one object in Lua: a plain take (want = cost)
  -- converts one number, not two.
  local now, cost, want = args[1], tonumber(args[2]), nil
  if args[3] == args[2] then
    want = cost
  else
    want = tonumber(args[3])
  end
  if n == 0 or #args ~= 3 + n or not cost or not want or want < cost then
    return redis.error_reply('ERR sluice: ' .. n .. ' keys want ' .. (3 + n) .. ' arguments (now, cost, want >= cost, one spec per limit), got ' .. #args)
  end
  if now == '0' then
    test_clock = false
    now = redis_now()
  else
    test_clock = true
    now = tonumber(now)
    if not now then
      return redis.error_reply('ERR sluice: now is ' .. string.format('%q', args[1]) .. ', not a number')
    end
  end
  for i = 1, n do
    LIM[i] = spec(args[3 + i], i)
  end

  -- The algorithms do not write, so asking "could you give want?" costs
  -- nothing: a first pass at want; if a limit refuses and the caller would
  -- take less, the grant is the least any refusing limit has left and a
  -- second pass takes that; failing that, a pass at cost, so that a
  -- refusal reports the wait for this request. A plain take (want = cost)
  -- makes one pass.
  local grant = want
  local all = eval(keys, n, now, grant)
  if all ~= 1 and want > cost then
    for i = 1, n do
      local o = 6 * i - 5
      if OUT[o] ~= 1 and OUT[o + 1] < grant then
        grant = OUT[o + 1]
      end
    end
    all = 0
    if grant >= cost then
      all = eval(keys, n, now, grant)
    end
    if all ~= 1 then
      all = eval(keys, n, now, cost)
    end
  end

  -- All or nothing: states are written only when every limit allowed.
  if all == 1 then
    for i = 1, n do
      local value = OUT[6 * i - 1]
      if type(value) == 'function' then
        value()
      else
        -- PX as text formatted here: a number passed to redis.call is
        -- printed by Redis with '%.17g', exact but several times dearer
        -- than an integer format (measured: docs/redis.md).
        redis.call('PSETEX', keys[i], string.format('%d', OUT[6 * i]), value)
      end
    end
    REPLY[1] = grant
  else
    REPLY[1] = 0
  end
  for i = 1, n do
    local o, r = 6 * i - 5, 4 * i - 2
    REPLY[r], REPLY[r + 1], REPLY[r + 2], REPLY[r + 3] = OUT[o], OUT[o + 1], OUT[o + 2], OUT[o + 3]
  end
  -- Redis reads a reply table up to its first nil: end this call's reply
  -- there, whatever a longer one before it left behind.
  REPLY[4 * n + 2] = nil
  return REPLY
end
