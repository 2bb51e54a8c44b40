-- limitkit compact sliding window log: the same decisions as sliding_log
-- (its Go twin is slidingLogTake/slidingLogPeek, algorithms/sliding_log.go), stored as
-- one string instead of a sorted set. Keep the two in step: the
-- conformance suite compares them decision by decision.
--
-- KEYS[1]  a compact log (see loglib.lua), absent when the key is new.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.
--
-- An entry with a time <= now - window has slid out; it is kept one more
-- window for requests that arrive late. Entries later than now (recorded
-- before the clock went back) keep counting until they slide out.

local first = log_first(key, 0)
if #first > 0 and #first < HDR then
  return redis.error_reply('limitkit: unreadable compact_log state')
end
local L = log_open(key, '', first)

-- Refund: remove cost entries stamped at, the take's time.
if refund then
  if log_remove(L, at, cost) then
    L = log_open(key, '', log_first(key, 0))
  end
  take = false
end

if not take then
  local allowed, remaining, retry, reset = log_peek(L, now, w, limit, cost)
  return {allowed, remaining, retry, reset, now}
end
-- The key is kept while a late request could still need its entries; a
-- denial refreshes the expiry too.
local allowed, remaining, retry, reset = log_take(L, now, w, limit, cost, w + EXPIRY_MARGIN_MS)
return {allowed, remaining, retry, reset, now}
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
