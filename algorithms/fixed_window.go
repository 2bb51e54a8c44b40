package algorithms

import (
	_ "embed"
	"time"
)

// fixedWindow is FixedWindow's descriptor.
var fixedWindow = Algorithm{
	Name:       FixedWindow,
	Suffix:     ":fw",
	Salt:       0x165667b19e3779f9,
	Take:       fixedWindowTake,
	Peek:       fixedWindowPeek,
	Refund:     fixedWindowRefund,
	GiveBack:   fixedWindowGiveBack,
	ChargedAt:  countersChargedAt,
	LimitBound: func(int64) int64 { return MaxLimit },
	// The window's whole count goes at its end, and nothing before.
	MoreAfter: func(_, _, _, resetAfter int64) (int64, bool) { return resetAfter, resetAfter > 0 },
	Lua:       fixedWindowLua,
	Examples: Examples{Limit: 3, Window: 10 * time.Second, Steps: []Example{
		take(0, 1, true, 2, 0, 10*sec),
		take(0, 1, true, 1, 0, 10*sec),
		take(1*sec, 1, true, 0, 0, 9*sec),
		take(2*sec, 1, false, 0, 8*sec, 8*sec),
		peek(2*sec, 1, false, 0, 8*sec, 8*sec),
		take(9999*msec, 1, false, 0, 1*msec, 1*msec),
		// A new window starts at 10 s with the full limit.
		take(10*sec, 1, true, 2, 0, 10*sec),
		take(10*sec, 2, true, 0, 0, 10*sec),
		take(11*sec, 2, false, 0, 9*sec, 9*sec),
		peek(19999*msec, 1, false, 0, 1*msec, 1*msec),
		peek(20*sec, 3, true, 3, 0, 0),
	}},
}

//go:embed fixed_window.lua
var fixedWindowLua string

// countersChargedAt is where the counters (FixedWindow, SlidingCounter)
// charged a take: the start of the current window.
func countersChargedAt(s *State, _ int64) int64 { return s.counters().start }

// fixedWindowRefund gives units back to the window that took them, while
// it is the current one.
func fixedWindowRefund(s *State, at, _, _, cost int64) {
	if c := s.counters(); c.start == at {
		c.current -= min(cost, c.current)
	}
}

// fixedWindowGiveBack gives units back to the window holding now, while
// it is the recorded one.
func fixedWindowGiveBack(s *State, now, w, limit, cost int64) {
	fixedWindowRefund(s, now-now%w, w, limit, cost)
}

// The fixed window counts units per window aligned to the Unix epoch:
// [k*w, (k+1)*w). State (counters): start (the window's start) and current
// (units admitted in it). A request carrying a time in an earlier window than the one
// recorded (the clock went back) is counted against the recorded window.

func fixedWindowRoll(start, current, now, w int64) (int64, int64) {
	if ws := windowStart(start, now, w); ws > start {
		return ws, 0
	}
	return start, current
}

func fixedWindowTake(s *State, now, w, limit, cost int64) Outcome {
	c := s.counters()
	c.start, c.current = fixedWindowRoll(c.start, c.current, now, w)
	return fixedWindowDecide(c, now, w, limit, cost, true)
}

func fixedWindowPeek(s *State, now, w, limit, cost int64) Outcome {
	c := s.counters()
	var view counters
	view.start, view.current = fixedWindowRoll(c.start, c.current, now, w)
	return fixedWindowDecide(&view, now, w, limit, cost, false)
}

func fixedWindowDecide(c *counters, now, w, limit, cost int64, consume bool) Outcome {
	end := c.start + w - now
	if cost > limit-c.current {
		return Outcome{Remaining: max(limit-c.current, 0), RetryAfter: end, ResetAfter: end}
	}
	if consume {
		c.current += cost
	}
	out := Outcome{Allowed: true, Remaining: limit - c.current}
	if c.current > 0 {
		out.ResetAfter = end
	}
	return out
}
