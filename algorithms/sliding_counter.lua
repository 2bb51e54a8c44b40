-- limitkit sliding window counter: the Lua twin of slidingCounterTake/
-- slidingCounterPeek (sliding_counter.go). Keep the two in step: the
-- conformance suite compares them decision by decision.
--
-- KEYS[1]  the key's state: the string "start:current:previous" (current
--          window start in ms, units in it, units in the window before),
--          absent when the key is new.
-- The body of step(key, now, w, limit, cost, take, refund); see prelude.lua.
--
-- floor(a/b) of integers below 2^53 is exact in a Lua number; the one
-- product that could pass 2^53 (room * 2^16 in earliest) is done by binary
-- long division.

local S = 65536 -- weightScale

-- ceildiv returns ceil(a/b) for 0 <= a, 0 < b, a+b < 2^53.
local function ceildiv(a, b)
  return math.floor((a + b - 1) / b)
end

-- weighted returns ceil(previous * ceil((w-e)*S/w) / S).
local function weighted(previous, e)
  if previous == 0 then
    return 0
  end
  local wq = ceildiv((w - e) * S, w)
  return math.floor(previous / S) * wq + ceildiv((previous % S) * wq, S)
end

-- earliest returns the smallest elapsed time in [0, w] at which
-- weighted(count, e) <= room (0 <= room), or w when none inside the window.
local function earliest(count, room)
  if count <= room then
    return 0
  end
  -- q = floor(room * S / count), with room < count <= 2^53: 16 steps of
  -- long division keep every value an integer below 2^54 (and even when
  -- above 2^53), so exact.
  local q, r = 0, room
  for _ = 1, 16 do
    r = r * 2
    q = q * 2
    if r >= count then
      r = r - count
      q = q + 1
    end
  end
  return w - math.floor(q * w / S)
end

-- A negative cost is a charge of -cost (slidingCounterCharge): counted
-- whatever is left, never refused.
local charge = cost < 0
if charge then
  cost = -cost
end
local start, current, previous = 0, 0, 0
local v = redis.call('GET', key)
if v then
  local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not a then
    return redis.error_reply('limitkit: unreadable sliding_counter state')
  end
  start, current, previous = tonumber(a), tonumber(b), tonumber(c)
end

-- Refund: give cost back to the window the take counted it in (at, the
-- fifth value of its reply): the current one, or the previous one if the
-- window has rolled once since.
-- Give back by time (a negative at): to the window holding now, as a
-- refund of a take made now would.
if refund and at < 0 then
  at = now - now % w
end
if refund then
  if v and start == at and current > 0 then
    current = current - math.min(cost, current)
    redis.call('SET', key, string.format('%d:%d:%d', start, current, previous), 'KEEPTTL')
  elseif v and start == at + w and previous > 0 then
    previous = previous - math.min(cost, previous)
    redis.call('SET', key, string.format('%d:%d:%d', start, current, previous), 'KEEPTTL')
  end
  take = false
end

-- Roll to the window holding now (windowStart: the recorded window while
-- now is inside it, else the aligned one). Before the recorded window (the clock went
-- back) nothing moves and the elapsed time is 0: the previous window counts
-- in full.
local changed = false
local e = 0
local ws = window_start(start, now, w)
if ws >= start then
  if ws > start then
    if ws - start <= w then
      previous = current
    else
      previous = 0
    end
    current, start, changed = 0, ws, true
  end
  e = now - ws
end

if charge then
  current = current + cost
  changed = true
end
local room = limit - weighted(previous, e) - current
local allowed, retry = 0, 0
if charge then
  allowed = 1
elseif cost <= room then
  allowed = 1
  if take then
    current = current + cost
    room = room - cost
    changed = true
  end
else
  -- Later in this window the previous one weighs less; failing that, in
  -- the next window the current one becomes the weighted previous.
  local wait
  local r2 = limit - current - cost
  local at = w
  if r2 >= 0 then
    at = earliest(previous, r2)
  end
  if at < w then
    wait = at - e
  else
    wait = w - e + earliest(current, limit - cost)
  end
  retry = start + e + wait - now
end
if room < 0 then
  room = 0
end
local reset = 0
if current > 0 then
  reset = start + 2 * w - now
elseif previous > 0 then
  reset = start + w - now
end
-- A denial that rolled the window writes too: the Go step keeps the roll,
-- and a later request from before it (the clock going back) must see it.
if take and changed then
  redis.call('SET', key, string.format('%d:%d:%d', start, current, previous),
    'PX', key_ttl_px(reset, w))
end
return {allowed, room, retry, reset, start}
