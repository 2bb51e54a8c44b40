-- limitkit script prelude: lua.go puts it in front of every algorithm's
-- script, which then finds its inputs in these locals.
--
-- KEYS[1]  the key holding the state
-- ARGV[1]  now in ms since the Unix epoch; negative: read the server's TIME
-- ARGV[2]  window in ms        ARGV[3]  limit
-- ARGV[4]  cost                ARGV[5]  "1" take, "0" peek (peek never writes,
--                                       so it runs under EVALSHA_RO)
-- Every script returns {allowed (0/1), remaining, retry_after_ms,
-- reset_after_ms}. Every value stays an integer below 2^53, exact in a Lua
-- number; numbers sent to Redis are formatted with %d, never tostring
-- (%.14g).

-- How long a key outlives the moment its state would be empty (see
-- LuaExpiryMargin in lua.go).
local EXPIRY_MARGIN_MS = 1000

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local w = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local take = ARGV[5] == '1'
