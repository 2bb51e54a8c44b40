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

-- A negative cost is a charge of min(-cost, limit) units (compactLogCharge),
-- recorded whatever is left. Not taking, it reports what it would leave.
if cost < 0 then
  cost = math.min(-cost, limit)
  local _, log_open, _, log_peek, _, _, _, _, _, log_charge = loglib()
  local L = log_open(key, '', first)
  if not take then
    local _, remaining, _, reset = log_peek(L, now, w, limit, cost)
    return {1, math.max(remaining - cost, 0), 0, math.max(reset, w), now}
  end
  local remaining, reset = log_charge(L, now, w, limit, cost, key_ttl(0, w))
  return {1, remaining, 0, reset, now}
end

-- The common takes, decided from the first read alone, without building
-- the library: exactly what log_take would decide and write for them.
-- A new key; a small log (read whole: any take, entries sliding out or
-- not, GETRANGE then SET or PEXPIRE); or a large one whose first read
-- holds the oldest entry when nothing slid out (the oldest is later than
-- now - w, so nothing is forgotten nor expired) and nothing is later than
-- now: then a denial reads one more entry from the first read and keeps
-- the log as it is; an admission writes the new entries and the header in
-- place, in one SETRANGE when they fall in the first block. An
-- admission's reset is then w: its expiry is key_ttl(w, w). Each call of a
-- C function (struct, string) costs Redis' Lua about as much as 10 Lua
-- operations: these paths make few.
local struct = rawget(_G, 'struct')
if take and not refund and struct and cost <= limit then
  local pack, unpack = struct.pack, struct.unpack
  if #first == 0 then
    redis.call('SET', key, pack('>I2I2I2I2I7', 0, cost, cost, 0, now) .. string.rep(pack('>I7', now), cost),
      'PX', key_ttl_px(w, w))
    return {1, limit - cost, 0, w, now}
  end
  local head, n, cap, hint, newest = unpack('>I2I2I2I2I7', first, 1)
  local avail = (#first - HDR) / SLOT -- slots in the first read
  if cap <= BLOCK and head == 0 and n >= 1 and n <= cap and #first == HDR + cap * SLOT
    and unpack('>I7', first, HDR + n * SLOT - SLOT + 1) == newest then
    -- A small log (the whole ring in the first read), linear as log_take
    -- always writes it: log_take's decision and write, from a scan of the
    -- oldest entries and, when the clock went back, of the newest. The log is sorted and its last
    -- entry is newest, so a scan counts what count would. Entries 0..d-1
    -- are forgotten (<= now - 2w), d..x-1 slid out (<= now - w) but kept.
    local cut2, cutw = now - 2 * w, now - w
    local d, x = 0, n
    if newest > cutw then
      -- x is near the hint (the slid-out count of the last take): check
      -- the entries on either side of it in one read, then step forward;
      -- from the start when the hint is past x (the clock went back).
      x = hint
      if x >= n then
        x = n - 1
      end
      local scan = true
      if x > 0 then
        local t1, t2 = unpack('>I7I7', first, HDR + x * SLOT - SLOT + 1)
        if t1 > cutw then
          x = 0
        elseif t2 > cutw then
          scan = false
        else
          x = x + 1
        end
      end
      while scan and unpack('>I7', first, HDR + x * SLOT + 1) <= cutw do
        x = x + 1
      end
    end
    if x > 0 then
      local t1, t2 = unpack(x > 1 and '>I7I7' or '>I7', first, HDR + 1)
      if t1 <= cut2 then
        d = 1
        if x > 1 and t2 <= cut2 then
          d = 2
          while d < x and unpack('>I7', first, HDR + d * SLOT + 1) <= cut2 do
            d = d + 1
          end
        end
      end
    end
    local expired = x - d
    local remaining = limit - (n - x)
    if cost > remaining then
      local reset = newest + w - now
      if d > 0 or expired ~= hint - d then
        redis.call('SET', key, pack('>I2I2I2I2I7', 0, n - d, cap, expired, newest) .. string.sub(first, HDR + d * SLOT + 1, HDR + n * SLOT)
          .. string.rep('\0', (cap - n + d) * SLOT), 'PX', key_ttl_px(reset, w))
      else
        redis.call('PEXPIRE', key, key_ttl_px(reset, w))
      end
      if remaining < 0 then
        remaining = 0
      end
      return {0, remaining, unpack('>I7', first, HDR + (n + cost - limit - 1) * SLOT + 1) + w - now, reset, now}
    end
    -- s: the oldest kept; the new entries go after those <= now (p: the
    -- first later than now); the log is rewritten whole, linear, growing
    -- (or shrinking) as log_take does.
    local s = d
    local need = n - s + cost
    local c, bound = cap, math.max(2 * limit, need)
    if need > c or c > bound then
      c = need
      if need > BLOCK then
        local grow = bound
        if need <= limit then
          grow = limit
        end
        c = math.min(math.max(cap + math.ceil(cap / 4), need), grow)
      end
    end
    local v
    if newest <= now and cost == 1 then
      -- One call builds it: header, the entries kept, now.
      newest = now
      v = pack('>I2I2I2I2I7c0I7', 0, need, c, expired, now, string.sub(first, HDR + s * SLOT + 1, HDR + n * SLOT), now)
    elseif newest <= now then
      newest = now
      v = pack('>I2I2I2I2I7c0', 0, need, c, expired, now, string.sub(first, HDR + s * SLOT + 1, HDR + n * SLOT))
        .. string.rep(pack('>I7', now), cost)
    else
      local news = string.rep(pack('>I7', now), cost)
      local p = n
      while p > s and unpack('>I7', first, HDR + p * SLOT - SLOT + 1) > now do
        p = p - 1
      end
      if p == n or s == n then
        newest = now
      end
      v = pack('>I2I2I2I2I7', 0, need, c, expired, newest) .. string.sub(first, HDR + s * SLOT + 1, HDR + p * SLOT) .. news
        .. string.sub(first, HDR + p * SLOT + 1, HDR + n * SLOT)
    end
    if c > need then
      v = v .. string.rep('\0', (c - need) * SLOT)
    end
    local reset = newest + w - now
    redis.call('SET', key, v, 'PX', key_ttl_px(reset, w))
    return {1, remaining - cost, 0, reset, now}
  end
  if n >= 1 and newest <= now and head < avail
    and unpack('>I7', first, HDR + head * SLOT + 1) > now - w then
    local remaining = limit - n
    if cost > remaining then
      if remaining < 0 then
        remaining = 0
      end
      -- log_take rewrites a small log whose hint changes (to 0) and a
      -- large one's header when its hint moves by a block.
      local p = (head + n + cost - limit - 1) % cap
      if p < avail and ((cap <= BLOCK and head == 0 and hint == 0) or (cap > BLOCK and hint < BLOCK)) then
        local reset = newest + w - now
        redis.call('PEXPIRE', key, key_ttl_px(reset, w))
        return {0, remaining, unpack('>I7', first, HDR + p * SLOT + 1) + w - now, reset, now}
      end
    elseif cap > BLOCK and n + cost <= cap and cap <= 2 * limit then
      local p = (head + n) % cap
      if p + cost <= cap then
        local hdr, news = pack('>I2I2I2I2I7', head, n + cost, cap, 0, now), string.rep(pack('>I7', now), cost)
        if p + cost <= avail then
          redis.call('SETRANGE', key, '0', hdr .. string.sub(first, HDR + 1, HDR + p * SLOT) .. news)
        else
          redis.call('SETRANGE', key, string.format('%d', HDR + p * SLOT), news)
          redis.call('SETRANGE', key, '0', hdr)
        end
        redis.call('PEXPIRE', key, key_ttl_px(w, w))
        return {1, remaining - cost, 0, w, now}
      end
    end
  end
end

-- A peek (Peek, and a TakeAll's check pass) of a new key or of a log read
-- whole (capacity <= BLOCK), at a cost the log can hold: log_peek's answer
-- from the first read, without building the library. The log is sorted,
-- so a scan from the oldest counts what count would.
if not take and not refund and struct and cost >= 0 and cost <= limit then
  if #first == 0 then
    return {1, limit, 0, 0, now}
  end
  local unpack = struct.unpack
  local head, n, cap, _, newest = unpack('>I2I2I2I2I7', first, 1)
  local cutw, x = now - w, n
  if cap <= BLOCK and n <= cap and #first >= HDR + cap * SLOT and n > 0 and newest > cutw then
    -- The newest entry is the last: the scan stops before it (else, on a
    -- log that broke this, log_peek decides).
    x = 0
    while x < n - 1 and unpack('>I7', first, HDR + (head + x) % cap * SLOT + 1) <= cutw do
      x = x + 1
    end
    if x == n - 1 and unpack('>I7', first, HDR + (head + x) % cap * SLOT + 1) <= cutw then
      x = -1
    end
  end
  if cap <= BLOCK and n <= cap and #first >= HDR + cap * SLOT and x >= 0 then
    local live = n - x
    local remaining, retry, reset = limit - live, 0, 0
    if remaining < 0 then
      remaining = 0
    end
    if live > 0 then
      reset = newest + w - now
    end
    if live + cost > limit then
      retry = unpack('>I7', first, HDR + (head + n + cost - limit - 1) % cap * SLOT + 1) + w - now
      return {0, remaining, retry, reset, now}
    end
    return {1, remaining, 0, reset, now}
  end
end

local log_first, log_open, log_take, log_peek, log_remove, _, _, _, log_give_back = loglib()
local L = log_open(key, '', first)

-- Refund: remove cost entries stamped at, the take's time; with a negative
-- at, the newest cost entries still inside the window.
if refund then
  local removed
  if at < 0 then
    removed = log_give_back(L, now, w, cost)
  else
    removed = log_remove(L, at, cost)
  end
  if removed then
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
