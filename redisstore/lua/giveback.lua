-- giveback.lua: gives back the tokens a take took, for a caller that took
-- several keys in separate calls and must undo the ones that granted when
-- another refused (rls's descriptors on different cluster shards). Run on
-- its own by EVALSHA, not part of the take's library.
--
-- KEYS[i]   limit i's state, as the take wrote it
-- ARGV[1]   the cost to give back to each limit
-- ARGV[1+i] limit i: '<algorithm> <count> <period ms> <burst>'
--
-- Each state gets the cost back and never more than the limit holds: a
-- bucket never above its burst, a window's count never below zero. A state
-- that expired meanwhile is full already and is left alone. Values keep
-- their expiry (KEEPTTL): a state given tokens back needs no longer life
-- than the take gave it, and a token bucket tells the time by its expiry.
-- Replies the number of states changed.

local cost = tonumber(ARGV[1])
local changed = 0
for i, key in ipairs(KEYS) do
  local alg, count, period, burst = string.match(ARGV[1 + i], '^(%S+) (%d+) (%d+) (%d+)$')
  count, period, burst = tonumber(count), tonumber(period), tonumber(burst)
  if alg == 'sliding_log' then
    -- The newest entries are this take's (RPUSH); dropping them gives the
    -- tokens back. An older take's would do as well: all count alike.
    local n = redis.call('LLEN', key)
    if n > cost then
      redis.call('LTRIM', key, 0, n - cost - 1)
    elseif n > 0 then
      redis.call('DEL', key) -- LTRIM to an empty list would keep it whole (0 -1)
    end
    if n > 0 then
      changed = changed + 1
    end
  else
    local v = redis.call('GET', key)
    if v then
      local out
      if alg == 'token_bucket' then
        if #v ~= 24 then
          return redis.error_reply('bad state in ' .. key)
        end
        local credits, ttl, last = struct.unpack('<ddd', v)
        out = struct.pack('<ddd', math.min(credits + cost * period, burst * period), ttl, last)
      elseif alg == 'fixed_window' then
        local ws, used = string.match(v, '^(%d+) (%d+)$')
        if not ws then
          return redis.error_reply('bad state in ' .. key)
        end
        out = string.format('%s %d', ws, math.max(tonumber(used) - cost, 0))
      elseif alg == 'sliding_window' then
        local ws, cur, prev = string.match(v, '^(%d+) (%d+) (%d+)$')
        if not ws then
          return redis.error_reply('bad state in ' .. key)
        end
        out = string.format('%s %d %s', ws, math.max(tonumber(cur) - cost, 0), prev)
      elseif alg == 'gcra' then
        local tat = tonumber(string.match(v, '^(%-?%d+)$'))
        if not tat then
          return redis.error_reply('bad state in ' .. key)
        end
        local a, b = count, period
        while b ~= 0 do
          a, b = b, math.fmod(a, b)
        end
        out = string.format('%d', tat - cost * (period / a))
      else
        return redis.error_reply('unknown algorithm ' .. tostring(alg))
      end
      redis.call('SET', key, out, 'KEEPTTL')
      changed = changed + 1
    end
  end
end
return changed
