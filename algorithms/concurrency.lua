-- limitkit concurrency leases: the Lua twin of concurrencyTake, slidingLogPeek,
-- concurrencyRelease and concurrencyRenew (concurrency.go). Keep them in
-- step: the conformance suite compares them decision by decision.
--
-- KEYS[1]  a sorted set: one member per held unit, scored with its lease's
--          id (>= 1, in 1/1000 ms), named id (the first unit) or id:j (the
--          j-th), plus one bookkeeping member "" scored -n, n the last id
--          issued. "" is rank 0; the units are ranks 1 to ZCARD-1, oldest
--          first.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua. Modes: take (acquire), refund (release the lease at; the
-- fifth value of the reply is 1 when it was held, else 0), both (renew the
-- lease at), neither (peek).
--
-- Ids count 1/1000 ms (tick per ms): a lease's id is max(now * tick, last
-- id + 1). A unit stamped id has expired at now when id <= (now - w) * tick.
-- Times replied are whole ms, rounded up (after). A take or renewal forgets
-- expired units at once (nothing late can need them).

local fmt = string.format
local tick = 1000
local cutoff = (now - w) * tick

-- Whole ms from now until the unit stamped id (> cutoff) expires, rounded
-- up; integer steps only, exact below 2^53.
local function after(id)
  local d = id - cutoff + tick - 1
  return (d - d % tick) / tick
end

-- The units, and those not expired. Scores are >= 1, so a bound below 0
-- leaves "" out.
local function count()
  local size = redis.call('ZCARD', key)
  if size == 0 then
    return 0, 0
  end
  size = size - 1
  local live = size
  if size > 0 and cutoff >= 0 then
    live = redis.call('ZCOUNT', key, fmt('(%d', cutoff), '+inf')
  end
  return size, live
end

-- A score as a number. tonumber reads what Redis replies; the fallback
-- reads a round score in the form "1e+9" (Redis 7.2+ and miniredis reply
-- so), which miniredis's Lua (gopher-lua) tonumber refuses.
local function num(s)
  local n = tonumber(s)
  if n == nil then
    local m, e = string.match(s, '^(-?%d+)e%+(%d+)$')
    n = tonumber(m) * 10 ^ tonumber(e)
  end
  return n
end

-- The stamp of the unit of rank r (1 the oldest, -1 the newest).
local function stamp(r)
  local s = redis.call('ZRANGE', key, r, r, 'WITHSCORES')
  return num(s[2])
end

-- A peek's outcome, its fifth value v.
local function peek(v)
  local size, live = count()
  local allowed, retry, reset = 1, 0, 0
  if live + cost > limit then
    allowed = 0
    retry = after(stamp(fmt('%d', size + cost - limit)))
  end
  if live > 0 then
    reset = after(stamp('-1'))
  end
  return {allowed, math.max(limit - live, 0), retry, reset, v}
end

-- Forget expired units.
local function drop_expired()
  if cutoff >= 1 then
    redis.call('ZREMRANGEBYSCORE', key, '1', fmt('%d', cutoff))
  end
end

-- Record n units under a new id, max(now * tick, last id + 1), and return
-- it.
local function record(n)
  local last = redis.call('ZSCORE', key, '')
  local id = 1
  if last then
    id = -num(last) + 1
  end
  if now * tick > id then
    id = now * tick
  end
  local id_s = fmt('%d', id)
  local args = {'-' .. id_s, '', id_s, id_s}
  for j = 2, n do
    args[#args + 1] = id_s
    args[#args + 1] = id_s .. ':' .. j
    if #args >= 2000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('PEXPIRE', key, fmt('%d', key_ttl(after(id), w)))
  return id
end

-- Remove the lease at if it is held; return its units (0: not held).
local function remove_held()
  if at <= 0 or at <= cutoff then
    return 0
  end
  local at_s = fmt('%d', at)
  return redis.call('ZREMRANGEBYSCORE', key, at_s, at_s)
end

if refund and not take then
  local held = 0
  if remove_held() > 0 then
    held = 1
  end
  return peek(held)
end

if refund then
  local n = remove_held()
  if n == 0 then
    local o = peek(0)
    o[1] = 0
    return o
  end
  drop_expired()
  local id = record(n)
  local size = redis.call('ZCARD', key) - 1
  return {1, math.max(limit - size, 0), 0, after(id), id}
end

if not take then
  return peek(0)
end

drop_expired()
local size = redis.call('ZCARD', key)
if size > 0 then
  size = size - 1
end
if size + cost <= limit then
  local id = record(cost)
  return {1, limit - size - cost, 0, after(id), id}
end
local retry = after(stamp(fmt('%d', size + cost - limit)))
local reset = after(stamp('-1'))
redis.call('PEXPIRE', key, fmt('%d', key_ttl(reset, w)))
return {0, math.max(limit - size, 0), retry, reset, 0}
