package algorithms

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"
)

// The Lua twins of the Go steps. Each algorithm's body (sliding_log.lua,
// ...) becomes a Lua function step(key, now, w, limit, cost, take, refund)
// after the shared prelude (prelude.lua). LuaScript wraps one of them for
// single requests (single.lua: one key, the ARGV built by Rule.LuaArgs);
// LuaMultiScript holds them all for requests decided together (multi.lua).
// The Redis stores run them; they hold no algorithm math of their own.

//go:embed prelude.lua
var preludeLua string

//go:embed single.lua
var singleLua string

//go:embed multi.lua
var multiLua string

//go:embed batch.lua
var batchLua string

//go:embed sliding_log.lua
var slidingLogBody string

//go:embed sliding_counter.lua
var slidingCounterBody string

//go:embed fixed_window.lua
var fixedWindowBody string

//go:embed loglib.lua
var logLib string

//go:embed compact_log.lua
var compactLogBody string

//go:embed two_level.lua
var twoLevelBody string

//go:embed gcra.lua
var gcraBody string

// luaBodies maps each algorithm to its body. The string logs share their
// helpers (loglib.lua).
var luaBodies = map[Name]string{
	SlidingLog:     slidingLogBody,
	SlidingCounter: slidingCounterBody,
	FixedWindow:    fixedWindowBody,
	CompactLog:     logLib + compactLogBody,
	TwoLevel:       logLib + twoLevelBody,
	GCRA:           gcraBody,
}

// luaStep wraps an algorithm's body as the local function fn.
func luaStep(fn, body string) string {
	return "local function " + fn + "(key, now, w, limit, cost, take, refund, at)\n" + body + "end\n"
}

// The scripts as sent to Redis, built once.
var (
	singleScripts = map[Name]string{}
	multiScript   string
	batchScript   string
)

func init() {
	steps := "local STEPS = {}\n"
	multi := preludeLua
	for _, name := range Names() {
		body := luaBodies[name]
		singleScripts[name] = preludeLua + luaStep("step", body) + singleLua
		fn := "step_" + string(name)
		multi += luaStep(fn, body)
		steps += "STEPS['" + string(name) + "'] = " + fn + "\n"
	}
	multiScript = multi + steps + multiLua
	batchScript = multi + steps + batchLua
}

// LuaRefundArgs returns the ARGV of a refund of cost units that a take
// recorded at at (its reply's LuaReplyAt), reporting at now.
func (r Rule) LuaRefundArgs(now, at, cost int64) []string {
	return append(r.LuaArgs(now, cost, LuaRefund), strconv.FormatInt(at, 10))
}

var luaModes = [...]string{LuaPeek: "0", LuaTake: "1", LuaRefund: "2"}

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

// The positions of an Outcome's fields in a script's reply for one request,
// and of where its admission was recorded (see Rule.ChargedAt), which a
// refund must name.
const (
	LuaReplyAllowed = iota
	LuaReplyRemaining
	LuaReplyRetryAfter
	LuaReplyResetAfter
	// LuaReplyAt is where an admission was recorded.
	LuaReplyAt
	// LuaReplyLen is the number of integers in a reply for one request.
	LuaReplyLen
)

// LuaScript returns the source of the named algorithm's Lua twin. The error
// wraps ErrInvalidRule for an unknown name.
func LuaScript(name Name) (string, error) {
	if s, ok := singleScripts[name]; ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: no Lua script for algorithm %q", ErrInvalidRule, string(name))
}

// LuaMultiScript returns the script that decides several requests all or
// nothing: KEYS are the requests' keys, ARGV is now (ms, or LuaServerTime)
// followed by each request's LuaMultiArgs. Its reply is 1 when all were
// admitted (else 0) and LuaReplyLen integers per request.
func LuaMultiScript() string { return multiScript }

// LuaBatchScript returns the script that decides several independent takes
// one after the other in one call: KEYS are the requests' keys, ARGV holds
// each request's LuaBatchArgs. Its reply holds LuaReplyLen values per
// request: a take's integers, or, for a request whose step failed (a key of
// the wrong type), the error in place of the first value and 0s.
func LuaBatchScript() string { return batchScript }

// LuaBatchArgs appends to args the five values batch.lua reads for a take
// of cost units at now (ms, or LuaServerTime). buf is scratch space the
// numbers are formatted in; the returned strings share one allocation.
func (r Rule) LuaBatchArgs(args []string, buf []byte, now, cost int64) ([]string, []byte) {
	start := len(buf)
	var ends [4]int
	for i, v := range [4]int64{now, r.Window.Milliseconds(), r.Limit, cost} {
		buf = strconv.AppendInt(buf, v, 10)
		ends[i] = len(buf) - start
	}
	s := string(buf[start:])
	return append(args, s[:ends[0]], string(r.Algorithm), s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]]), buf[:start]
}

// LuaMultiArgs appends to args the four values multi.lua reads for one
// request of the rule with the given cost.
func (r Rule) LuaMultiArgs(args []string, cost int64) []string {
	return append(args, string(r.Algorithm), strconv.FormatInt(r.Window.Milliseconds(), 10),
		strconv.FormatInt(r.Limit, 10), strconv.FormatInt(cost, 10))
}

// LuaMode says what one call of a single-request script does.
type LuaMode uint8

// The modes of a single-request script.
const (
	// LuaPeek reports without writing (it may run with EVALSHA_RO).
	LuaPeek LuaMode = iota
	// LuaTake decides and, when admitted, consumes.
	LuaTake
	// LuaRefund gives back what a take admitted (see Rule.Refund), then
	// reports as LuaPeek does. Its arguments come from LuaRefundArgs.
	LuaRefund
)

// LuaArgs returns the ARGV of one call of the rule's script: a step in the
// given mode at now (ms since the Unix epoch, or LuaServerTime) for a
// request of the given cost. The rule, cost and now must be valid; see
// Rule.Validate, Rule.ValidateCost and MaxLuaTime.
func (r Rule) LuaArgs(now, cost int64, mode LuaMode) []string {
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
	return []string{s[:ends[0]], s[ends[0]:ends[1]], s[ends[1]:ends[2]], s[ends[2]:ends[3]], luaModes[mode]}
}
