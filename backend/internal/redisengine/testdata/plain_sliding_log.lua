-- limitkit sliding window log: the Lua twin of slidingLogTake/slidingLogPeek
-- (algorithms/sliding_log.go). Keep the two in step: the conformance suite compares them
-- decision by decision.
--
-- KEYS[1]  a sorted set: one member per admitted unit, scored with its time
--          in ms (>= 0), plus one bookkeeping member "" scored -n, where n
--          is at least every unit's name. Units are named n+1, n+2, ...
--          when added: short, unique, and stored as integers in a
--          listpack. n restarts at 0 whenever the log empties (and a small
--          log, read whole, sets it to its greatest name). Every write
--          sets "" and nothing removes it, so it is there whenever the key
--          is: it is rank 0, and the units are ranks 1 to ZCARD-1, oldest
--          first.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.
--
-- An entry with a time <= now - window has slid out; it is kept one more
-- window for requests that arrive late. Entries later than now (recorded
-- before the clock went back) keep counting until they slide out.
--
-- Speed. Besides the calls themselves, the server's time goes to numbers
-- crossing between Lua and Redis as text: each number sent is formatted
-- and parsed, and each score replied (ZSCORE, ZRANGE ... WITHSCORES) is
-- formatted by Redis and parsed back, several times the cost of an integer
-- reply (ZCARD, ZCOUNT, ZREM...). So a step sends and reads few numbers:
--   * a small log (limit <= SMALL) is read whole, its units without "", in
--     one ZRANGE of constant ranks, and the step decides from it: a denial
--     is that ZRANGE and PEXPIRE;
--   * a larger one is counted: ZCARD, then one ZCOUNT of the units in
--     (now-window, now], which is all of them in the common case: nothing
--     slid out (nothing to forget) and nothing later than now (the newest
--     unit is then the one a take adds). A take there is ZCARD, ZCOUNT,
--     ZADD INCR of "" (its reply, without the sign, is the new name),
--     ZADD, PEXPIRE. Times are read only to report a denial.

local ZADD_CHUNK = 1000 -- members per ZADD: unpack is limited to ~8000 values
local SMALL, SMALL_LAST = 3, '7' -- logs at a limit up to SMALL are read whole when they hold up to 2*SMALL units (two windows): ranks 1 to 2*SMALL+1
local NEAR = 16 -- a denial reads ranks r..newest in one ZRANGE when fewer

local fmt = string.format
local cutoff = now - w

-- Refund: remove cost entries stamped at, the take's time (which of them
-- does not matter).
if refund then
  local ms = fmt('%d', at)
  local m = redis.call('ZRANGEBYSCORE', key, ms, ms, 'LIMIT', 0, cost)
  for i = 1, #m, ZADD_CHUNK do
    redis.call('ZREM', key, unpack(m, i, math.min(i + ZADD_CHUNK - 1, #m)))
  end
  take = false
end

-- What a take decides, then writes at the end: allowed; the live units
-- before it; retry and reset (w: the newest unit is the one it adds); the
-- units kept, and n, at least every name in use (nil: "" holds it, and
-- ZADD INCR reads it).
local allowed, live, retry, reset, kept, n = 0, 0, 0, w, 0, 0
local now_s

local m, size
if limit <= SMALL then
  -- The units, all of them unless a higher limit left more than two
  -- windows at SMALL: m holds each one's name and time, oldest first.
  m = redis.call('ZRANGE', key, '1', SMALL_LAST, 'WITHSCORES')
  size = #m / 2
  if size > 2 * SMALL then
    m = nil
  end
end

if m then
  -- t[i]: the i-th oldest unit's time.
  local t = {}
  for i = 1, size do
    t[i] = tonumber(m[2 * i])
  end
  if not take then
    local first = 1 -- the oldest live unit
    if cutoff >= 0 then
      while first <= size and t[first] <= cutoff do
        first = first + 1
      end
    end
    live = size - first + 1
    local remaining = math.max(limit - live, 0)
    allowed, reset = 1, 0
    if live + cost > limit then
      allowed = 0
      retry = t[size + cost - limit] + w - now
    end
    if live > 0 then
      reset = t[size] + w - now
    end
    return {allowed, remaining, retry, reset, now}
  end
  -- Take: units first..size are kept. Forget those that slid out a window
  -- ago or more, by time only: a request at another limit may still count
  -- the others.
  local first = 1
  if cutoff - w >= 0 then
    while first <= size and t[first] <= cutoff - w do
      first = first + 1
    end
  end
  local fresh = first -- the oldest live unit
  while fresh <= size and t[fresh] <= cutoff do
    fresh = fresh + 1
  end
  live = size - fresh + 1
  kept = size - first + 1
  local newest = 0
  if kept > 0 then
    newest = t[size]
  end
  if live + cost <= limit then
    allowed = 1
    -- The new names follow the greatest one kept (a small log does not
    -- read "", which need only be at least every name in use).
    for i = first, size do
      local id = tonumber(m[2 * i - 1])
      if id > n then
        n = id
      end
    end
    if kept > 0 and newest > now then
      reset = newest + w - now
    end
  else
    -- The (live+cost-limit)-th oldest live unit must slide out first.
    retry = t[first - 1 + kept + cost - limit] + w - now
    reset = newest + w - now
  end
  if first > 1 then
    redis.call('ZREMRANGEBYRANK', key, '1', fmt('%d', first - 1))
  end
else
  -- denial_times returns a denial's retry and reset in a log of size
  -- units: the (live+cost-limit)-th oldest live unit, which is the
  -- (size+cost-limit)-th oldest, must slide out first, and the newest sets
  -- the reset. One ZRANGE reads both when they are close.
  local function denial_times(size)
    local r = size + cost - limit
    if size - r < NEAR then
      local s = redis.call('ZRANGE', key, fmt('%d', r), '-1', 'WITHSCORES')
      return tonumber(s[2]) + w - now, tonumber(s[#s]) + w - now
    end
    local s = redis.call('ZRANGE', key, fmt('%d', r), fmt('%d', r), 'WITHSCORES')
    local retry = tonumber(s[2]) + w - now
    s = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    return retry, tonumber(s[2]) + w - now
  end

  -- Count. size: the units.
  size = redis.call('ZCARD', key)
  if size > 0 then
    size = size - 1
  end
  if not take then
    live = size
    if size > 0 and cutoff >= 0 then
      live = redis.call('ZCOUNT', key, fmt('(%d', cutoff), '+inf')
    end
    local remaining = math.max(limit - live, 0)
    allowed, reset = 1, 0
    if live + cost > limit then
      allowed = 0
      retry, reset = denial_times(size)
    elseif live > 0 then
      local s = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
      reset = tonumber(s[2]) + w - now
    end
    return {allowed, remaining, retry, reset, now}
  end
  -- Take. Split the units into expired (<= cutoff: slid out), in the
  -- window, and later than now. One count answers in the common case, all
  -- in the window; otherwise forget the units that slid out a window ago
  -- or more (kept until then for requests that arrive late) and count
  -- again.
  local expired, later = 0, 0
  now_s = fmt('%d', now)
  if size > 0 then
    local lo, other = '-inf', size + 1 -- "" is in (-inf, now] too
    if cutoff >= 0 then
      lo, other = fmt('(%d', cutoff), size
    end
    other = other - redis.call('ZCOUNT', key, lo, now_s)
    if other > 0 and cutoff - w >= 0 then
      local forgotten = redis.call('ZREMRANGEBYSCORE', key, '0', fmt('%d', cutoff - w))
      size = size - forgotten
      other = other - forgotten
    end
    if other > 0 then
      later = redis.call('ZCOUNT', key, '(' .. now_s, '+inf')
      expired = other - later
    end
  end
  live = size - expired
  if live + cost <= limit then
    allowed = 1
    kept, n = size, nil
    if later > 0 then
      local s = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
      reset = tonumber(s[2]) + w - now
    end
  else
    retry, reset = denial_times(size)
  end
end

if allowed == 1 then
  -- Record cost units at now named n+1..n+cost, and "" as -(n+cost).
  local score = now_s or fmt('%d', now)
  if kept == 0 then
    n = 0 -- no member name is in use: start again from 1
  end
  if cost == 1 then
    -- The common case, without an argument table.
    if n then
      local id = fmt('%d', n + 1)
      redis.call('ZADD', key, score, id, '-' .. id, '')
    else
      -- The name is ""'s new score without its sign: no number formatted.
      local id = string.sub(redis.call('ZADD', key, 'INCR', '-1', ''), 2)
      redis.call('ZADD', key, score, id)
    end
  else
    local args, i = {}, 0
    if n then
      args[1], args[2], i = fmt('%d', -(n + cost)), '', 2
    else
      n = -tonumber(redis.call('ZADD', key, 'INCR', fmt('%d', -cost), '')) - cost
    end
    for id = n + 1, n + cost do
      args[i + 1] = score
      args[i + 2] = fmt('%d', id)
      i = i + 2
      if i == 2 * ZADD_CHUNK and id < n + cost then
        redis.call('ZADD', key, unpack(args, 1, i))
        i = 0
      end
    end
    if i > 0 then
      redis.call('ZADD', key, unpack(args, 1, i))
    end
  end
  live = live + cost
end
-- Keep the key while a late request could still need its units.
redis.call('PEXPIRE', key, fmt('%d', reset + w + EXPIRY_MARGIN_MS))
return {allowed, math.max(limit - live, 0), retry, reset, now}
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
