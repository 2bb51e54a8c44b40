-- limitkit fixed window: the Lua twin of fixedWindowTake/fixedWindowPeek
-- (fixed_window.go). Keep the two in step: the conformance suite compares
-- them decision by decision.
--
-- State: one integer per window, the units admitted in it, in a key of its
-- own: KEYS[1] itself, the window's key as the caller names it (the
-- library's key, ':' and the window's start in ms, rediswire.StateKey;
-- for a refund the window at names, rediswire.RefundKey; or an exact key,
-- backend.ExactKey), so that the script touches only the keys it is
-- passed. Under server time only the script knows the window: it is
-- passed the library key, which ends in the algorithm's suffix,
-- own_suffix (':fw'), and appends ':' and the window's start itself. The
-- same keys the stores' native path counts in with INCRBY and an
-- expiry (backend/internal/redisengine/native.go): this script serves what that
-- path cannot (server time, replica acknowledgement, a TakeAll mixing
-- algorithms, Peek, give back). Keys of the old format ("start:current" in
-- KEYS[1] itself) are never read again and expire.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.

-- A negative cost is a charge of -cost (fixedWindowCharge): counted
-- whatever is left, never refused.
-- A key's value is epoch * 2^44 + count: a Reset moves it to the next
-- epoch (internal/rediswire/epoch.go); only the count is read here.
local function count_of(v)
  if v > 0 then
    return v % 17592186044416
  end
  return v
end

local charge = cost < 0
if charge then
  cost = -cost
end
local ws = now - now % w
local wk, library = key, string.sub(key, -#own_suffix) == own_suffix
if library then
  wk = key .. ':' .. string.format('%d', ws)
end

-- Refund: give cost back to the window the take counted it in (at, the
-- fifth value of its reply). Give back by time (a negative at): to the
-- window holding now. Never below zero.
if refund then
  if at < 0 then
    at = ws
  end
  local rk = wk
  if library then
    rk = key .. ':' .. string.format('%d', at)
  end
  local held = tonumber(redis.call('GET', rk) or '0')
  if held ~= nil then
    held = count_of(held)
  end
  if held == nil then
    return redis.error_reply('limitkit: unreadable fixed_window count')
  end
  if held > 0 then
    redis.call('DECRBY', rk, math.min(cost, held))
  end
  take = false
end

local current = tonumber(redis.call('GET', wk) or '0')
if current == nil then
  return redis.error_reply('limitkit: unreadable fixed_window count')
end
current = count_of(current)
if current < 0 then
  current = 0
end
local finish = ws + w - now
if charge then
  local after = current + cost
  if take then
    after = math.max(count_of(redis.call('INCRBY', wk, cost)), after)
    redis.call('PEXPIRE', wk, key_ttl_px(finish, w))
  end
  return {1, math.max(limit - after, 0), 0, finish, ws}
end
if cost > limit - current then
  local remaining = limit - current
  if remaining < 0 then
    remaining = 0
  end
  return {0, remaining, finish, finish, ws}
end
if not take then
  local reset = 0
  if current > 0 then
    reset = finish
  end
  return {1, limit - current, 0, reset, ws}
end
-- A count below zero (give backs beyond what was taken) is read as zero.
current = math.max(count_of(redis.call('INCRBY', wk, cost)), current + cost)
redis.call('PEXPIRE', wk, key_ttl_px(finish, w))
return {1, limit - current, 0, finish, ws}
