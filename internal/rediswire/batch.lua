-- Independent requests decided one after the other in one call: the Redis
-- stores send concurrent Takes (TAKE true) or Peeks (TAKE false, set
-- before this file; a read-only call) together this way. KEYS[i] holds
-- request i's state. ARGV holds five values per request: now in ms
-- (negative: the server's TIME), algorithm name, window in ms, limit, cost.
-- When the requests share the last four (one limiter's takes, the common
-- case), they are sent once: ARGV is algorithm, window, limit, cost, then
-- each request's now (N + 4 values, N > 1), or, when all share now too,
-- the five values once. Redis turns each argument into a string object and
-- a Lua string: four fewer per request cost it less than the step's reads.
--
-- Each request is a take (or peek) of its own, exactly as the
-- single-request script would decide it at that point. A step that fails (a key of the wrong type)
-- fails only its request: its first value is the error, the other four are
-- 0. Reply: five values per request.
--
-- The prefix before this file sets K, KO, A, AO, N: request i's key is
-- K[KO + i], its values start after A[AO], and there are N requests (KEYS
-- and ARGV as above on one server; on a cluster node both come in ARGV,
-- see nodebatch.go).
local reply, server = {}, nil
-- Requests of one rule repeat the same arguments; Lua strings are interned,
-- so comparing them is cheap, and each distinct one is parsed once.
local now_s, w_s, limit_s, cost_s
local now, w, limit, cost
-- Request i's now is A[nb + ns * i], its algorithm, window, limit and cost
-- A[rb + rs * i + 1 .. 4]: five values per request, or shared.
local nb, ns, rb, rs = AO - 4, 5, AO - 4, 5
local nargs = #A - AO
if nargs == 5 then
  nb, ns, rb, rs = AO + 1, 0, AO + 1, 0
elseif N > 1 and nargs == N + 4 then
  nb, ns, rb, rs = AO + 4, 1, AO, 0
end
for i = 1, N do
  local r = (i - 1) * 5
  local a = rb + rs * i
  if A[nb + ns * i] ~= now_s then
    now_s = A[nb + ns * i]
    now = tonumber(now_s)
    if now < 0 then
      server = server or server_now()
      now = server
    end
  end
  if A[a + 2] ~= w_s then
    w_s = A[a + 2]
    w = tonumber(w_s)
  end
  if A[a + 3] ~= limit_s then
    limit_s = A[a + 3]
    limit = tonumber(limit_s)
  end
  if A[a + 4] ~= cost_s then
    cost_s = A[a + 4]
    cost = tonumber(cost_s)
  end
  local step = STEPS[A[a + 1]]
  local ok, o
  if step then
    ok, o = pcall(step, K[KO + i], now, w, limit, cost, TAKE, false, 0)
  else
    ok, o = false, 'limitkit: no script step for algorithm ' .. A[a + 1]
  end
  -- (A step returns a table: indexing it needs no type() call.)
  if ok and o.err then
    ok, o = false, o.err
  end
  if ok then
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = o[1], o[2], o[3], o[4], o[5]
  else
    if type(o) == 'table' then
      o = o.err or 'limitkit: step failed'
    end
    reply[r + 1] = redis.error_reply(tostring(o))
    for j = 2, 5 do
      reply[r + j] = 0
    end
  end
end
return reply
