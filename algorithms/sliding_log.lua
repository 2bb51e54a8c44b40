-- limitkit sliding window log: the Lua twin of slidingLogTake/slidingLogPeek
-- (slidinglog.go). Keep the two in step: the conformance suite compares them
-- decision by decision.
--
-- KEYS[1]  a sorted set: one member per admitted unit, scored with its time
--          in ms (>= 0), plus one bookkeeping member "" scored -n, where n
--          counts the member names handed out. Units get the names n+1,
--          n+2, ...: short, unique, and stored as integers in a listpack.
--          n restarts at 0 whenever the log empties.
-- The body of step(key, now, w, limit, cost, take, refund); see prelude.lua.
--
-- An entry with a time <= now - window has slid out; it is kept one more
-- window for requests that arrive late. Entries later than now (recorded
-- before the clock went back) keep counting until they slide out.

local ZADD_CHUNK = 1000 -- members per ZADD: unpack is limited to ~8000 values

local cutoff = now - w

-- Refund: remove cost entries stamped at, the take's time (which of them
-- does not matter).
if refund then
  local ms = string.format('%d', at)
  local m = redis.call('ZRANGEBYSCORE', key, ms, ms, 'LIMIT', 0, cost)
  for i = 1, #m, ZADD_CHUNK do
    redis.call('ZREM', key, unpack(m, i, math.min(i + ZADD_CHUNK - 1, #m)))
  end
  take = false
end

-- scoreAt returns the score of the member at rank r.
local function scoreAt(r)
  local m = redis.call('ZRANGE', key, r, r, 'WITHSCORES')
  return tonumber(m[2])
end

-- The bookkeeping member sits at rank 0 when present (its score is < 0).
local n = redis.call('ZSCORE', key, '')
local offset = 0
if n then
  n = -tonumber(n)
  offset = 1
else
  n = 0
end

if not take then
  -- Peek: read only. Entries are the members scored >= 0.
  local size = redis.call('ZCOUNT', key, 0, '+inf')
  local live = size
  if cutoff >= 0 then
    live = redis.call('ZCOUNT', key, '(' .. string.format('%d', cutoff), '+inf')
  end
  local remaining = limit - live
  if remaining < 0 then
    remaining = 0
  end
  local allowed, retry, reset = 1, 0, 0
  if live + cost > limit then
    allowed = 0
    retry = scoreAt(offset + size + cost - limit - 1) + w - now
  end
  if live > 0 then
    reset = scoreAt(-1) + w - now
  end
  return {allowed, remaining, retry, reset, now}
end

-- Take: forget entries that slid out a window ago or more (kept until then
-- for requests that arrive late), then (if the limit was lowered) the
-- oldest beyond the limit: only the newest limit entries can ever matter.
if cutoff - w >= 0 then
  redis.call('ZREMRANGEBYSCORE', key, 0, string.format('%d', cutoff - w))
end
local size = redis.call('ZCARD', key) - offset
if size > limit then
  redis.call('ZREMRANGEBYRANK', key, offset, offset + size - limit - 1)
  size = limit
end
local expired = 0
if cutoff >= 0 then
  expired = redis.call('ZCOUNT', key, 0, string.format('%d', cutoff))
end
local live = size - expired

local allowed, retry = 0, 0
if live + cost <= limit then
  allowed = 1
  -- Make room from slid-out entries only (live + cost <= limit).
  local drop = size + cost - limit
  if drop > 0 then
    redis.call('ZREMRANGEBYRANK', key, offset, offset + drop - 1)
    size = size - drop
  end
  if size == 0 then
    n = 0 -- no member name is in use: start again from 1
  end
  local score = string.format('%d', now)
  if cost == 1 then
    -- The common case, without building an argument table.
    redis.call('ZADD', key, score, string.format('%d', n + 1), string.format('%d', -(n + 1)), '')
  else
    local args, i = {}, 0
    for id = n + 1, n + cost do
      args[i + 1] = score
      args[i + 2] = string.format('%d', id)
      i = i + 2
      if i == 2 * ZADD_CHUNK and id < n + cost then
        redis.call('ZADD', key, unpack(args, 1, i))
        i = 0
      end
    end
    args[i + 1] = string.format('%d', -(n + cost))
    args[i + 2] = ''
    redis.call('ZADD', key, unpack(args, 1, i + 2))
  end
  live = live + cost
else
  -- The (live+cost-limit)-th oldest live entry must slide out first.
  retry = scoreAt(offset + size + cost - limit - 1) + w - now
end
local reset = scoreAt(-1) + w - now
-- Keep the key while a late request could still need its entries.
redis.call('PEXPIRE', key, string.format('%d', reset + w + EXPIRY_MARGIN_MS))
return {allowed, limit - live, retry, reset, now}
