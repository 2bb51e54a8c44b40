-- Several TakeAll calls decided one after the other in one call, each all
-- or nothing exactly as multi.lua decides it. KEYS holds the groups' keys in
-- order; ARGV holds, per group: its number of requests n, now in ms
-- (negative: the server's TIME), then four values per request (algorithm
-- name, window in ms, limit, cost).
--
-- Reply per group: 1 when all were admitted, else 0, then the five integers
-- of each request's outcome; or, when a step fails (a key of the wrong
-- type, a key this cluster node does not serve), the error in place of the
-- first value and 0s. A failure in the check pass wrote nothing; the take
-- pass only runs after every key was read, so it cannot meet a key the node
-- does not serve.
--
-- The prefix before this file sets K, KO, A, AO, N: the keys are K[KO + 1]
-- on, the values A[AO + 1] to A[#A] (KEYS and ARGV on one server; on a
-- cluster node both come in ARGV, see nodebatch.go).
local server
-- num returns the number in string x. The calls of one batch repeat the
-- same few values (their rules' windows, limits and costs, often their
-- now), and Lua strings are interned: a table lookup answers all but the
-- first, where tonumber costs Redis' Lua a strtod, and a group's values
-- are parsed once for both passes.
local nums = {}
local function num(x)
  local v = tonumber(x)
  nums[x] = v
  return v
end
-- A group's steps and values, by request (reused across groups).
local steps, ws, limits, costs = {}, {}, {}, {}
local function group(k, a, n, now)
  memo_reset()
  for i = 1, n do
    local b = a + (i - 1) * 4
    local step = STEPS[A[b + 1]]
    if not step then
      error({err = 'limitkit: no script step for algorithm ' .. A[b + 1]})
    end
    steps[i] = step
    local x, y, z = A[b + 2], A[b + 3], A[b + 4]
    ws[i], limits[i], costs[i] = nums[x] or num(x), nums[y] or num(y), nums[z] or num(z)
  end
  -- A charge (a negative cost) passes its check and is taken even when
  -- the others are refused: its cost was already incurred.
  local outs, all = {}, 1
  for take = 0, 1 do
    for i = 1, n do
      if take == 0 or all == 1 or costs[i] < 0 then
        local o = steps[i](K[KO + k + i], now, ws[i], limits[i], costs[i], take == 1, false, 0)
        if o.err then
          error(o)
        end
        if o[1] == 0 then
          all = 0
        end
        outs[i] = o
      end
    end
  end
  return outs, all
end
local reply, a, k = {}, AO, 0
while a < #A do
  local x, y = A[a + 1], A[a + 2]
  local n, now = nums[x] or num(x), nums[y] or num(y)
  if now < 0 then
    server = server or server_now()
    now = server
  end
  local ok, outs, all = pcall(group, k, a + 2, n, now)
  local r = #reply
  if ok then
    reply[r + 1] = all
    for i = 1, n do
      for j = 1, 5 do
        reply[r + 1 + (i - 1) * 5 + j] = outs[i][j]
      end
    end
  else
    if type(outs) == 'table' then
      outs = outs.err or 'limitkit: step failed'
    end
    reply[r + 1] = redis.error_reply(tostring(outs))
    for j = 2, 1 + 5 * n do
      reply[r + j] = 0
    end
  end
  a = a + 2 + 4 * n
  k = k + n
end
return reply
