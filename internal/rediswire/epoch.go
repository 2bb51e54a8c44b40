package rediswire

import "strconv"

// A fixed window's count key holds epoch*EpochBase + count: the epoch is 0
// until a Reset, which moves the key to the next epoch with a count of 0
// (ResetWindowScript) instead of deleting it. A native refund carries the
// epoch its increment counted in and gives back nothing in another
// (RefundWindowScript): a Reset while refunds are in flight (issue 43)
// otherwise let them take the counts of requests made after it below what
// those consumed, down to negative counts read as credit. Counts stay
// below EpochBase (fixed_window's LimitBound is half of it) and epochs
// cycle below EpochCycle, so that every value is exact in Lua's doubles
// (below 2^53).
const (
	// EpochBase is the value of one epoch in a fixed window's key.
	EpochBase = int64(1) << 44
	// EpochCycle bounds the epochs: a Reset moves epoch e to e%EpochCycle+1.
	EpochCycle = 511
)

// WindowCount splits a fixed window key's value into its count and epoch.
// A value below zero (left by give backs before epochs) is a count of
// epoch 0, read as zero by the deciders.
func WindowCount(v int64) (count, epoch int64) {
	if v < 0 {
		return v, 0
	}
	return v % EpochBase, v / EpochBase
}

// ResetWindowScript moves each of KEYS (fixed window counts) that exists
// to the next epoch with a count of 0, keeping its expiry.
var ResetWindowScript = `local base = ` + strconv.FormatInt(EpochBase, 10) + `
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then
    v = tonumber(v)
    local e = 0
    if v ~= nil and v >= base then
      e = math.floor(v / base)
    end
    redis.call('SET', k, string.format('%d', (e % ` + strconv.Itoa(EpochCycle) + ` + 1) * base), 'KEEPTTL')
  end
end
return {0}`

// RefundWindowScript gives back ARGV[2i-1] units to KEYS[i] when its value
// is still in epoch ARGV[2i], never below a count of zero: a refund finds
// its increment, or nothing (a key reset or expired since).
var RefundWindowScript = `local base = ` + strconv.FormatInt(EpochBase, 10) + `
for i, k in ipairs(KEYS) do
  local v = tonumber(redis.call('GET', k) or '')
  if v ~= nil and v >= 0 and math.floor(v / base) == tonumber(ARGV[2 * i]) then
    local n = v % base
    if n > 0 then
      redis.call('DECRBY', k, math.min(tonumber(ARGV[2 * i - 1]), n))
    end
  end
end
return {0}`
