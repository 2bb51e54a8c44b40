package algorithms

import (
	_ "embed"
	"time"
)

// slidingLog is SlidingLog's descriptor. CompactLog (compact_log.go) makes
// the same decisions with the same Go steps.
var slidingLog = Algorithm{
	Name:       SlidingLog,
	Suffix:     ":sl",
	Salt:       0x9e3779b97f4a7c15,
	Accuracy:   Exact,
	Take:       slidingLogTake,
	Peek:       slidingLogPeek,
	Refund:     logRefund,
	GiveBack:   logGiveBack,
	Charge:     slidingLogCharge,
	ChargedAt:  logChargedAt,
	LimitBound: logLimitBound,
	LimitNote:  logLimitNote,
	Lua:        slidingLogLua,
	Examples:   slidingLogExamples,
}

//go:embed sliding_log.lua
var slidingLogLua string

// slidingLogExamples are the sliding log's steps on 3 per 10 s; CompactLog
// decides the same.
var slidingLogExamples = Examples{Limit: 3, Window: 10 * time.Second, Steps: []Example{
	take(0, 1, true, 2, 0, 10*sec),
	take(0, 1, true, 1, 0, 10*sec),
	take(1*sec, 1, true, 0, 0, 10*sec),
	// Full: the oldest entry (at 0) slides out at 10 s.
	take(2*sec, 1, false, 0, 8*sec, 9*sec),
	peek(2*sec, 1, false, 0, 8*sec, 9*sec),
	take(9999*msec, 1, false, 0, 1*msec, 1001*msec),
	// Boundary: entries at now-window have slid out.
	take(10*sec, 1, true, 1, 0, 10*sec),
	// Cost 2 needs one more slot: the entry at 1 s leaves at 11 s.
	take(10*sec, 2, false, 1, 1*sec, 10*sec),
	peek(10*sec, 1, true, 1, 0, 10*sec),
	take(11*sec, 2, true, 0, 0, 10*sec),
	// Cost 3 needs all three: the newest (11 s) leaves at 21 s.
	take(12*sec, 3, false, 0, 9*sec, 9*sec),
	peek(25*sec, 1, true, 3, 0, 0),
}}

// The logs (SlidingLog, CompactLog) record a take at its time and refund
// by removing timestamps; their limit is bounded by memory, whatever the
// window.
func logChargedAt(_ *State, now int64) int64 { return now }

func logRefund(s *State, at, _, _, cost int64) { s.log.remove(at, cost) }

// logGiveBack removes up to cost of the newest timestamps still inside
// the window at now; those that slid out stay.
func logGiveBack(s *State, now, w, _, cost int64) {
	l := &s.log
	l.dropNewest(min(cost, l.size()-l.countUpTo(now-w)))
}

func logLimitBound(int64) int64 { return MaxSlidingLogLimit }

const logLimitNote = ` (it stores one timestamp per unit); use "sliding_counter", "gcra" or "fixed_window" for larger limits`

// The sliding log records one timestamp per admitted unit of cost, oldest
// first, and admits a request when the units with a timestamp after
// now-window, plus its cost, fit within the limit. A timestamp t has slid out
// at now when t <= now-window. Timestamps later than now (the clock went
// back) keep counting until they slide out.
//
// Requests can arrive out of timestamp order (callers read their clocks
// before their requests reach the store). So that every window of
// timestamps holds at most the limit whatever the arrival order, a timestamp
// that slid out is kept for one more window, where a late request's window
// can still see it; only older ones are forgotten. Retention is by time
// alone, never by count: processes with different limits share a key (a
// rolling reload), and a request at a lower limit must not forget units a
// request at a higher one still counts. So the log holds at most two
// windows' units, twice the largest limit in force, and Remaining is 0
// while it holds more than the request's limit.

func slidingLogTake(s *State, now, w, limit, cost int64) Outcome {
	return slidingLogStep(s, now, w, limit, cost, false)
}

// slidingLogStep is a take, or with charge a charge of cost (at most
// limit), admitted whatever is left.
func slidingLogStep(s *State, now, w, limit, cost int64, charge bool) Outcome {
	l := &s.log
	// Forget what slid out a window ago, count what slid out since: by
	// binary search, since a busy key keeps up to a window of slid-out
	// entries; the oldest alone answers when nothing slid out.
	size := l.size()
	forgotten, expired := int64(0), int64(0)
	if size > 0 && l.at(0) <= now-w {
		forgotten = l.countUpTo(now - 2*w)
		expired = l.countUpTo(now - w)
	}
	l.dropOldest(forgotten)
	l.fit(limit)
	size -= forgotten
	expired -= forgotten
	live := size - expired
	out := Outcome{Remaining: max(limit-live, 0)}
	if charge || live+cost <= limit {
		l.insert(now, cost, limit)
		size += cost
		out.Allowed = true
		out.Remaining = max(limit-live-cost, 0)
	} else {
		// The (live+cost-limit)-th oldest live timestamp must slide out.
		out.RetryAfter = l.at(size+cost-limit-1) + w - now
	}
	out.ResetAfter = l.at(size-1) + w - now
	return out
}

// slidingLogCharge records min(cost, limit) units at now whatever is left.
// The cap keeps the debt exact: every decision reads only the newest limit
// units (a request is refused while limit of them are live, and its
// RetryAfter is the time of the limit-cost'th newest), so units beyond
// limit in one charge change nothing, and a log's memory stays bounded.
func slidingLogCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	cost = min(cost, limit)
	if record {
		return slidingLogStep(s, now, w, limit, cost, true)
	}
	l := s.log
	live := l.size() - l.countUpTo(now-w)
	newest := now
	if n := l.size(); n > 0 {
		newest = max(newest, l.at(n-1))
	}
	return Outcome{Allowed: true, Remaining: max(limit-live-cost, 0), ResetAfter: newest + w - now}
}

func slidingLogPeek(s *State, now, w, limit, cost int64) Outcome {
	l := s.log
	expired := l.countUpTo(now - w)
	live := l.size() - expired
	out := Outcome{Allowed: live+cost <= limit, Remaining: max(limit-live, 0)}
	if !out.Allowed {
		out.RetryAfter = l.at(expired+live+cost-limit-1) + w - now
	}
	if live > 0 {
		out.ResetAfter = l.at(l.size()-1) + w - now
	}
	return out
}
