-- limitkit compact log library: the log of compact_log and of two_level's
-- heavy keys, the Lua twin of slidingLogTake/slidingLogPeek/ring.remove
-- (algorithms/sliding_log.go, ring.go) over one Redis string.
--
-- Layout, after a prefix the algorithm chooses (compact_log: none):
--
--   header  15 bytes: head (position of the oldest entry), size,
--           capacity and a hint, 2 bytes each (limits stay below 2^16),
--           then the newest timestamp (7 bytes). The hint is how many
--           entries had slid out at the last take: where the next search
--           for that starts;
--   ring    capacity slots, the entries oldest first from head, wrapping.
--
-- A slot is 7 bytes, a big-endian integer below 2^56; timestamps are ms.
-- So a log costs 7 bytes per unit it keeps (two windows' units, up to
-- twice the limit): its capacity is exact while small, then grows by a
-- quarter (copying the log) up to twice the limit.
--
-- Speed: a step reads the header with the first BLOCK slots in one
-- GETRANGE, and further slots a block at a time as it needs them (most
-- steps look only at the oldest and the newest entries). A small log
-- (capacity <= BLOCK) is read and written whole: GETRANGE, SET. A large
-- one is updated in place: SETRANGE of the new slots and of the header,
-- PEXPIRE. It is never copied whole on the common path: moving a string
-- between Redis and Lua costs about 1 ns per byte each way, 60 us per step
-- at 1000 entries when done with GET and SET.

local SLOT = 7
local HDR = 15
local BLOCK = 32

-- enc returns t (0 <= t < 2^56) as one slot; dec returns slot i
-- (0-based) of the string s. Redis has the struct library, in C; other
-- Lua hosts (miniredis) get the same bytes from plain Lua.
-- enc_header and dec_header do the same for a header.
local enc, dec, enc_header, dec_header
local struct = rawget(_G, 'struct') -- a plain read of a missing global is an error
if struct then
  local pack, unpack = struct.pack, struct.unpack
  enc = function(t)
    return pack('>I7', t)
  end
  dec = function(s, i)
    return (unpack('>I7', s, i * SLOT + 1))
  end
  enc_header = function(L)
    return pack('>I2I2I2I2I7', L.head, L.n, L.cap, L.hint, L.newest)
  end
  dec_header = function(L, s, off)
    L.head, L.n, L.cap, L.hint, L.newest = unpack('>I2I2I2I2I7', s, off + 1)
  end
else
  enc = function(t)
    local g = t % 256
    t = (t - g) / 256
    local f = t % 256
    t = (t - f) / 256
    local e = t % 256
    t = (t - e) / 256
    local d = t % 256
    t = (t - d) / 256
    local c = t % 256
    t = (t - c) / 256
    local b = t % 256
    return string.char((t - b) / 256, b, c, d, e, f, g)
  end
  dec = function(s, i)
    local a, b, c, d, e, f, g = string.byte(s, i * SLOT + 1, i * SLOT + SLOT)
    return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256) + g
  end
  local function enc2(x)
    return string.char(math.floor(x / 256), x % 256)
  end
  enc_header = function(L)
    return enc2(L.head) .. enc2(L.n) .. enc2(L.cap) .. enc2(L.hint) .. enc(L.newest)
  end
  dec_header = function(L, s, off)
    local a, b, c, d, e, f, g, h = string.byte(s, off + 1, off + 8)
    L.head, L.n, L.cap, L.hint = a * 256 + b, c * 256 + d, e * 256 + f, g * 256 + h
    L.newest = dec(string.sub(s, off + 9, off + 15), 0)
  end
end

-- log_first returns what log_open needs read first: the bytes of the
-- prefix, header and first block.
local function log_first(key, prefix_len)
  return redis.call('GETRANGE', key, 0, prefix_len + HDR + BLOCK * SLOT - 1)
end

-- log_open returns the log stored in key after prefix (first: log_first's
-- answer, '' for none; L.stored tells whether there was one), or, with
-- key nil, an unstored log holding the timestamps of the string slots (set
-- its key before a take writes it).
local function log_open(key, prefix, first, slots)
  local L = {key = key, prefix = prefix, blocks = {}, head = 0, n = 0, cap = 0, newest = 0, hint = 0}
  if not key then
    L.n = #slots / SLOT
    L.cap = L.n
    L.ring = slots
    if L.n > 0 then
      L.newest = dec(slots, L.n - 1)
    end
    return L
  end
  local p = #prefix
  if #first >= p + HDR then
    dec_header(L, first, p)
    L.blocks[0] = string.sub(first, p + HDR + 1)
    L.stored = true
  end
  if L.cap <= BLOCK then
    L.ring = L.blocks[0] or '' -- the whole ring is in the first read
  end
  return L
end

-- slot returns the i-th oldest timestamp.
local function slot(L, i)
  local p = (L.head + i) % L.cap
  if L.ring then
    return dec(L.ring, p)
  end
  local b = math.floor(p / BLOCK)
  local s = L.blocks[b]
  if not s then
    local off = #L.prefix + HDR + b * BLOCK * SLOT
    s = redis.call('GETRANGE', L.key, off, off + BLOCK * SLOT - 1)
    L.blocks[b] = s
  end
  return dec(s, p - b * BLOCK)
end

-- raw returns the slots of the entries i..j-1 as stored, reading the whole
-- ring if it was not read yet.
local function raw(L, i, j)
  if j <= i then
    return ''
  end
  if not L.ring then
    local off = #L.prefix + HDR
    L.ring = redis.call('GETRANGE', L.key, off, off + L.cap * SLOT - 1)
  end
  local p = (L.head + i) % L.cap
  local q = p + j - i
  if q <= L.cap then
    return string.sub(L.ring, p * SLOT + 1, q * SLOT)
  end
  return string.sub(L.ring, p * SLOT + 1) .. string.sub(L.ring, 1, (q - L.cap) * SLOT)
end

-- raw_few is raw for the entries i..j-1 of a large log: a few are read a
-- block at a time; more than a block in one GETRANGE of the ring (a
-- request far out of order shifts many entries, and slot by slot that
-- would take milliseconds).
local function raw_few(L, i, j)
  if L.ring or j - i > BLOCK then
    return raw(L, i, j)
  end
  local parts = {}
  for x = i, j - 1 do
    parts[#parts + 1] = enc(slot(L, x))
  end
  return table.concat(parts)
end

-- count returns how many timestamps are <= t, searching from the h-th
-- oldest: galloping, then halving, so that a good guess costs one or two
-- slots (one block) and a bad one only a few more.
local function count(L, t, h)
  local n = L.n
  if n == 0 or L.newest <= t then
    return n
  end
  h = math.max(math.min(h, n - 1), 0)
  -- Find lo < hi with slot(lo) <= t < slot(hi); slot(-1) is below every
  -- t and slot(n-1) = newest above it.
  local lo, hi, step = h - 1, h, 1
  if slot(L, h) > t then
    while lo >= 0 and slot(L, lo) > t do
      hi = lo
      lo = lo - step
      step = step * 2
    end
    lo = math.max(lo, -1)
  else
    lo = h
    hi = h + 1
    while hi < n - 1 and slot(L, hi) <= t do
      lo = hi
      hi = math.min(hi + step, n - 1)
      step = step * 2
    end
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if slot(L, mid) > t then
      hi = mid
    else
      lo = mid
    end
  end
  return hi
end

-- rewrite stores the log whole, linear: body holds its n entries as
-- stored, within capacity cap; kept for px ms (nil: keeping the expiry).
local function rewrite(L, body, n, cap, px)
  L.head, L.n, L.cap = 0, n, cap
  local v = L.prefix .. enc_header(L) .. body .. string.rep('\0', (cap - n) * SLOT)
  if px then
    redis.call('SET', L.key, v, 'PX', string.format('%d', px))
  else
    redis.call('SET', L.key, v, 'KEEPTTL')
  end
end

-- set_range writes the stored slots s (k of them) at logical positions
-- from i on, in place.
local function set_range(L, i, s, k)
  local p = (L.head + i) % L.cap
  local base = #L.prefix + HDR
  local first = math.min(k, L.cap - p)
  redis.call('SETRANGE', L.key, base + p * SLOT, string.sub(s, 1, first * SLOT))
  if first < k then
    redis.call('SETRANGE', L.key, base, string.sub(s, first * SLOT + 1))
  end
end

-- log_take performs slidingLogTake on L, writes the log, keeping the key
-- px_extra ms after the reset, and returns allowed, remaining, retry and
-- reset.
local function log_take(L, now, w, limit, cost, px_extra)
  -- Forget what slid out a window ago (a prefix), by time only: a
  -- request at another limit may still count the rest.
  local d = count(L, now - 2 * w, 0)
  if d > 0 then
    L.head = (L.head + d) % L.cap
    L.n = L.n - d
  end
  local hint = L.hint - d
  local expired = count(L, now - w, hint)
  L.hint = expired
  local live = L.n - expired
  local remaining = limit - live
  if cost > remaining then
    -- The (live+cost-limit)-th oldest live entry must slide out first.
    local retry = slot(L, L.n + cost - limit - 1) + w - now
    local reset = L.newest + w - now
    if L.ring and (not L.stored or d > 0 or L.head ~= 0 or expired ~= hint) then
      rewrite(L, raw(L, 0, L.n), L.n, math.max(L.cap, 1), reset + px_extra)
    elseif L.ring then
      -- Stored as rewrite would store it (linear, the same header): only
      -- the expiry changes.
      redis.call('PEXPIRE', L.key, string.format('%d', reset + px_extra))
    else
      -- The hint is worth a write only when it moved past a block.
      if d > 0 or math.abs(expired - hint) >= BLOCK then
        redis.call('SETRANGE', L.key, #L.prefix, enc_header(L))
      end
      redis.call('PEXPIRE', L.key, string.format('%d', reset + px_extra))
    end
    return 0, math.max(remaining, 0), retry, reset
  end
  -- Entries later than now (the clock went back) stay after it.
  local pos = count(L, now, L.n)
  local n = L.n
  local need = n + cost
  local news = string.rep(enc(now), cost)
  if L.newest < now or n == 0 then
    L.newest = now
  end
  local reset = L.newest + w - now
  -- Two windows hold at most two limits (more only while another limit
  -- is in force): the capacity stays within bound, and grows no further
  -- than the limit while the units fit in it (one window's).
  local bound = math.max(2 * limit, need)
  if need > L.cap or L.cap > bound or L.ring then
    -- Small (read whole), or growing by a quarter, or shrinking after a
    -- lowered limit: written whole, linear.
    local cap = L.cap
    if need > cap or cap > bound then
      cap = need
      if need > BLOCK then
        local grow = bound
        if need <= limit then
          grow = limit
        end
        cap = math.min(math.max(L.cap + math.ceil(L.cap / 4), need), grow)
      end
    end
    rewrite(L, raw(L, 0, pos) .. news .. raw(L, pos, n), need, cap, reset + px_extra)
    return 1, remaining - cost, 0, reset
  end
  set_range(L, pos, news .. raw_few(L, pos, n), need - pos)
  L.n = need
  redis.call('SETRANGE', L.key, #L.prefix, enc_header(L))
  redis.call('PEXPIRE', L.key, string.format('%d', reset + px_extra))
  return 1, remaining - cost, 0, reset
end

-- log_peek performs slidingLogPeek on L: allowed, remaining, retry,
-- reset.
local function log_peek(L, now, w, limit, cost)
  local live = L.n - count(L, now - w, L.hint)
  local allowed, remaining, retry, reset = 1, limit - live, 0, 0
  if remaining < 0 then
    remaining = 0
  end
  if live + cost > limit then
    allowed = 0
    retry = slot(L, L.n + cost - limit - 1) + w - now
  end
  if live > 0 then
    reset = L.newest + w - now
  end
  return allowed, remaining, retry, reset
end

-- log_remove removes up to k timestamps equal to t from the stored log L
-- (keeping its expiry) and returns whether it removed any.
local function log_remove(L, t, k)
  local hi = count(L, t, L.n)
  local lo = count(L, t - 1, hi)
  if hi - lo < k then
    k = hi - lo
  end
  if k <= 0 then
    return false
  end
  local n = L.n
  if hi == n and n > k then
    L.newest = slot(L, n - k - 1)
  end
  if L.ring then
    rewrite(L, raw(L, 0, hi - k) .. raw(L, hi, n), n - k, L.cap, nil)
    return true
  end
  local after = raw(L, hi, n)
  if n > hi then
    set_range(L, hi - k, after, n - hi)
  end
  L.n = n - k
  redis.call('SETRANGE', L.key, #L.prefix, enc_header(L))
  return true
end
