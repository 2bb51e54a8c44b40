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
	Charge:     compactLogCharge,
	ChargedAt:  logChargedAt,
	LimitBound: logLimitBound,
	LimitNote:  logLimitNote,
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

// compactLogCharge is slidingLogCharge for the logs kept in one string
// (compact_log, a heavy two_level key), whose header counts entries in 16
// bits: a charge also forgets the oldest live entries beyond twice
// MaxSlidingLogLimit. Every decision, at any limit, reads only the newest
// limit live entries (a request is refused while limit of them are live),
// so none changes, and the log keeps at most 20,000 entries live and as
// many slid out. A bound by the request's limit would not do: a process
// at a higher limit (a rolling reload) still counts the entries.
func compactLogCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	if !record {
		return slidingLogCharge(s, now, w, limit, cost, false)
	}
	cost = min(cost, limit)
	l := &s.log
	l.dropOldest(l.countUpTo(now - 2*w))
	l.fit(limit)
	expired := l.countUpTo(now - w)
	l.insert(now, cost, limit)
	live := l.size() - expired
	if k := live - 2*MaxSlidingLogLimit; k > 0 {
		l.removeAt(expired, k)
		live -= k
	}
	return Outcome{Allowed: true, Remaining: max(limit-live, 0), ResetAfter: l.at(l.size()-1) + w - now}
}
