-- limitkit two-level limiting: the Lua twin of twoLevelTake/twoLevelPeek
-- (twolevel.go, which states the semantics). Keep the two in step: the
-- conformance suite compares them decision by decision.
--
-- KEYS[1]  one string per key, absent when the key is new:
--          light: 35 bytes, five 7-byte numbers (loglib.lua's slots):
--                 window start, units in it, units in the window before,
--                 newest time charged to each of the two windows;
--          heavy: "H", the floor (7 bytes: requests stamped before it are
--                 charged to it) and a compact log (loglib.lua);
--          both fit the first read of loglib's log_first.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.

local LIGHT_LEN = 5 * SLOT
local LIGHT_CHARGE = 4503599627370496 -- 2^52: tags a light key's charge

local start, cur, prev, ncur, nprev = 0, 0, 0, 0, 0
local L = nil -- the log, when the key is heavy; start is then the floor
local first = log_first(key, 1 + SLOT)
if #first == LIGHT_LEN then
  start, cur, prev, ncur, nprev = dec(first, 0), dec(first, 1), dec(first, 2), dec(first, 3), dec(first, 4)
elseif #first >= 1 + SLOT + HDR and string.sub(first, 1, 1) == 'H' then
  start = dec(string.sub(first, 2, 1 + SLOT), 0)
  L = log_open(key, string.sub(first, 1, 1 + SLOT), first)
  if L.n == 0 then
    L = nil -- emptied by refunds: a light key whose window starts at the floor
  end
elseif #first > 0 then
  return redis.error_reply('limitkit: unreadable two_level state')
end

local function light_state()
  return enc(start) .. enc(cur) .. enc(prev) .. enc(ncur) .. enc(nprev)
end

-- write stores a light key, kept while a late request could still need it.
local function write(reset)
  redis.call('SET', key, light_state(), 'PX', string.format('%d', reset + w + EXPIRY_MARGIN_MS))
end

-- Refund: from the log when at is a time, from a light key's window
-- counter when it is a tagged window start. A key that switched between
-- light and heavy since keeps the units.
if refund then
  if at < LIGHT_CHARGE then
    if L and log_remove(L, at, cost) then
      L = log_open(key, L.prefix, log_first(key, 1 + SLOT))
      if L.n == 0 then
        L = nil
      end
    end
  elseif #first == LIGHT_LEN and (cur > 0 or prev > 0) then
    local win = at - LIGHT_CHARGE
    if start == win then
      cur = cur - math.min(cost, cur)
    elseif start == win + w then
      prev = prev - math.min(cost, prev)
    end
    redis.call('SET', key, light_state(), 'KEEPTTL')
  end
  take = false
end

-- heavy_step decides on log L at e, the request's time but no earlier than
-- the floor, and reports the times from now. A take writes the log.
local function heavy_step(floor)
  local e = math.max(now, floor)
  local allowed, remaining, retry, reset
  if take then
    allowed, remaining, retry, reset = log_take(L, e, w, limit, cost, w + EXPIRY_MARGIN_MS)
  else
    allowed, remaining, retry, reset = log_peek(L, e, w, limit, cost)
  end
  if allowed == 0 then
    retry = retry + e - now
  end
  if reset > 0 then
    reset = reset + e - now
  end
  return {allowed, remaining, retry, reset, e}
end

if L then
  -- Nothing in the aligned window of its time or the one before: light.
  local e = math.max(now, start)
  if L.newest < e - e % w - w then
    L = nil
    start, cur, prev = 0, 0, 0
  else
    return heavy_step(start)
  end
end

-- Light: roll to the window holding now (windowStart); a request before
-- the current window is charged to its start.
local ws = window_start(start, now, w)
if ws > start then
  if ws - start <= w and cur > 0 then
    prev, nprev = cur, math.min(ncur, ws - 1)
  else
    prev = 0
  end
  cur, start = 0, ws
end

local h = math.floor(limit / 2)
if prev <= h and cur + cost <= h then
  -- The screen admits: at most h units in each of the two windows.
  if take then
    local charged = math.max(now, start)
    if cur == 0 or charged > ncur then
      ncur = charged
    end
    cur = cur + cost
  end
  local live_prev = 0
  if prev > 0 and nprev > now - w then
    live_prev = prev
  end
  local reset = 0
  if cur > 0 then
    reset = ncur + w - now
  elseif live_prev > 0 then
    reset = nprev + w - now
  end
  if take then
    write(reset)
  end
  return {1, limit - cur - live_prev, 0, reset, LIGHT_CHARGE + start}
end

-- The screen cannot admit: the log decides, seeded with each window's
-- units at that window's newest time (keeping the newest limit). The key
-- is heavy from now on, admitted or not; its floor is this window's start.
local c = math.min(cur, limit)
local p = math.min(prev, limit - c)
local seeds = ''
if p > 0 then
  seeds = string.rep(enc(nprev), p)
end
if c > 0 then
  seeds = seeds .. string.rep(enc(ncur), c)
end
L = log_open(nil, 'H' .. enc(start), nil, seeds)
L.key = key
return heavy_step(start)
end
-- One request: KEYS[1] the state; ARGV[1] now in ms since the Unix epoch
-- (negative: read the server's TIME); ARGV[2] window in ms; ARGV[3] limit;
-- ARGV[4] cost; ARGV[5] "1" take, "0" peek, "2" refund; ARGV[6] (refund
-- only) the take's at. Reply: the step's five integers.
local now = tonumber(ARGV[1])
if now < 0 then
  now = server_now()
end
return step(KEYS[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  ARGV[5] == '1', ARGV[5] == '2', tonumber(ARGV[6]))
