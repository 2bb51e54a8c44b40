package algorithms

// The fixed window counts units per window aligned to the Unix epoch:
// [k*w, (k+1)*w). State: start (the window's start) and current (units
// admitted in it). A request carrying a time in an earlier window than the one
// recorded (the clock went back) is counted against the recorded window.

func fixedWindowRoll(start, current, now, w int64) (int64, int64) {
	if ws := windowStart(start, now, w); ws > start {
		return ws, 0
	}
	return start, current
}

func fixedWindowTake(s *State, now, w, limit, cost int64) Outcome {
	s.start, s.current = fixedWindowRoll(s.start, s.current, now, w)
	return fixedWindowDecide(s, now, w, limit, cost, true)
}

func fixedWindowPeek(s *State, now, w, limit, cost int64) Outcome {
	view := State{}
	view.start, view.current = fixedWindowRoll(s.start, s.current, now, w)
	return fixedWindowDecide(&view, now, w, limit, cost, false)
}

func fixedWindowDecide(s *State, now, w, limit, cost int64, consume bool) Outcome {
	end := s.start + w - now
	if cost > limit-s.current {
		return Outcome{Remaining: max(limit-s.current, 0), RetryAfter: end, ResetAfter: end}
	}
	if consume {
		s.current += cost
	}
	out := Outcome{Allowed: true, Remaining: limit - s.current}
	if s.current > 0 {
		out.ResetAfter = end
	}
	return out
}
