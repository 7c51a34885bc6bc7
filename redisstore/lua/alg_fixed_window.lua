-- alg_fixed_window.lua: the fixed window, as limit/window.go fixedWindow.
--
-- Counts the tokens taken in the current calendar window: windows start at
-- multiples of period since the Unix epoch, so every gateway and every
-- shard agree on them. The cheapest algorithm and the least exact: count
-- at the end of one window and count again at the start of the next.
--
-- State: one string "<window start ms> <tokens taken>", written with
-- PSETEX. The window start is stored rather than left to the expiry,
-- so a state read after its window reads as empty whatever the clock that
-- expires keys says.

ALGS['fixed_window'] = function(key, now, cost, count, period, burst)
  local stored_ws, stored_used
  local caller = now -- the time asked about, before any standing still
  local stored = call('GET', key)
  if stored then
    local a, b = string.match(stored, '^(%d+) (%d+)$')
    if not a then
      bad_state(key, stored)
    end
    stored_ws, stored_used = tonumber(a), tonumber(b)
    -- A clock that stepped back stands still at the stored window.
    if stored_ws > now then
      now = stored_ws
    end
  end
  local ws = floordiv(now, period) * period
  local used = 0
  if stored_ws == ws then
    used = stored_used
  end
  local reset = ws + period - now
  local remaining = math.max(count - used, 0)
  if cost > count then
    return 0, remaining, -1, reset, nil
  end
  if used + cost > count then
    -- The next window starts empty and cost fits in it.
    return 0, remaining, reset, reset, nil
  end
  used = used + cost
  -- Kept until the window ends, counted from the caller's time: after a
  -- clock stepped back, that is later than reset says.
  return 1, remaining - cost, 0, reset, fmt('%d %d', ws, used), ws + period - caller
end

CHARGE['fixed_window'] = window_charge(ALGS['fixed_window'])
