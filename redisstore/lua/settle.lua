-- settle.lua: takes the rest of a request's cost once the response has
-- told the true cost, for a take whose cost was an estimate (gateway
-- endpoints with a cost header). Run on its own by EVALSHA, not part of
-- the take's library: only a settle calls it, once per request whose true
-- cost exceeded the estimate. (A true cost below the estimate is given
-- back by giveback.lua.) Token buckets and GCRA only: Go refuses the rest.
--
-- KEYS[i]   limit i's state, as the take wrote it
-- ARGV[1]   the tokens to take from each limit, at least 1
-- ARGV[2]   now in Unix ms for a test clock, or '' to read Redis's clock
-- ARGV[2+i] limit i: '<algorithm> <count> <period ms> <burst>'
--
-- Unlike a take, a settle never refuses: the tokens were spent by the
-- response already. A limit short of them is left in debt, so the key's
-- next requests wait until it has refilled; the debt is at most one burst,
-- so a key is never kept out longer than twice its bucket's fill time. The
-- arithmetic is
-- memstore.SettleState's, so the stores agree:
--   token bucket  credits left, or in debt no credits and a last take in
--                 the future (now + the debt's refill time), written with
--                 PXAT last + ttl as take.lua writes it, so that its next
--                 take reads the time from the expiry: the elapsed time is
--                 negative until the debt is paid, and the bucket refills
--                 from then
--   gcra          the theoretical arrival time moves on by the cost, past
--                 the burst's reach when in debt, which GCRA answers as is
-- Replies the most tokens any limit was short of (0 for none).

local cost = tonumber(ARGV[1])
local test_now = tonumber(ARGV[2])
local now = test_now
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ceildiv(a, b)
  return math.floor((a + b - 1) / b)
end

-- write stores value for ttl ms from now: PXAT now + ttl by Redis's clock
-- (a token bucket's value tells the time by it), or under a test clock
-- ten minutes longer, as take.lua's expire_ms keeps states.
local function write(key, value, ttl)
  if test_now then
    redis.call('PSETEX', key, string.format('%d', ttl + 600000), value)
  else
    redis.call('SET', key, value, 'PXAT', string.format('%d', now + ttl))
  end
end

local short = 0
for i, key in ipairs(KEYS) do
  local alg, count, period, burst = string.match(ARGV[2 + i], '^(%S+) (%d+) (%d+) (%d+)$')
  count, period, burst = tonumber(count), tonumber(period), tonumber(burst)
  if alg == 'token_bucket' then
    local capacity = burst * period
    local credits = capacity
    local v = redis.call('GET', key)
    if v then
      if #v ~= 24 then
        return redis.error_reply('ERR sluice: malformed state at ' .. key)
      end
      local c, ttl, last = struct.unpack('<ddd', v)
      credits = math.min(c, capacity)
      local elapsed
      if test_now or ttl == 0 then
        elapsed = now - last
      else
        -- As take.lua reads it: the time since the value was written is
        -- its ttl less the key's PTTL.
        local pttl = redis.call('PTTL', key)
        elapsed = ttl - pttl
        if pttl < 0 then
          elapsed = 2^53 -- no expiry: only a hand outside sluice; full
        end
      end
      if elapsed > 0 then
        credits = math.min(credits + elapsed * count, capacity)
      end
    end
    local need = cost * period
    local full = ceildiv(capacity, count)
    if credits >= need then
      local left = credits - need
      local ttl = math.max(ceildiv(capacity - left, count), 1)
      local stored_ttl, last = ttl, now
      if test_now then
        stored_ttl = 0
      end
      write(key, struct.pack('<ddd', left, stored_ttl, last), ttl)
    else
      local lack = math.min(need - credits, capacity) -- at most one burst of debt
      local wait = ceildiv(lack, count)
      short = math.max(short, ceildiv(lack, period))
      local last = now + wait
      local stored_ttl = full
      if test_now then
        stored_ttl = 0
      end
      -- Expires at last + full: PXAT now + wait + full.
      write(key, struct.pack('<ddd', 0, stored_ttl, last), wait + full)
    end
  elseif alg == 'gcra' then
    local a, b = count, period
    while b ~= 0 do
      a, b = b, math.fmod(a, b)
    end
    local per_ms, per_token = count / a, period / a
    local at = now * per_ms
    local tat = at
    local v = redis.call('GET', key)
    if v then
      local stored = tonumber(string.match(v, '^(%-?%d+)$'))
      if not stored then
        return redis.error_reply('ERR sluice: malformed state at ' .. key)
      end
      if stored > at then
        tat = stored
      end
    end
    tat = math.min(tat + cost * per_token, at + 2 * burst * per_token) -- at most one burst of debt
    local over = tat - at - burst * per_token
    if over > 0 then
      short = math.max(short, ceildiv(over, per_token))
    end
    write(key, string.format('%d', tat), math.max(ceildiv(tat - at, per_ms), 1))
  else
    return redis.error_reply('ERR sluice: settle takes token_bucket and gcra limits, not ' .. tostring(alg))
  end
end
return short
