-- A memo of whole-key reads (GET, ZCARD, and a log's first GETRANGE from
-- byte 0) for the scripts that decide
-- TakeAll calls (multi.lua, groups.lua): their check pass and their take
-- pass read the same keys, and a counter's step reads its whole state with
-- one GET. While no write touched a key, its second GET (or ZCARD) is
-- answered from here, so an admitted counter costs a GET and a SET, as one
-- Take does, not GET, GET and SET. Every command of the steps goes through
-- redis.call below: any other command forgets the memo of its first
-- argument (its key) before it runs. The results kept are strings and
-- integers, which the steps cannot change. memo_reset forgets everything
-- (groups.lua calls it per TakeAll).
local redis_call = redis.call
local memo, READS = {}, {GET = 'GET', ZCARD = 'ZCARD'}
local function memo_reset()
  memo = {}
end
local redis = setmetatable({
  call = function(cmd, ...)
    local key = ...
    if READS[cmd] and select('#', ...) == 1 then
      local m = memo[key]
      if not m then
        m = {}
        memo[key] = m
      end
      local v = m[cmd]
      if v == nil then
        v = redis_call(cmd, key)
        m[cmd] = v
      end
      return v
    end
    -- A log's first read (loglib.lua's log_first, compact_log.lua).
    if cmd == 'GETRANGE' and select(2, ...) == '0' and select('#', ...) == 3 then
      local stop = select(3, ...)
      local m = memo[key]
      if not m then
        m = {}
        memo[key] = m
      end
      if m.range_stop ~= stop then
        m.range, m.range_stop = redis_call(cmd, key, '0', stop), stop
      end
      return m.range
    end
    if key ~= nil then
      memo[key] = nil
    end
    return redis_call(cmd, ...)
  end,
}, {__index = redis})
