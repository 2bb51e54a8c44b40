package algorithms

import _ "embed"

// compactLog is CompactLog's descriptor: the sliding log's decisions and Go
// steps (sliding_log.go), with a Lua twin that stores the log in Redis as
// one string of 7-byte timestamps (compact_log.lua, over loglib.lua)
// instead of a sorted set.
var compactLog = Algorithm{
	Name:       CompactLog,
	Suffix:     ":cl",
	Salt:       0x27d4eb2f165667c5,
	Accuracy:   Exact,
	Take:       slidingLogTake,
	Peek:       slidingLogPeek,
	Refund:     logRefund,
	GiveBack:   logGiveBack,
	ChargedAt:  logChargedAt,
	LimitBound: logLimitBound,
	LimitNote:  logLimitNote,
	ChargeNote: chargeNote,
	Lua:        logLib + compactLogLua,
	Examples:   slidingLogExamples,
}

//go:embed compact_log.lua
var compactLogLua string

// logLib holds the helpers of the logs kept in one string (compact_log.lua,
// two_level.lua).
//
//go:embed loglib.lua
var logLib string
