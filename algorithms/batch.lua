-- Independent requests decided one after the other in one call: the Redis
-- stores send concurrent Takes together this way. KEYS[i] holds request i's
-- state; ARGV holds five values per request: now in ms (negative: the
-- server's TIME), algorithm name, window in ms, limit, cost.
--
-- Each request is a take of its own, exactly as the single-request script
-- would decide it at that point. A step that fails (a key of the wrong type)
-- fails only its request: its first value is the error, the other four are
-- 0. Reply: five values per request.
local reply, server = {}, nil
for i = 1, #KEYS do
  local a = (i - 1) * 5
  local now = tonumber(ARGV[a + 1])
  if now < 0 then
    server = server or server_now()
    now = server
  end
  local step = STEPS[ARGV[a + 2]]
  local ok, o
  if step then
    ok, o = pcall(step, KEYS[i], now, tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), true, false, 0)
  else
    ok, o = false, 'limitkit: no script step for algorithm ' .. ARGV[a + 2]
  end
  if ok and type(o) == 'table' and o.err then
    ok, o = false, o.err
  end
  if ok then
    for j = 1, 5 do
      reply[a + j] = o[j]
    end
  else
    if type(o) == 'table' then
      o = o.err or 'limitkit: step failed'
    end
    reply[a + 1] = redis.error_reply(tostring(o))
    for j = 2, 5 do
      reply[a + j] = 0
    end
  end
end
return reply
