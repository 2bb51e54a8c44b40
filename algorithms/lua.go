package algorithms

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"
)

// The Lua twins of the Go steps. Each script takes one key (KEYS[1], the
// key name ends with Rule.KeySuffix) and the ARGV built by Rule.LuaArgs, and
// returns the four integers of an Outcome in LuaReply order. The Redis stores
// run them; they hold no algorithm math of their own.

//go:embed prelude.lua
var preludeLua string

//go:embed sliding_log.lua
var slidingLogBody string

//go:embed sliding_counter.lua
var slidingCounterBody string

//go:embed fixed_window.lua
var fixedWindowBody string

// The scripts as sent to Redis: the shared prelude (inputs, server time)
// and the algorithm's body.
var (
	slidingLogLua     = preludeLua + slidingLogBody
	slidingCounterLua = preludeLua + slidingCounterBody
	fixedWindowLua    = preludeLua + fixedWindowBody
)

// LuaServerTime, passed as now to LuaArgs, makes the script read the Redis
// server's clock (TIME) instead of taking the time as an argument.
const LuaServerTime int64 = -1

// LuaExpiryMargin is how long a Redis key outlives the moment its state
// would have become empty (ResetAfter): the scripts set the key's expiry to
// ResetAfter plus this margin on every write (the sliding log adds a window,
// for requests that arrive late, and refreshes it on denials too). It absorbs the latency between the limiter reading its clock
// and the script running, and clock differences between callers of up to
// the margin: a key that expired early would hand its full allowance back.
const LuaExpiryMargin = time.Second

// MaxLuaTime is the latest time, in ms since the Unix epoch, the scripts
// accept (about the year 70,000). With two windows added it stays below
// 2^53, where Lua numbers stop being exact integers.
const MaxLuaTime = int64(1)<<51 - 1

// The positions of an Outcome's fields in a script's reply.
const (
	LuaReplyAllowed = iota
	LuaReplyRemaining
	LuaReplyRetryAfter
	LuaReplyResetAfter
	// LuaReplyLen is the number of integers in a reply.
	LuaReplyLen
)

// LuaScript returns the source of the named algorithm's Lua twin. The error
// wraps ErrInvalidRule for an unknown name.
func LuaScript(name Name) (string, error) {
	switch name {
	case SlidingLog:
		return slidingLogLua, nil
	case SlidingCounter:
		return slidingCounterLua, nil
	case FixedWindow:
		return fixedWindowLua, nil
	}
	return "", fmt.Errorf("%w: no Lua script for algorithm %q", ErrInvalidRule, string(name))
}

// LuaArgs returns the ARGV of one call of the rule's script: a step at now
// (ms since the Unix epoch, or LuaServerTime) for a request of the given
// cost, that consumes (take) or only looks (peek: the script then makes no
// writes and can run with EVALSHA_RO). The rule, cost and now must be valid;
// see Rule.Validate, Rule.ValidateCost and MaxLuaTime.
func (r Rule) LuaArgs(now, cost int64, take bool) []string {
	// One buffer and one string for the numbers, sliced into the four
	// numeric arguments.
	var buf [4 * 20]byte
	b := buf[:0]
	var ends [4]int
	for i, v := range [4]int64{now, r.Window.Milliseconds(), r.Limit, cost} {
		b = strconv.AppendInt(b, v, 10)
		ends[i] = len(b)
	}
	s := string(b)
	mode := "0"
	if take {
		mode = "1"
	}
	return []string{s[:ends[0]], s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]], mode}
}
