-- limitkit GCRA (token bucket): the Lua twin of gcraTake/gcraPeek
-- (gcra.go, which states the semantics). Keep the two in step: the
-- conformance suite compares them decision by decision.
--
-- KEYS[1]  the string "last:debt:limit": the time of the newest admission
--          (ms), the debt in units of 1/limit ms (the theoretical arrival
--          time is last + debt/limit) and the limit it was counted in;
--          absent when the key is new.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua. The rule keeps w * limit <= 2^53, so every value below is an
-- exact integer.

-- ceildiv returns ceil(a/b) for 0 <= a, 0 < b, both below 2^53.
local function ceildiv(a, b)
  local q = math.floor(a / b)
  if a - q * b > 0 then
    q = q + 1
  end
  return q
end

-- A negative cost is a charge of -cost (gcraCharge): counted
-- whatever is left, never refused.
local charge = cost < 0
if charge then
  cost = -cost
end
local last, debt, counted = 0, 0, 0
local v = redis.call('GET', key)
if v then
  local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not a then
    return redis.error_reply('limitkit: unreadable gcra state')
  end
  last, debt, counted = tonumber(a), tonumber(b), tonumber(c)
end

-- Refund: undo an admission made at at while it is still the newest and
-- the limit is unchanged (see gcraRefund). A negative at gives back by
-- time, below.
if refund and at >= 0 then
  if v and last == at and counted == limit and debt > 0 then
    debt = math.max(debt - cost * w, 0)
    redis.call('SET', key, string.format('%d:%d:%d', last, debt, counted), 'KEEPTTL')
  end
  take = false
end

-- The debt in this rule's units, capped at a full bucket.
local cap = w * limit
if counted ~= limit and counted ~= 0 then
  debt = math.min(ceildiv(debt, counted), w) * limit
elseif debt > cap then
  debt = cap
end
-- A request stamped before the newest admission is decided at its time.
local e = math.max(now, last)
if e - last >= w then
  debt = 0
else
  debt = math.max(debt - (e - last) * limit, 0)
end

-- Give back by time: pay back up to cost units of the debt held at e
-- (gcraGiveBack), then report as a peek.
if refund and at < 0 then
  if debt > 0 then
    debt = math.max(debt - cost * w, 0)
    redis.call('SET', key, string.format('%d:%d:%d', e, debt, limit), 'KEEPTTL')
  end
  take = false
end

local allowed, retry = 0, 0
if charge then
  -- Debt beyond a full bucket moves the time past now, rounded up.
  allowed = 1
  if cost * w <= cap - debt then
    debt = debt + cost * w
  else
    e = e + ceildiv(cost * w - (cap - debt), limit)
    debt = cap
  end
elseif debt <= cap - cost * w then
  allowed = 1
  if take then
    debt = debt + cost * w
  end
else
  retry = e + ceildiv(debt - (cap - cost * w), limit) - now
end
local reset = 0
if debt > 0 then
  reset = e + ceildiv(debt, limit) - now
end
if allowed == 1 and take then
  redis.call('SET', key, string.format('%d:%d:%d', e, debt, limit),
    'PX', key_ttl_px(reset, w))
end
return {allowed, math.floor((cap - debt) / w), retry, reset, e}
