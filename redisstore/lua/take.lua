-- take.lua: the one entry of every take, after the prelude and the
-- algorithms: a Take (want = cost), the TakeUpTo a token lease draws its
-- batches with (want > cost), and a settle (a charge of every limit).
-- script.go ends the library with a line that registers take as a Redis
-- function (FCALL), or, for a server without functions, with one that
-- calls it on KEYS and ARGV (EVALSHA).
--
-- keys[i]  the state of limit i: <prefix>{<encoded request key>}:<bucket id>
-- args[1]   '<cost> <want>[ <refused>];<limit 1>;<limit 2>...', want at
--           least cost (the most tokens to take), refused the cost of
--           refusals a gateway answered from memory, charged first to the
--           limits that count refusals (limit.Request.Refused); or
--           'settle <delta>;<limit 1>...', a settle, which replies the
--           most tokens any limit was short of. Each limit '<algorithm>
--           <count> <period ms> <burst>', then ' shadow' for a shadow
--           limit or ' refusals' for one whose refusals count. One
--           argument, parsed once per distinct text and then found by it
--           (texts with refused or settle amounts are not kept): each
--           argument is a string Redis hands the call, and a fleet sends
--           few distinct texts.
-- args[2]   now in Unix ms, for a test clock only; without it the call
--           reads Redis's clock, and only when it needs one.
--
-- Reply, in one of three forms:
-- - when every limit is a token bucket and all gave want tokens, the
--   values just written, limit by limit (24 bytes each, see
--   alg_token_bucket.lua): Go derives remaining and reset from the credits
--   left as limit.Evaluate does, and the grant is want. This is the reply
--   of nearly every take that passes, and formatting nothing is the
--   cheapest reply there is.
-- - for a take of one enforced limit of another algorithm at its cost
--   (want = cost, Redis's clock), 32 bytes: allowed, remaining, retry_ms
--   and reset_ms as little-endian doubles, integers all; the grant is the
--   cost when allowed. What rls sends for each descriptor.
-- - otherwise a flat array of integers: granted (0 when refused, else cost
--   to want), then for each limit allowed (1/0), remaining, retry_ms,
--   reset_ms.
-- Go combines the limits with limit.DecideRequest, so both stores pick the
-- limit the headers describe alike.
--
-- Shadow limits (a rule tried out before it is enforced) ride in the same
-- call, under the same hash tag, so that a request costs one call
-- whatever its rules. They are a group of their own: checked at the cost
-- (never at want), written when they all allow it and never otherwise,
-- whatever the enforced limits answered, and they never refuse: the grant
-- and 'allowed' of the reply's first element are the enforced limits'
-- alone. Each shadow limit's own answer is in the reply like any other.
--
-- A take is one call so that it is atomic: Redis runs it to the end before
-- any other command, so two gateways can never both spend the last token,
-- and a refused request takes from no limit.
--
-- What a call costs Redis is what bounds a shard, so the body avoids what
-- measured dear (docs/redis.md): commands (a token bucket's take is GET,
-- PTTL and PSETEX, and one SET ... NX GET for a bucket that does not
-- exist; TIME only for the window algorithms and for buckets that no
-- value tells the time to), converting text to numbers
-- (each tonumber is a strtod), allocating (closures, tables), building a
-- reply. The tables below live as long as the library
-- and are reused by every call; Redis runs one call at a time, and each
-- call writes what it reads first.

-- SPECS caches parsed limit specs by their text, RECORDS parsed first
-- arguments: a fleet has few distinct limits and calls, so a take finds
-- its own here instead of parsing it. Each is emptied when it grows past
-- CACHE_MAX, so rule churn cannot grow it without bound. Under EVALSHA
-- they live for one call only.
local SPECS, nspecs, RECORDS, nrecords, CACHE_MAX = {}, 0, {}, 0, 4096

-- LIM[i] is limit i's spec in this call; for a token bucket STORED[i] is
-- the credits read (false if none), ELAPSED[i] the ms since they were
-- stored (nil until known), LAST[i] and TTL[i] the value's last take and
-- ttl, and FRESH[i] whether this call created the bucket by SET NX;
-- OUT[6i-5 .. 6i] is limit i's algorithm's answer, VALUES the values a
-- string reply joins, REPLY an array reply. All reused from call to call.
local LIM, STORED, ELAPSED, LAST, TTL, FRESH = {}, {}, {}, {}, {}, {}
local OUT, VALUES, REPLY = {}, {}, {}


-- fresh_by_nx is whether a bucket that does not exist may be created by
-- one SET ... NX GET (Redis 7.0 and later) instead of GET then PSETEX (see
-- spec's lean). The function library sets it; the script form, which
-- servers before 7.0 run and whose caches die with each call, leaves it
-- false.
local fresh_by_nx = false

-- spec returns limit i's parsed spec {algorithm function, count, period,
-- burst, is a token bucket, lean, is a shadow limit, tells its own clock
-- (a sliding window, see alg_sliding_window.lua), a refusal charges it
-- (' refusals', token buckets and GCRA only), its charge (CHARGE), its
-- algorithm's name}, from SPECS or by
-- parsing it. lean, from
-- -8 to 8, says how this limit's buckets were recently found: a positive
-- lean reads them with GET, the cheapest read of a bucket that exists; a
-- lean of 0 or less with SET NX, which also writes one that does not (a
-- quiet key's bucket has expired full by its next take). Either answers
-- the same; only the cost differs.
local function spec(text, i)
  local sp = SPECS[text]
  if sp then
    return sp
  end
  local name, count, period, burst, mode = string.match(text, '^([%w_]+) (%d+) (%d+) (%d+)(.*)$')
  if not name or mode ~= '' and mode ~= ' shadow' and mode ~= ' refusals' then
    error({err = 'ERR sluice: limit ' .. i .. ' is ' .. fmt('%q', text) .. ', want "<algorithm> <count> <period ms> <burst>[ shadow| refusals]"'})
  end
  local alg = ALGS[name]
  if not alg then
    error({err = 'ERR sluice: unknown algorithm ' .. fmt('%q', name)})
  end
  -- Go takes requests as valid and checks nothing (limit.Store): the
  -- script keeps its state from what would corrupt it, a division by
  -- zero (NaN and infinities, which no later take could read) or a count
  -- past 2^53 (no longer exact), once per distinct limit, here.
  count, period, burst = tonumber(count), tonumber(period), tonumber(burst)
  if count < 1 or period < 1 or burst < 1 or count * period >= 2^53 or burst * period >= 2^53 or
     name == 'sliding_log' and count > 10000 then
    error({err = 'ERR sluice: invalid limit ' .. i .. ': ' .. fmt('%q', text) .. ', want a rate, period and burst of at least 1, a rate or burst times the period below 2^53, and a sliding log of at most 10000 (limit.Limit.Validate)'})
  end
  if nspecs >= CACHE_MAX then
    SPECS, nspecs = {}, 0
  end
  sp = {alg, count, period, burst, name == 'token_bucket', 0, mode == ' shadow', name == 'sliding_window',
        mode == ' refusals' and CHARGE[name] ~= nil and (name == 'token_bucket' or name == 'gcra'), CHARGE[name], name}
  SPECS[text], nspecs = sp, nspecs + 1
  return sp
end

-- record returns the parsed first argument {cost, want, n, spec 1 ..
-- spec n, owed = the refused cost to charge first (0 for none), settle =
-- whether the call is a settle, counts = whether a refusal charges any
-- limit}, from RECORDS or by parsing text. A one-bucket record gains two
-- more at its first use under Redis's clock: the value and PX a take of
-- want writes in a missing bucket (take's first path).
local function record(text)
  local r = RECORDS[text]
  if r then
    return r
  end
  local head, rest = string.match(text, '^([^;]*)(;.+)$')
  local cost, want, owed = string.match(head or '', '^(%d+) (%d+) ?(%d*)$')
  local settle = false
  if not cost then
    cost = string.match(head or '', '^settle (%d+)$')
    want, owed, settle = cost, '', true
  end
  cost, want, owed = tonumber(cost), tonumber(want), tonumber(owed) or 0
  if not cost or cost < 1 or want < cost then
    error({err = 'ERR sluice: arguments ' .. fmt('%q', text) .. ', want "<cost> <want>[ <refused>];<limit>..." with 1 <= cost <= want, or "settle <delta>;<limit>..."'})
  end
  r = {cost, want, 0}
  local n = 0
  for limit in string.gmatch(rest, ';([^;]*)') do
    n = n + 1
    r[3 + n] = spec(limit, n)
    r.counts = r.counts or r[3 + n][9]
  end
  r[3] = n
  r.owed, r.settle = owed, settle
  if owed > 0 or settle then
    return r -- amounts vary: not worth a place in the cache
  end
  if nrecords >= CACHE_MAX then
    RECORDS, nrecords = {}, 0
  end
  RECORDS[text], nrecords = r, nrecords + 1
  return r
end

-- eval runs every limit's algorithm into OUT, writing nothing, for a take
-- of c tokens from the enforced limits and of cost from the shadow ones.
-- It returns 1 if every enforced limit allowed, else 0, then the same for
-- the shadow limits.
local function eval(keys, n, now, c, cost)
  local all, sall = 1, 1
  for i = 1, n do
    local sp = LIM[i]
    local take = c
    if sp[7] then
      take = cost
    end
    local allowed, remaining, retry, reset, value, ttl = sp[1](keys[i], now, take, sp[2], sp[3], sp[4], STORED[i], ELAPSED[i])
    if allowed ~= 1 then
      if sp[7] then
        sall = 0
      else
        all = 0
      end
    end
    local o = 6 * i - 5
    OUT[o], OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5] = allowed, remaining, retry, reset, value, ttl
  end
  return all, sall
end

-- read_bucket reads token bucket sp under key for a take of want tokens
-- (now is the test clock's, else nil); r, given for a one-bucket call under
-- Redis's clock, holds the value and PX of a missing bucket ready made. It
-- returns whether it created the bucket, the credits stored (false for no
-- bucket, a full one), and the ms since they were stored, or nil when the
-- clock must tell (elapsed_since), with the value's last take and ttl.
--
-- A bucket that does not exist is full, and what a take of want leaves in
-- a full bucket does not depend on a clock, so SET NX can write it in the
-- same command that finds the bucket missing; if the take then gives less
-- than want, take replaces the value, and if it gives nothing or fails,
-- deletes it. sp[6] leans towards GET while this limit's buckets are
-- found, and towards SET NX while they are missing.
local function read_bucket(key, sp, want, now, r)
  local v, fresh = nil, false
  if fresh_by_nx and sp[6] <= 0 and want <= sp[4] then
    if r and r[5] then
      v = call('SET', key, r[5], 'PX', r[6], 'NX', 'GET')
    else
      local value, ttl = tb_fresh(want, sp[2], sp[3], sp[4], now)
      v = call('SET', key, value, 'PX', fmt('%d', expire_ms(ttl)), 'NX', 'GET')
    end
    fresh = not v
  else
    v = call('GET', key)
  end
  if not v then
    if sp[6] > -8 then
      sp[6] = sp[6] - 1
    end
    return fresh, false, nil, 0, 0
  end
  if sp[6] < 8 then
    sp[6] = sp[6] + 1
  end
  local credits, ttl, last = tb_state(key, v)
  if ttl > 0 and last == 0 then
    -- Written with PX ttl and without the time: Redis has counted ttl
    -- down to the key's PTTL since. A PTTL below 0 (no expiry, which only
    -- a hand outside sluice sets) reads as a full bucket.
    local pttl = call('PTTL', key)
    if pttl < 0 then
      return false, credits, FULL, 0, ttl
    end
    return false, credits, ttl - pttl, 0, ttl
  end
  return false, credits, nil, last, ttl
end

-- elapsed_since returns the ms since a bucket's last take, given the
-- value's last and ttl and the call's now (nil if not known yet), and now.
-- Without now, a value written with the time (PXAT last + ttl) tells it:
-- last + ttl less the key's PTTL. take calls this only after every
-- bucket's PTTL of read_bucket, so that the now a take writes is never
-- earlier than an elapsed it measured: a millisecond that turns during a
-- call can then be lost to a refill, never counted twice.
local function elapsed_since(key, last, ttl, now)
  if not now and ttl > 0 then
    local pttl = call('PTTL', key)
    if pttl <= 0 then
      -- No expiry to read the clock from, or one that passed during this
      -- call (Redis 7.0 reads PTTL by the real clock, clamped at 0, but
      -- expires keys in a call by its start): a full bucket either way,
      -- and no time for the other limits, which could be earlier than
      -- one a PTTL of theirs measured.
      return FULL, nil
    end
    return ttl - pttl, last + ttl - pttl
  end
  if not now then
    now = redis_now()
  end
  return now - last, now
end

-- write stores value under key for ttl ms: at now + ttl when the call
-- knows now under Redis's clock, the expiry a token bucket's value then
-- says (alg_token_bucket.lua), else ttl from now (expire_ms). Numbers as
-- text formatted here: a number passed to redis.call is printed with
-- '%.17g', exact but several times dearer than an integer format
-- (docs/redis.md).
local function write(key, value, ttl, now)
  if now and not test_clock then
    call('SET', key, value, 'PXAT', fmt('%d', now + ttl))
  else
    call('PSETEX', key, fmt('%d', expire_ms(ttl)), value)
  end
end

-- needs_clock reports whether two or more of the n token buckets of this
-- call exist, so that a take would write their values (SET NX wrote the
-- others already): only then does one value that tells the time save the
-- next take a PTTL.
local function needs_clock(n)
  local written = 0
  for i = 1, n do
    if not FRESH[i] then
      written = written + 1
    end
  end
  return written > 1
end

-- RETRY[i] is limit i's wait after a charge (charge), reused.
local RETRY = {}

-- charge takes c tokens at now, whatever they hold, from the enforced
-- limits of record r (only from those a refusal charges, with refusals),
-- writes their states, and returns the most tokens any was short of;
-- RETRY[i] is then limit i's wait for a take of the cost. A limit whose
-- algorithm has no charge raises an error before anything is written.
local function charge(keys, n, r, c, now, refusals)
  for i = 1, n do
    local sp = r[3 + i]
    if not sp[7] and not refusals and not sp[10] then
      error({err = 'ERR sluice: limit ' .. i .. ' is a ' .. sp[11] .. ', which cannot be settled'})
    end
  end
  local short = 0
  for i = 1, n do
    local sp = r[3 + i]
    if not sp[7] and (sp[9] or not refusals) then
      local value, ttl, s, retry = sp[10](keys[i], now, c, sp[2], sp[3], sp[4])
      if type(value) == 'function' then
        value()
      elseif value then
        write(keys[i], value, ttl, now)
      end
      if s > short then
        short = s
      end
      RETRY[i] = retry
    end
  end
  return short
end

-- general is take for every call but the usual one: read every token
-- bucket, learn the clock if it must, run the algorithms, write all or
-- nothing, reply. It may have created buckets by SET NX (FRESH) when it
-- raises an error; take deletes them then.
local function general(keys, n, r, cost, want, now)
  local buckets = true
  for i = 1, n do
    local sp = r[3 + i]
    LIM[i] = sp
    if sp[5] then
      -- A shadow bucket is only ever asked for the cost.
      local w = want
      if sp[7] then
        w = cost
      end
      FRESH[i], STORED[i], ELAPSED[i], LAST[i], TTL[i] = read_bucket(keys[i], sp, w, now)
    else
      STORED[i] = false
      buckets = false
    end
  end
  -- Only now, after every PTTL of the loop, the clock (elapsed_since).
  for i = 1, n do
    if STORED[i] and not ELAPSED[i] then
      ELAPSED[i], now = elapsed_since(keys[i], LAST[i], TTL[i], now)
    end
  end
  -- The window algorithms need the clock. So do two or more token buckets
  -- that will be written (needs_clock): written with the time, their
  -- values let the next take read one PTTL for them all, where values
  -- written without it need one each (alg_token_bucket.lua).
  if not now and (not buckets or n > 1 and needs_clock(n)) then
    now = redis_now()
  end

  -- The algorithms do not write, so asking "could you give want?" costs
  -- nothing: a first pass at want; if a limit refuses and the caller would
  -- take less, the grant is the least any refusing limit has left and a
  -- second pass takes that; failing that, a pass at cost, so that a
  -- refusal reports the wait for this request. A plain take (want = cost)
  -- makes one pass.
  local grant = want
  local all, sall = eval(keys, n, now, grant, cost)
  if all ~= 1 and want > cost then
    for i = 1, n do
      local o = 6 * i - 5
      if OUT[o] ~= 1 and OUT[o + 1] < grant and not LIM[i][7] then
        grant = OUT[o + 1]
      end
    end
    all = 0
    if grant >= cost then
      all, sall = eval(keys, n, now, grant, cost)
    end
    if all ~= 1 then
      all, sall = eval(keys, n, now, cost, cost)
    end
  end

  -- All or nothing, each group apart: the enforced limits' states are
  -- written only when every enforced limit allowed, the shadow limits'
  -- only when every shadow limit did.
  for i = 1, n do
    local sp = LIM[i]
    local ok = all
    if sp[7] then
      ok = sall
    end
    if ok == 1 then
      local value = OUT[6 * i - 1]
      if FRESH[i] and (sp[7] or grant == want) then
        -- SET NX wrote this value already.
      elseif not sp[5] and type(value) == 'function' then
        value()
      else
        write(keys[i], value, OUT[6 * i], now)
      end
    elseif FRESH[i] then
      call('DEL', keys[i]) -- back to no bucket, a full one
      FRESH[i] = false
    end
  end
  if all ~= 1 and r.counts then
    -- Refusals count: the cost is charged here, in the call that refused,
    -- and a limit that refused says when the request fits after it.
    if not now then
      now = redis_now()
    end
    charge(keys, n, r, cost, now, true)
    for i = 1, n do
      local o = 6 * i - 5
      if LIM[i][9] and OUT[o] ~= 1 and OUT[o + 2] >= 0 and RETRY[i] > OUT[o + 2] then
        OUT[o + 1], OUT[o + 2] = 0, RETRY[i]
      end
    end
  end
  if all == 1 then
    if buckets and grant == want and sall == 1 then
      if n == 1 then
        return OUT[5]
      end
      for i = 1, n do
        VALUES[i] = OUT[6 * i - 1]
      end
      return table.concat(VALUES, '', 1, n)
    end
    REPLY[1] = grant
  else
    REPLY[1] = 0
  end
  for i = 1, n do
    local o, j = 6 * i - 5, 4 * i - 2
    REPLY[j], REPLY[j + 1], REPLY[j + 2], REPLY[j + 3] = OUT[o], OUT[o + 1], OUT[o + 2], OUT[o + 3]
  end
  -- Redis reads a reply table up to its first nil: end this call's reply
  -- there, whatever a longer one before it left behind.
  REPLY[4 * n + 2] = nil
  return REPLY
end

local function take(keys, args)
  if not call then
    bind()
  end
  if not args[1] then
    return redis.error_reply('ERR sluice: no arguments, want "<cost> <want>;<limit>..." and, under a test clock, now')
  end
  local r = RECORDS[args[1]] or record(args[1])
  local cost, want, n = r[1], r[2], r[3]
  if #keys ~= n or #args > 2 then
    return redis.error_reply('ERR sluice: ' .. #keys .. ' keys and ' .. #args .. ' arguments for ' .. n .. ' limits, want a key per limit and one or two arguments')
  end
  local now = args[2]
  test_clock = now ~= nil
  if test_clock then
    now = tonumber(now)
    if not now then
      return redis.error_reply('ERR sluice: now is ' .. fmt('%q', args[2]) .. ', not a number')
    end
  end
  if r.settle then
    -- A settle: the true cost is known after the response, and cost more
    -- is taken from every enforced limit whatever it holds. The reply is
    -- the most tokens any limit was short of.
    return charge(keys, n, r, cost, now or redis_now(), false)
  end
  if r.owed > 0 then
    -- Refusals a gateway answered from memory, charged before this
    -- request is decided, in the same call.
    now = now or redis_now()
    charge(keys, n, r, r.owed, now, true)
  end
  if r.counts then
    -- Refusals count: the general path, which charges a refusal.
  elseif n == 1 and r[4][5] and not r[4][7] and not test_clock then
    -- One token bucket under Redis's clock, the usual call: no tables, and
    -- no error can follow a write.
    local sp, key = r[4], keys[1]
    if r[5] == nil and want <= sp[4] then
      -- What a take of want leaves in a missing bucket, formatted once.
      local value, ttl = tb_fresh(want, sp[2], sp[3], sp[4], nil)
      r[5], r[6] = value, fmt('%d', ttl)
    end
    local fresh, stored, elapsed, last, ttlw = read_bucket(key, sp, want, nil, r)
    if fresh then
      return r[5]
    end
    local at
    if stored and not elapsed then
      elapsed, at = elapsed_since(key, last, ttlw, nil)
    end
    local allowed, remaining, retry, reset, value, ttl = sp[1](key, at, want, sp[2], sp[3], sp[4], stored, elapsed)
    if allowed == 1 then
      write(key, value, ttl, at)
      return value
    end
    if want == cost then
      REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5], REPLY[6] = 0, 0, remaining, retry, reset, nil
      return REPLY
    end
    -- A lease refused want, having written nothing (a bucket SET NX
    -- creates is full, and gives want): the general path's passes, which
    -- read the bucket again.
  end
  if not r.counts and n == 1 and not r[4][5] and not r[4][7] and want == cost and not test_clock then
    -- One enforced limit of a window algorithm (or GCRA) under Redis's
    -- clock, taken at its cost: what rls sends for each descriptor. One
    -- pass, no tables filled, no pcall: the algorithm raises any error
    -- before the one write. A sliding window reads the clock itself, from
    -- its key's PTTL (alg_sliding_window.lua). The reply is the limit's
    -- answer packed in 32 bytes (see the top of this file): one string
    -- measured cheaper for Redis to reply than an array of five integers.
    local sp, key = r[4], keys[1]
    local at
    if not sp[8] then
      at = redis_now()
    end
    local allowed, remaining, retry, reset, value, ttl, used, keep = sp[1](key, at, cost, sp[2], sp[3], sp[4])
    if allowed == 1 then
      if keep then
        call('SET', key, value, 'KEEPTTL')
      elseif type(value) == 'function' then
        value()
      else
        write(key, value, ttl, at or used)
      end
    end
    return spack('<dddd', allowed, remaining, retry, reset)
  end
  for i = 1, n do
    FRESH[i] = false
  end
  local ok, reply = pcall(general, keys, n, r, cost, want, now)
  if ok then
    return reply
  end
  -- All or nothing, errors too: a bucket this call created goes again.
  for i = 1, n do
    if FRESH[i] then
      call('DEL', keys[i])
    end
  end
  -- pcall hands a Redis error reply ({err = 'WRONGTYPE ...'}, bad_state's
  -- 'ERR sluice: ...') over as its text; raised again, Redis would prefix
  -- 'ERR ' and lose the code the caller classifies (OOM, READONLY: the
  -- node, not the key). Reply it as it was.
  if type(reply) == 'string' and string.match(reply, '^%u+ ') then
    return redis.error_reply(reply)
  end
  error(reply, 0)
end
