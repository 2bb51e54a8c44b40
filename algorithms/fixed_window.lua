-- limitkit fixed window: the Lua twin of fixedWindowTake/fixedWindowPeek
-- (fixedwindow.go). Keep the two in step: the conformance suite compares
-- them decision by decision.
--
-- KEYS[1]  the key's state: the string "start:current" (window start in ms,
--          units admitted in it), absent when the key is new.
-- ARGV[1]  now in ms since the Unix epoch; negative: read the server's TIME
-- ARGV[2]  window in ms        ARGV[3]  limit
-- ARGV[4]  cost                ARGV[5]  "1" take, "0" peek (peek never writes,
--                                       so it runs under EVALSHA_RO)
-- Returns {allowed (0/1), remaining, retry_after_ms, reset_after_ms}.
--
-- Every value stays an integer below 2^53, exact in a Lua number; numbers
-- sent to Redis are formatted with %d, never tostring (%.14g).

local EXPIRY_MARGIN_MS = 1000

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local w = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local take = ARGV[5] == '1'

local start, current = 0, 0
local v = redis.call('GET', key)
if v then
  local a, b = string.match(v, '^(%d+):(%d+)$')
  if not a then
    return redis.error_reply('limitkit: unreadable fixed_window state')
  end
  start, current = tonumber(a), tonumber(b)
end

-- Roll to the window holding now (windowStart: the recorded window while
-- now is inside it, else the aligned one); a time in an earlier window (the
-- clock went back) counts against the recorded one.
local ws = start
if start > now or now - start >= w then
  ws = now - now % w
end
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
  return {0, remaining, finish, finish}
end
if not take then
  local reset = 0
  if current > 0 then
    reset = finish
  end
  return {1, limit - current, 0, reset}
end
current = current + cost
redis.call('SET', key, string.format('%d:%d', start, current),
  'PX', string.format('%d', finish + EXPIRY_MARGIN_MS))
return {1, limit - current, 0, finish}
