-- Several requests, all or nothing. KEYS[i] holds the state of request i.
-- ARGV[1] now in ms (negative: read the server's TIME), then four values per
-- request: algorithm name, window in ms, limit, cost.
--
-- Every request is first checked without writing; only when all would be
-- admitted are they taken, in order. Nothing runs between the two passes,
-- so each take admits exactly as its check said. Reply: 1 when all were
-- admitted, else 0, then the five integers of each request's outcome (its
-- take when all were admitted, else its check). A charge (a negative cost)
-- is always admitted by its check, and is taken even when the others are
-- refused: its cost was already incurred.
local now = tonumber(ARGV[1])
if now < 0 then
  now = server_now()
end
local function run(i, take)
  local a = 1 + (i - 1) * 4
  local step = STEPS[ARGV[a + 1]]
  if not step then
    return redis.error_reply('limitkit: no script step for algorithm ' .. ARGV[a + 1])
  end
  return step(KEYS[i], now, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), take, false, 0)
end
local outs, all = {}, 1
for i = 1, #KEYS do
  local o = run(i, false)
  if o.err then
    return o
  end
  if o[1] == 0 then
    all = 0
  end
  outs[i] = o
end
for i = 1, #KEYS do
  if all == 1 or tonumber(ARGV[1 + (i - 1) * 4 + 4]) < 0 then
    local o = run(i, true)
    if o.err then
      return o
    end
    outs[i] = o
  end
end
local reply = {all}
for i = 1, #KEYS do
  for j = 1, 5 do
    reply[#reply + 1] = outs[i][j]
  end
end
return reply
