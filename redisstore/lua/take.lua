-- take.lua: the body of a Take, after the prelude and the algorithms.
--
-- KEYS[i]  the state of limit i: <prefix>{<encoded request key>}:<bucket id>
-- ARGV[1]  now in Unix ms, or '0' to read Redis's clock (production)
-- ARGV[2]  cost
-- then for each limit i, four values: algorithm, count, period ms, burst
--
-- Reply: a flat array of integers, the take's allowed (1/0), then for each
-- limit: allowed, remaining, retry_ms, reset_ms. Go combines them with
-- limit.Decide, so both stores pick the limit the headers describe alike.
--
-- The whole request is one script so that it is atomic: Redis runs it to
-- the end before any other command, so two gateways can never both spend
-- the last token, and a refused request takes from no limit.

local now = now_ms()
local cost = tonumber(ARGV[2])
local n = #KEYS
if n == 0 or #ARGV ~= 2 + 4 * n or not now or not cost then
  return redis.error_reply('ERR sluice: ' .. n .. ' keys want ' .. (2 + 4 * n) .. ' numeric-led arguments, got ' .. #ARGV)
end

local reply = {0}
local commits = {}
local all = 1
for i = 1, n do
  local a = 4 * i - 1 -- ARGV index of limit i's algorithm
  local alg = ALGS[ARGV[a]]
  if not alg then
    return redis.error_reply('ERR sluice: unknown algorithm ' .. string.format('%q', ARGV[a]))
  end
  local count, period, burst = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  if not count or not period or not burst then
    return redis.error_reply('ERR sluice: limit ' .. i .. ' has a non-numeric count, period or burst')
  end
  local allowed, remaining, retry, reset, commit = alg(KEYS[i], now, cost, count, period, burst)
  if allowed ~= 1 then
    all = 0
  end
  commits[i] = commit
  local r = 4 * i - 2 -- reply index of limit i's allowed
  reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = allowed, remaining, retry, reset
end

-- All or nothing: states are written only when every limit allowed.
if all == 1 then
  for i = 1, n do
    commits[i]()
  end
end
reply[1] = all
return reply
