-- limitkit script prelude: the script runner puts it in front of every
-- script. Each algorithm's body becomes the function
--
--   step(key, now, w, limit, cost, take, refund, at)
--
-- key: the key holding the state; now: ms since the Unix epoch; w: window in
-- ms; limit; cost; take: consume when admitted (false: peek, which never
-- writes, so it runs under EVALSHA_RO); refund: give back cost units a take
-- admitted, named by at (the fifth value of that take's reply), then report
-- as a peek. For an algorithm that holds leases (concurrency.lua) refund
-- releases the lease at (the reply's fifth value is then 1 when it was
-- held, else 0), and take and refund together renew it. A refund with a negative at
-- names no take: it gives back up to cost of the units still counted at
-- now, newest first (Rule.GiveBack), where the algorithm can (not
-- concurrency). It returns {allowed (0/1), remaining, retry_after_ms,
-- reset_after_ms, at}: at is where an admission was recorded (the logs'
-- timestamp, the counters' window start, GCRA's admission time; see
-- Rule.ChargedAt). Every value stays an integer
-- below 2^53, exact in a Lua number; numbers sent to Redis are formatted
-- with %d, never tostring (%.14g).

-- key_ttl(reset, w), how long to keep a key whose state is empty in reset
-- ms, is Rule.KeyTTL (algorithms.go): lua.go generates it after this file
-- from the same constants, so both engines keep keys equally long.

-- Lua 5.4 servers (Dragonfly, some Redis-compatible services) have no
-- global unpack; Redis and Valkey (Lua 5.1) have no table.unpack. The
-- bodies call unpack, this one.
local unpack = table.unpack or unpack

-- window_start is windowStart in algorithms.go: the recorded window while
-- now is inside it (no division), else the window aligned on now.
local function window_start(recorded, now, w)
  if recorded <= now and now - recorded < w then
    return recorded
  end
  return now - now % w
end

-- server_now reads the Redis server's clock in ms.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
