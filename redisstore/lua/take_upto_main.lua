-- take_upto_main.lua: the body of a TakeUpTo, after the prelude and the
-- algorithms (it replaces take.lua; see upto.go).
--
-- A token lease asks for a batch: at least the request's cost, up to want.
-- The script grants the most every limit can spare, in one atomic step, so
-- tokens leave the buckets before any gateway spends them and the fleet can
-- never admit more than the buckets hold.
--
-- KEYS and ARGV as take.lua, plus one last argument: want (>= cost).
--
-- Reply: granted (0 when refused), then exactly take.lua's reply for the
-- take of granted tokens, or when refused for a take of cost.
--
-- The algorithms do not write, so asking one "could you give want?" costs
-- nothing: a first pass at want reads each limit's remaining tokens (a
-- refusal reports what is there), the grant is the smallest, and a second
-- pass at the grant is the real take. A refusal is answered as a take of
-- cost, so the wait it reports is the wait for this request.

local now = tonumber(ARGV[1])
if now == 0 then
  -- Redis's clock, never the gateways': their clocks drift apart.
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost = tonumber(ARGV[2])
local n = #KEYS
local want = tonumber(ARGV[3 + 4 * n])
if n == 0 or #ARGV ~= 3 + 4 * n or not now or not cost or not want then
  return redis.error_reply('ERR sluice: ' .. n .. ' keys want ' .. (3 + 4 * n) .. ' numeric-led arguments, got ' .. #ARGV)
end

-- eval runs every limit's algorithm for a take of c tokens, writing
-- nothing, and returns whether all allowed and the per-limit answers.
local function eval(c)
  local outs, all = {}, 1
  for i = 1, n do
    local a = 4 * i - 1 -- ARGV index of limit i's algorithm
    local alg = ALGS[ARGV[a]]
    if not alg then
      error({err = 'ERR sluice: unknown algorithm ' .. string.format('%q', ARGV[a])})
    end
    local count, period, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if not count or not period or not burst then
      error({err = 'ERR sluice: limit ' .. i .. ' has a non-numeric count, period or burst'})
    end
    local allowed, remaining, retry, reset, commit = alg(KEYS[i], now, c, count, period, burst)
    if allowed ~= 1 then
      all = 0
    end
    outs[i] = {allowed, remaining, retry, reset, commit}
  end
  return all, outs
end

local grant = math.max(want, cost)
local all, outs = eval(grant)
if all ~= 1 then
  for i = 1, n do
    if outs[i][1] ~= 1 then
      grant = math.min(grant, outs[i][2])
    end
  end
  all = 0
  if grant >= cost then
    all, outs = eval(grant)
  end
  if all ~= 1 then
    grant = cost
    all, outs = eval(cost)
  end
end

-- All or nothing, as take.lua: states are written only when every limit
-- allowed the grant.
local reply = {0, all}
if all == 1 then
  reply[1] = grant
  for i = 1, n do
    outs[i][5]()
  end
end
for i = 1, n do
  local o = outs[i]
  local r = 4 * i - 1
  reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = o[1], o[2], o[3], o[4]
end
return reply
