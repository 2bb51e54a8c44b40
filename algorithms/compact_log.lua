-- limitkit compact sliding window log: the same decisions as sliding_log
-- (its Go twin is slidingLogTake/slidingLogPeek, sliding_log.go; its
-- descriptor is compact_log.go), stored as one string instead of a sorted
-- set. Keep the two in step: the conformance suite compares them decision
-- by decision.
--
-- KEYS[1]  a compact log (see loglib.lua), absent when the key is new.
-- The body of step(key, now, w, limit, cost, take, refund, at); see
-- prelude.lua.
--
-- An entry with a time <= now - window has slid out; it is kept one more
-- window for requests that arrive late. Entries later than now (recorded
-- before the clock went back) keep counting until they slide out.

local first = redis.call('GETRANGE', key, '0', FIRST_END) -- log_first(key, 0)
if #first > 0 and #first < HDR then
  return redis.error_reply('limitkit: unreadable compact_log state')
end

-- The common takes, decided from the first read alone, without building
-- the library: exactly what log_take would decide and write for them.
-- A new key; or, when the first read holds the oldest entry, nothing slid
-- out (the oldest is later than now - w, so nothing is forgotten nor
-- expired) and nothing is later than now: then a denial reads one more
-- entry from the first read and keeps the log as it is; an admission
-- appends at the end: the whole log rewritten while small (as log_take
-- does), else the new entries and the header written in place, in one
-- SETRANGE when they fall in the first block. An admission's reset is w:
-- its expiry is key_ttl(w, w).
local struct = rawget(_G, 'struct')
if take and not refund and struct and cost <= limit then
  local pack, unpack = struct.pack, struct.unpack
  if #first == 0 then
    redis.call('SET', key, pack('>I2I2I2I2I7', 0, cost, cost, 0, now) .. string.rep(pack('>I7', now), cost),
      'PX', string.format('%d', key_ttl(w, w)))
    return {1, limit - cost, 0, w, now}
  end
  local head, n, cap, hint, newest = unpack('>I2I2I2I2I7', first, 1)
  local avail = (#first - HDR) / SLOT -- slots in the first read
  if n >= 1 and n <= limit and cap <= limit and newest <= now and head < avail
    and unpack('>I7', first, HDR + head * SLOT + 1) > now - w then
    local remaining = limit - n
    if cost > remaining then
      -- log_take rewrites a small log whose hint changes (to 0) and a
      -- large one's header when its hint moves by a block.
      local p = (head + n + cost - limit - 1) % cap
      if p < avail and ((cap <= BLOCK and head == 0 and hint == 0) or (cap > BLOCK and hint < BLOCK)) then
        local reset = newest + w - now
        redis.call('PEXPIRE', key, string.format('%d', key_ttl(reset, w)))
        return {0, remaining, unpack('>I7', first, HDR + p * SLOT + 1) + w - now, reset, now}
      end
    elseif cap <= BLOCK and head == 0 then
      -- Small: rewritten whole, linear, growing as log_take grows it.
      local need = n + cost
      local c = cap
      if need > c then
        c = need
        if need > BLOCK then
          c = math.min(math.max(cap + math.ceil(cap / 4), need), limit)
        end
      end
      redis.call('SET', key, pack('>I2I2I2I2I7', 0, need, c, 0, now) .. string.sub(first, HDR + 1, HDR + n * SLOT)
        .. string.rep(pack('>I7', now), cost) .. string.rep('\0', (c - need) * SLOT),
        'PX', string.format('%d', key_ttl(w, w)))
      return {1, remaining - cost, 0, w, now}
    elseif cap > BLOCK and n + cost <= cap then
      local p = (head + n) % cap
      if p + cost <= cap then
        local hdr, news = pack('>I2I2I2I2I7', head, n + cost, cap, 0, now), string.rep(pack('>I7', now), cost)
        if p + cost <= avail then
          redis.call('SETRANGE', key, '0', hdr .. string.sub(first, HDR + 1, HDR + p * SLOT) .. news)
        else
          redis.call('SETRANGE', key, string.format('%d', HDR + p * SLOT), news)
          redis.call('SETRANGE', key, '0', hdr)
        end
        redis.call('PEXPIRE', key, string.format('%d', key_ttl(w, w)))
        return {1, remaining - cost, 0, w, now}
      end
    end
  end
end

local log_first, log_open, log_take, log_peek, log_remove = loglib()
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
local allowed, remaining, retry, reset = log_take(L, now, w, limit, cost, key_ttl(0, w))
return {allowed, remaining, retry, reset, now}
