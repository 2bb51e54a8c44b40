-- limitkit two-level limiting: the Lua twin of twoLevelTake/twoLevelPeek
-- (algorithms/two_level.go, which states the semantics). Keep the two in step: the
-- conformance suite compares them decision by decision.
--
-- KEYS[1]  one string per key, absent when the key is new:
--          light: 42 bytes, six 7-byte numbers (loglib.lua's slots):
--                 window start, units in it, units in the window before,
--                 newest time charged to each of the two windows, units
--                 in the window before those (older);
--          heavy: "H", the floor (7 bytes: requests stamped before it are
--                 charged to it) and a compact log (loglib.lua);
--          both fit the first read of loglib's log_first.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.

local log_count = count
local LIGHT_LEN = 7 * SLOT
local LIGHT_CHARGE = 4503599627370496 -- 2^52: tags a light key's charge
local LIGHT_PREV = 2251799813685248 -- 2^51: marks a charge to the window before
local COUNT_MAX = 65535 -- the most older holds (Go packs it in 16 bits)

local start, cur, prev, ncur, nprev, older, older_end = 0, 0, 0, 0, 0, 0, 0
local L = nil -- the log, when the key is heavy; start is then the floor
local first = log_first(key, 1 + SLOT)
if #first == LIGHT_LEN or #first == 6 * SLOT or #first == 5 * SLOT then
  start, cur, prev, ncur, nprev = dec(first, 0), dec(first, 1), dec(first, 2), dec(first, 3), dec(first, 4)
  if #first >= 6 * SLOT then
    older = dec(first, 5)
  end
  if #first == LIGHT_LEN then
    older_end = dec(first, 6)
  end
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
  if cur == 0 then
    ncur = start
  end
  if prev == 0 then
    nprev = start
  end
  if older == 0 then
    return enc(start) .. enc(cur) .. enc(prev) .. enc(ncur) .. enc(nprev) .. enc(0)
  end
  return enc(start) .. enc(cur) .. enc(prev) .. enc(ncur) .. enc(nprev) .. enc(older) .. enc(older_end)
end

local function older_stamp()
  return math.max(older_end, start - w)
end

-- write stores a light key, kept while a late request could still need it.
local function write(reset)
  redis.call('SET', key, light_state(), 'PX', string.format('%d', reset + w + EXPIRY_MARGIN_MS))
end

-- Refund: from the log when at is a time, from a light key's window
-- counter when it is a tagged window start (LIGHT_PREV: the window
-- before). A key that switched between light and heavy since keeps the
-- units.
if refund then
  if at < LIGHT_CHARGE then
    if L and log_remove(L, at, cost) then
      L = log_open(key, L.prefix, log_first(key, 1 + SLOT))
      if L.n == 0 then
        L = nil
      end
    end
  elseif not L and (cur > 0 or prev > 0) then
    local win = at - LIGHT_CHARGE
    if win >= LIGHT_PREV then
      if start == win - LIGHT_PREV then
        prev = prev - math.min(cost, prev)
      end
    elseif start == win then
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
  -- Nothing in the aligned window of its time or the one before: light,
  -- the log's units of the window before those counted as older.
  local e = math.max(now, start)
  if L.newest >= e - e % w - w then
    return heavy_step(start)
  end
  local ws = e - e % w
  local o = L.n - log_count(L, ws - 2 * w, 0)
  if o > COUNT_MAX then
    return heavy_step(start)
  end
  L = nil
  start, cur, prev, older, older_end = ws, 0, 0, o, ws - w
end

-- Light: roll to the window holding now (windowStart); each window's units
-- go where their newest time falls, and are forgotten two windows after.
-- A request before the current window leaves it alone.
local ws = window_start(start, now, w)
if ws > start then
  local c, p, o, nc, np, oe = 0, 0, 0, 0, 0, 0
  local function put(units, newest)
    if units == 0 then
      return
    end
    if newest >= ws then
      if newest > nc then
        nc = newest
      end
      c = c + units
    elseif newest > ws - w then
      if p == 0 or newest > np then
        np = newest
      end
      p = p + units
    elseif newest > ws - 2 * w then
      o = o + units
      if newest > oe then
        oe = newest
      end
    end
  end
  put(older, older_stamp())
  put(prev, nprev)
  put(cur, ncur)
  start, cur, prev, older, ncur, nprev, older_end = ws, c, p, o, nc, np, oe
end

-- The screen: a request in the current window when each of the two
-- windows holds at most h = floor(limit/2) with it; a late one when the
-- three together hold at most the limit with it.
local admits
if now >= start then
  local h = math.floor(limit / 2)
  admits = prev <= h and cur + cost <= h and
    (older == 0 or older_stamp() <= now - w or older + prev + cur + cost <= limit)
else
  admits = older + prev + cur + cost <= limit
end

if admits then
  local charge = LIGHT_CHARGE + start
  if take then
    if now >= start then
      if cur == 0 or now > ncur then
        ncur = now
      end
      cur = cur + cost
    else
      local e = math.max(now, older_stamp())
      if prev == 0 or e > nprev then
        nprev = e
      end
      prev = prev + cost
      charge = charge + LIGHT_PREV
    end
  end
  -- Report as the seeded log would.
  local live, newest = 0, 0
  if older > 0 then
    newest = older_stamp()
    if newest > now - w then
      live = live + older
    end
  end
  if prev > 0 then
    newest = nprev
    if newest > now - w then
      live = live + prev
    end
  end
  if cur > 0 then
    newest = ncur
    if newest > now - w then
      live = live + cur
    end
  end
  local reset = 0
  if live > 0 then
    reset = newest + w - now
  end
  if take then
    write(reset)
  end
  return {1, math.max(limit - live, 0), 0, reset, charge}
end

-- The screen cannot admit: the log decides, seeded with each window's
-- units at an upper bound of their times (the window's newest, older's
-- end). The key is heavy from now on, admitted or not; its floor is a
-- window before this window's start, from where the seeds decide exactly.
local seeds = ''
if older > 0 then
  seeds = string.rep(enc(older_stamp()), older)
end
if prev > 0 then
  seeds = seeds .. string.rep(enc(nprev), prev)
end
if cur > 0 then
  seeds = seeds .. string.rep(enc(ncur), cur)
end
local floor = math.max(start - w, 0)
L = log_open(nil, 'H' .. enc(floor), nil, seeds)
L.key = key
return heavy_step(floor)
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
