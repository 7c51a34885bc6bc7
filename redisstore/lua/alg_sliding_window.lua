-- alg_sliding_window.lua: the sliding window counter, as limit/window.go
-- slidingWindow.
--
-- Estimates the tokens taken in the last period from two calendar-window
-- counters: the current window's count plus the previous window's count
-- weighted by the share of it the rolling window still overlaps, rounded
-- up. All of it in integers: the weight is prev * (period - elapsed), and
-- only its ceiling over period is compared, so the estimate agrees with Go
-- exactly.
--
-- State: 24 bytes, three little-endian doubles (struct '<ddd'), each an
-- integer below 2^53: the window's start in ms, the tokens taken in it and
-- the tokens taken in the window before. Binary, as the token bucket's
-- (alg_token_bucket.lua): unpacking three numbers costs a fraction of
-- matching a pattern and converting three strings, and packing a fraction
-- of formatting them, which is most of what this script did besides its
-- three commands (docs/envoy.md, issue 20). The key ends in ':b'
-- (redisstore/key.go), so a gateway of a version that kept the state as
-- text "<start> <this> <before>" never reads this format, nor this one the
-- text.

-- The state is written to expire when it stops weighing, at its window's
-- start plus two periods, and only ever at that instant (take.lua writes
-- it with PXAT; a give-back keeps its TTL). So when take.lua passes no now
-- (one limit under Redis's clock, what rls sends), the key's PTTL tells
-- Redis's clock: a PTTL is cheaper than TIME, whose reply is a table of two
-- strings to convert. A PTTL out of (0, 2 periods] (no expiry, one that
-- passed during the call, or a clock stepped back) is not trusted: TIME
-- then. The time used is the seventh value returned, and the eighth is
-- true when the key's expiry, told by its PTTL, is already the one to
-- write: the window has not moved, so take.lua writes with KEEPTTL.
ALGS['sliding_window'] = function(key, now, cost, count, period, burst)
  local stored_ws, stored_cur, stored_prev, keep
  local stored = call('GET', key)
  if stored then
    if #stored ~= 24 then
      bad_state(key, stored)
    end
    stored_ws, stored_cur, stored_prev = sunpack('<ddd', stored)
    if not (stored_ws >= 0 and stored_ws < 2^53 and stored_ws % 1 == 0 and
            stored_cur >= 0 and stored_cur < 2^53 and stored_cur % 1 == 0 and
            stored_prev >= 0 and stored_prev < 2^53 and stored_prev % 1 == 0) then
      bad_state(key, stored)
    end
    if not now then
      local pttl = call('PTTL', key)
      if pttl > 0 and pttl <= 2 * period then
        now = stored_ws + 2 * period - pttl
        keep = true
      end
    end
  end
  if not now then
    now = redis_now()
  end
  local caller = now -- the time asked about, before any standing still
  -- A clock that stepped back stands still at the stored window.
  if stored and stored_ws > now then
    now = stored_ws
  end
  local ws = floordiv(now, period) * period
  local cur, prev = 0, 0
  if stored_ws == ws then
    cur, prev = stored_cur, stored_prev
  elseif stored_ws == ws - period then
    prev = stored_cur
  end
  local e = now - ws
  local used = cur + ceildiv(prev * (period - e), period)
  local reset = ws + period - now
  local remaining = math.max(count - used, 0)
  if cost > count then
    return 0, remaining, -1, reset, nil
  end
  if used + cost > count then
    local retry
    if cur + cost > count then
      -- The current window alone is too full: wait into the next one, where
      -- this window's count is the weighted one, until
      -- cur * (period - e') / period <= count - cost. cur > 0 here.
      retry = reset + period - floordiv((count - cost) * period, cur)
    else
      -- Only the previous window's share is in the way (prev > 0): wait
      -- until prev * (period - e') / period <= count - cur - cost.
      retry = period - floordiv((count - cur - cost) * period, prev) - e
    end
    return 0, remaining, retry, reset, nil
  end
  cur = cur + cost
  -- This window's count weighs on the next one too: keep it until then,
  -- counted from the caller's time (see alg_fixed_window.lua).
  return 1, remaining - cost, 0, reset, spack('<ddd', ws, cur, prev), ws + 2 * period - caller, caller, keep and ws == stored_ws
end

CHARGE['sliding_window'] = window_charge(ALGS['sliding_window'])
