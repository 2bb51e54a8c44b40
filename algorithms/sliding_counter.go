package algorithms

import (
	_ "embed"
	"math/bits"
	"time"
)

// slidingCounter is SlidingCounter's descriptor.
var slidingCounter = Algorithm{
	Name:         SlidingCounter,
	Suffix:       ":sc",
	Salt:         0xc2b2ae3d27d4eb4f,
	Accuracy:     Approximate,
	Take:         slidingCounterTake,
	Peek:         slidingCounterPeek,
	Refund:       slidingCounterRefund,
	GiveBack:     slidingCounterGiveBack,
	Charge:       slidingCounterCharge,
	ChargedAt:    countersChargedAt,
	LimitBound:   func(int64) int64 { return MaxLimit },
	CountedUntil: func(now, w int64) int64 { return now - now%w + 2*w },
	Lua:          slidingCounterLua,
	Examples: Examples{Limit: 3, Window: 10 * time.Second, Steps: []Example{
		// The current window runs 0-10 s; its count weighs on the
		// next window, so the key is free at 20 s.
		take(0, 1, true, 2, 0, 20*sec),
		take(0, 1, true, 1, 0, 20*sec),
		take(1*sec, 1, true, 0, 0, 19*sec),
		// In the next window the 3 weigh 3*(10 s-e)/10 s; they fall
		// to 2 (room for 1) at e = 3.334 s, i.e. at 13.334 s.
		take(2*sec, 1, false, 0, 11334*msec, 18*sec),
		peek(2*sec, 1, false, 0, 11334*msec, 18*sec),
		take(9999*msec, 1, false, 0, 3335*msec, 10001*msec),
		take(10*sec, 1, false, 0, 3334*msec, 10*sec),
		take(13334*msec, 1, true, 0, 0, 16666*msec),
		// At 15 s the previous 3 weigh 1.5, counted as 2; with the 1
		// in this window there is no room until they weigh 1, at
		// e = 6.667 s.
		take(15*sec, 1, false, 0, 1667*msec, 15*sec),
		take(16667*msec, 1, true, 0, 0, 13333*msec),
		peek(30*sec, 3, true, 3, 0, 0),
	}},
}

//go:embed sliding_counter.lua
var slidingCounterLua string

// slidingCounterRefund gives units back to the window that took them: the
// current one, or the previous one after a roll.
func slidingCounterRefund(s *State, at, w, _, cost int64) {
	switch c := s.counters(); {
	case c.start == at:
		c.current -= min(cost, c.current)
	case c.start == at+w:
		c.previous -= min(cost, c.previous)
	}
}

// slidingCounterGiveBack gives units back to the window holding now: the
// current one, or the previous one when the clock went back into it.
func slidingCounterGiveBack(s *State, now, w, limit, cost int64) {
	slidingCounterRefund(s, now-now%w, w, limit, cost)
}

// The sliding window counter keeps two fixed windows: current (units admitted
// in the window that holds now) and previous (units in the one before). The
// estimate at elapsed time e into the current window is
//
//	current + ceil(previous * weight(e))
//
// where weight(e) is (w-e)/w rounded up to a multiple of 1/weightScale. The
// rounding is upwards everywhere, so the estimate never undercounts the exact
// weighted sum, and every product stays below 2^53: the Lua twin computes the
// same integers.

// weightScale is the resolution of the previous window's weight.
const weightScale = 1 << 16

// slidingCounterRoll moves s to the window holding now and returns the elapsed
// time into it. When now is before the recorded window (the clock went back),
// the state is left alone and the elapsed time is 0: the previous window then
// counts in full.
func slidingCounterRoll(s *counters, now, w int64) int64 {
	ws := windowStart(s.start, now, w)
	if ws < s.start {
		return 0
	}
	if ws > s.start {
		if ws-s.start <= w {
			s.previous = s.current
		} else {
			s.previous = 0
		}
		s.current, s.start = 0, ws
	}
	return now - ws
}

// weighted returns ceil(previous * ceil((w-e)*S/w) / S) with S = weightScale.
func weighted(previous, e, w int64) int64 {
	if previous == 0 {
		return 0
	}
	wq := ceilDiv((w-e)*weightScale, w)
	return (previous/weightScale)*wq + ceilDiv((previous%weightScale)*wq, weightScale)
}

// earliestElapsed returns the smallest elapsed time e in [0, w] at which
// weighted(count, e, w) <= room, or w when no e inside the window works.
// It requires 0 <= room.
func earliestElapsed(count, room, w int64) int64 {
	if count <= room {
		return 0
	}
	// weighted <= room  <=>  wq <= floor(room*S/count); room < count, so the
	// quotient is below S. The 128-bit division keeps it exact.
	hi, lo := bits.Mul64(uint64(room), weightScale)
	maxWeight, _ := bits.Div64(hi, lo, uint64(count))
	return w - int64(maxWeight)*w/weightScale
}

// slidingCounterCharge adds cost to the current window whatever is left:
// the weighted count may pass the limit, and refuses until it has slid
// below it.
func slidingCounterCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	c := s.counters()
	if !record {
		view := *c
		c = &view
	}
	e := slidingCounterRoll(c, now, w)
	c.current += cost
	out := Outcome{Allowed: true, Remaining: max(limit-weighted(c.previous, e, w)-c.current, 0)}
	out.ResetAfter = c.start + 2*w - now
	return out
}

func slidingCounterTake(s *State, now, w, limit, cost int64) Outcome {
	c := s.counters()
	e := slidingCounterRoll(c, now, w)
	return slidingCounterDecide(c, now, e, w, limit, cost, true)
}

func slidingCounterPeek(s *State, now, w, limit, cost int64) Outcome {
	view := *s.counters()
	e := slidingCounterRoll(&view, now, w)
	return slidingCounterDecide(&view, now, e, w, limit, cost, false)
}

func slidingCounterDecide(s *counters, now, e, w, limit, cost int64, consume bool) Outcome {
	room := limit - weighted(s.previous, e, w) - s.current
	var out Outcome
	if cost <= room {
		out.Allowed = true
		if consume {
			s.current += cost
			room -= cost
		}
	} else {
		out.RetryAfter = s.start + e + slidingCounterWait(s, e, w, limit, cost) - now
	}
	out.Remaining = max(room, 0)
	switch {
	case s.current > 0:
		out.ResetAfter = s.start + 2*w - now
	case s.previous > 0:
		out.ResetAfter = s.start + w - now
	}
	return out
}

// slidingCounterWait returns how long after elapsed time e a denied request
// of the given cost would first be admitted if nothing else were.
func slidingCounterWait(s *counters, e, w, limit, cost int64) int64 {
	// Later in the current window: the previous window's weight shrinks.
	if room := limit - s.current - cost; room >= 0 {
		if at := earliestElapsed(s.previous, room, w); at < w {
			return at - e
		}
	}
	// In the next window, current becomes the weighted previous one.
	return w - e + earliestElapsed(s.current, limit-cost, w)
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
