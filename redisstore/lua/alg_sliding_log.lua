-- alg_sliding_log.lua: the sliding log, as limit/window.go slidingLog.
--
-- Exact: one entry per admitted token, its time in ms, and a request fits
-- if the entries younger than one period plus its cost are at most count.
-- Refused requests add nothing, so a key far over its limit still holds at
-- most count entries (limit.Validate caps count at 10,000).
--
-- State: a Redis list of times, oldest first, under the key. A list rather
-- than a sorted set: entries arrive in time order, so the dead ones are a
-- prefix, and a list stores one small integer per token where a sorted set
-- needs unique members and a score each.
--
-- The algorithm reads only what it needs: the newest entry, then the list
-- from the left until the first live entry (in steady traffic only a few
-- have died since the last take), and for a refusal the one entry whose
-- departure makes room. The whole list is never sent to the script.

ALGS['sliding_log'] = function(key, now, cost, count, period, burst)
  local n = call('LLEN', key)
  local first = n + 1 -- index (1-based) of the oldest live entry
  local oldest
  local caller = now -- the time asked about, before any standing still
  if n > 0 then
    local newest = tonumber(call('LINDEX', key, -1))
    if not newest then
      bad_state(key, call('LINDEX', key, -1))
    end
    -- A clock that stepped back stands still at the newest entry, which
    -- keeps the list in time order.
    if newest > now then
      now = newest
    end
    local from, chunk = 0, 16
    while from < n and not oldest do
      local part = call('LRANGE', key, from, from + chunk - 1)
      if #part == 0 then
        break
      end
      for i = 1, #part do
        local t = tonumber(part[i])
        if not t then
          bad_state(key, part[i])
        end
        if t > now - period then
          first, oldest = from + i, t
          break
        end
      end
      from = from + #part
      chunk = chunk * 4
    end
  end
  local live = n - first + 1
  local reset = 0
  if oldest then
    reset = oldest + period - now
  end
  local remaining = math.max(count - live, 0)
  if cost > count then
    return 0, remaining, -1, reset, nil
  end
  if live + cost > count then
    -- cost <= count, so the entry whose departure makes room is live.
    local leave = tonumber(call('LINDEX', key, first + live + cost - count - 2))
    return 0, remaining, leave + period - now, reset, nil
  end
  -- A list takes several commands to write: a function, not a value.
  return 1, remaining - cost, 0, (oldest or now) + period - now, function()
    if first > n then
      if n > 0 then
        call('DEL', key)
      end
    elseif first > 1 then
      call('LTRIM', key, first - 1, -1)
    end
    -- RPUSH in batches: unpacking thousands of values would overflow the
    -- Lua C stack.
    local stamp = fmt('%d', now)
    local left = cost
    while left > 0 do
      local batch = {}
      for i = 1, math.min(left, 1000) do
        batch[i] = stamp
      end
      call('RPUSH', key, unpack(batch))
      left = left - #batch
    end
    -- The entries just pushed live until now + period; counted from the
    -- caller's time, which a stepped-back clock puts before now.
    call('PEXPIRE', key, fmt('%d', expire_ms(now + period - caller)))
  end, 0
end

CHARGE['sliding_log'] = window_charge(ALGS['sliding_log'])
