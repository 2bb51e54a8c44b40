package algorithms

// GCRA, the generic cell rate algorithm: a token bucket of Limit units that
// refills one unit every Window/Limit ms (the emission interval T) and
// admits a request of cost n when n units are in it. A full bucket admits
// Limit units at once (burst = Limit); afterwards units come back at the
// rate, so any window of length Window admits at most 2*Limit-1 units, and
// over a long run Limit per Window.
//
// The classic formulation keeps the theoretical arrival time (TAT): the
// moment the bucket is full again, admitting at now when
// max(TAT, now) + n*T - Window <= now. T is fractional, so the state keeps
// the TAT as a debt measured in 1/Limit ms: debt = (TAT - last) * Limit, where
// last is the time of the newest admission. A unit costs Window in those
// units, the bucket holds at most Window*Limit of debt, and a millisecond
// pays back Limit. Rules keep Window*Limit <= 2^53 (see Rule.LimitBound),
// so every value is an exact integer in a float64 and the Lua twin computes
// the same numbers.
//
// State: start = last, current = debt, previous = the limit the debt was
// counted in (0 for an empty key). A request stamped before last (the clock
// went back, or requests arrived out of order) is decided at last: it sees
// no more allowance than the newest admission left. When the limit changes
// under a key, its debt is turned into whole milliseconds, rounded up, and
// counted in the new limit's units; when the window shrinks, the debt is
// capped at a full bucket.
//
// Outcomes: Remaining is the whole units in the bucket, RetryAfter the
// first millisecond at which cost units are, ResetAfter when it is full. A
// refund undoes an admission exactly while it is the newest (see
// gcraRefund), else gives nothing back. The Redis key expires when the
// bucket is full again, plus LuaExpiryMargin.

// gcraDebt returns the effective time of a request at now and the key's
// debt at that time, in units of the rule's limit.
func gcraDebt(s *State, now, w, limit int64) (e, debt int64) {
	last, debt := s.start, s.current
	if s.previous != limit && s.previous != 0 {
		debt = min(ceilDiv(debt, s.previous), w) * limit
	} else {
		debt = min(debt, w*limit)
	}
	e = max(now, last)
	if e-last >= w {
		return e, 0
	}
	return e, max(debt-(e-last)*limit, 0)
}

func gcraTake(s *State, now, w, limit, cost int64) Outcome {
	e, debt := gcraDebt(s, now, w, limit)
	allowed := debt <= w*limit-cost*w
	if allowed {
		debt += cost * w
		s.start, s.current, s.previous = e, debt, limit
	}
	return gcraOutcome(allowed, e, debt, now, w, limit, cost)
}

func gcraPeek(s *State, now, w, limit, cost int64) Outcome {
	e, debt := gcraDebt(s, now, w, limit)
	return gcraOutcome(debt <= w*limit-cost*w, e, debt, now, w, limit, cost)
}

// gcraOutcome reports on a key with the given debt at e.
func gcraOutcome(allowed bool, e, debt, now, w, limit, cost int64) Outcome {
	out := Outcome{Allowed: allowed, Remaining: (w*limit - debt) / w}
	if !allowed {
		// Paid back at Limit per ms until cost fits.
		out.RetryAfter = e + ceilDiv(debt-(w*limit-cost*w), limit) - now
	}
	if debt > 0 {
		out.ResetAfter = e + ceilDiv(debt, limit) - now
	}
	return out
}

// gcraRefund takes cost units off the debt when the admission being undone
// (made at at) is still the newest one and the limit has not changed: then
// no later admission found the bucket fuller than it would have been
// without it, and the debt is exactly what it would be. Otherwise nothing
// is given back.
func gcraRefund(s *State, at, w, limit, cost int64) {
	if s.start == at && s.previous == limit && s.current > 0 {
		s.current = max(s.current-cost*w, 0)
	}
}
