-- One request: KEYS[1] the state; ARGV[1] now in ms since the Unix epoch
-- (negative: read the server's TIME); ARGV[2] window in ms; ARGV[3] limit;
-- ARGV[4] cost; ARGV[5] "1" take, "0" peek, "2" refund, "3" renew (take
-- and refund: a lease's); ARGV[6] (refund and renew only) the take's at.
-- Reply: the step's five integers.
local now = tonumber(ARGV[1])
if now < 0 then
  now = server_now()
end
local mode = ARGV[5]
return step(KEYS[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  mode == '1' or mode == '3', mode == '2' or mode == '3', tonumber(ARGV[6]))
