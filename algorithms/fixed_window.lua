-- limitkit fixed window: the Lua twin of fixedWindowTake/fixedWindowPeek
-- (fixed_window.go). Keep the two in step: the conformance suite compares
-- them decision by decision.
--
-- KEYS[1]  the key's state: the string "start:current" (window start in ms,
--          units admitted in it), absent when the key is new.
-- The body of step(key, now, w, limit, cost, take, refund); see prelude.lua.

local start, current = 0, 0
local v = redis.call('GET', key)
if v then
  local a, b = string.match(v, '^(%d+):(%d+)$')
  if not a then
    return redis.error_reply('limitkit: unreadable fixed_window state')
  end
  start, current = tonumber(a), tonumber(b)
end

-- Refund: give cost back to the window the take counted it in (at, the
-- fifth value of its reply), if that is still the recorded one.
-- Give back by time (a negative at): to the window holding now, as a
-- refund of a take made now would.
if refund and at < 0 then
  at = now - now % w
end
if refund then
  if v and start == at and current > 0 then
    current = current - math.min(cost, current)
    redis.call('SET', key, string.format('%d:%d', start, current), 'KEEPTTL')
  end
  take = false
end

-- Roll to the window holding now (windowStart: the recorded window while
-- now is inside it, else the aligned one); a time in an earlier window (the
-- clock went back) counts against the recorded one.
local ws = window_start(start, now, w)
if ws > start then
  start, current = ws, 0
end

local finish = start + w - now
if cost > limit - current then
  local remaining = limit - current
  if remaining < 0 then
    remaining = 0
  end
  -- A denial never follows a roll (a rolled window is empty and cost <=
  -- limit), so there is nothing to write.
  return {0, remaining, finish, finish, start}
end
if not take then
  local reset = 0
  if current > 0 then
    reset = finish
  end
  return {1, limit - current, 0, reset, start}
end
current = current + cost
redis.call('SET', key, string.format('%d:%d', start, current),
  'PX', key_ttl_px(finish, w))
return {1, limit - current, 0, finish, start}
