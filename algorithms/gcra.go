package algorithms

import (
	_ "embed"
	"time"
	"unsafe"
)

// gcra is GCRA's descriptor.
var gcra = Algorithm{
	Name:       GCRA,
	Suffix:     ":gc",
	Salt:       0xd6e8feb86659fd93,
	Accuracy:   Approximate,
	Refills:    true,
	Take:       gcraTake,
	Peek:       gcraPeek,
	Refund:     gcraRefund,
	GiveBack:   gcraGiveBack,
	Charge:     gcraCharge,
	ChargedAt:  func(s *State, _ int64) int64 { return s.gcra().last },
	LimitBound: gcraLimitBound,
	// Its debt, in units of 1/Limit ms, has the limit's bound.
	ChargeBound: gcraLimitBound,
	MoreAfter:   gcraMoreAfter,
	LimitNote:   " (limit × window in ms must be at most 2^53); lengthen the limit's unit or shorten the window",
	Lua:         gcraLua,
	Examples: Examples{Limit: 3, Window: 10 * time.Second, Steps: []Example{
		// A unit every 10 s/3 = 3333.3 ms; a full bucket holds 3.
		take(0, 1, true, 2, 0, 3334*msec),
		take(0, 1, true, 1, 0, 6667*msec),
		// 1 s refilled 0.3 units: 0.3 left, rounded down.
		take(1*sec, 1, true, 0, 0, 9*sec),
		// 2.4 units in use: one fits at 1 s + 0.4 units later.
		take(2*sec, 1, false, 0, 1334*msec, 8*sec),
		peek(2*sec, 1, false, 0, 1334*msec, 8*sec),
		take(3334*msec, 1, true, 0, 0, 10*sec),
		take(4*sec, 2, false, 0, 6*sec, 9334*msec),
		// Stamped before the newest admission (3.334 s): decided at
		// that time.
		take(3*sec, 1, false, 0, 3667*msec, 10334*msec),
		peek(20*sec, 3, true, 3, 0, 0),
		take(20*sec, 3, true, 0, 0, 10*sec),
	}},
}

//go:embed gcra.lua
var gcraLua string

// gcraLimitBound keeps limit × window in ms within 2^53: the debt is
// counted in units of 1/limit ms. A window of 0 ms stands for any window.
func gcraLimitBound(w int64) int64 {
	if w < 1 {
		return MaxLimit
	}
	return MaxLimit / w
}

// gcraState is GCRA's view of a State's words.
type gcraState struct {
	// last is the time of the newest admission, debt the bucket's debt at
	// last in units of 1/counted ms, counted the limit the debt was
	// counted in (0 for an empty key).
	last, debt, counted int64
}

// gcra returns the State's words as GCRA's.
func (s *State) gcra() *gcraState { return (*gcraState)(unsafe.Pointer(&s.words)) }

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
// State (gcraState): last, debt, and the limit the debt was counted in (0
// for an empty key). A request stamped before last (the clock
// went back, or requests arrived out of order) is decided at last: it sees
// no more allowance than the newest admission left. When the limit changes
// under a key, its debt is turned into whole milliseconds, rounded up, and
// counted in the new limit's units; when the window shrinks, the debt is
// capped at a full bucket.
//
// Outcomes: Remaining is the whole units in the bucket, RetryAfter the
// first millisecond at which cost units are, ResetAfter when it is full. A
// refund undoes an admission exactly while it is the newest (see
// gcraRefund), else gives nothing back. A key is kept while the
// bucket refills, then as Rule.KeyTTL says.

// gcraDebt returns the effective time of a request at now and the key's
// debt at that time, in units of the rule's limit.
func gcraDebt(g *gcraState, now, w, limit int64) (e, debt int64) {
	last, debt := g.last, g.debt
	if g.counted != limit && g.counted != 0 {
		debt = min(ceilDiv(debt, g.counted), w) * limit
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
	g := s.gcra()
	e, debt := gcraDebt(g, now, w, limit)
	allowed := debt <= w*limit-cost*w
	if allowed {
		debt += cost * w
		g.last, g.debt, g.counted = e, debt, limit
	}
	return gcraOutcome(allowed, e, debt, now, w, limit, cost)
}

// gcraCharge adds cost to the debt whatever is left. Debt beyond a full
// bucket moves the state's time past now (the TAT past now + burst), where
// a clock step back already counts as debt: later requests are refused
// until it has drained. The move is rounded up to the ms (never early).
// cost*w stays below 2^53 (Rule.ChargeBound).
func gcraCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	g := s.gcra()
	e, debt := gcraDebt(g, now, w, limit)
	if room := w*limit - debt; cost*w <= room {
		debt += cost * w
	} else {
		e += ceilDiv(cost*w-room, limit)
		debt = w * limit
	}
	if record {
		g.last, g.debt, g.counted = e, debt, limit
	}
	out := gcraOutcome(true, e, debt, now, w, limit, cost)
	return out
}

func gcraPeek(s *State, now, w, limit, cost int64) Outcome {
	e, debt := gcraDebt(s.gcra(), now, w, limit)
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
	if g := s.gcra(); g.last == at && g.counted == limit && g.debt > 0 {
		g.debt = max(g.debt-cost*w, 0)
	}
}

// gcraGiveBack pays back up to cost units of the debt the bucket holds at
// now (in the rule's limit), never below empty.
func gcraGiveBack(s *State, now, w, limit, cost int64) {
	g := s.gcra()
	e, debt := gcraDebt(g, now, w, limit)
	if debt > 0 {
		g.last, g.debt, g.counted = e, max(debt-cost*w, 0), limit
	}
}

// gcraMoreAfter: the bucket drains one unit every w/limit ms and is empty
// at resetAfter, so one more unit is free (limit-remaining-1) units' drain
// before that, rounded up to the ms. In ms*limit units every value stays
// below 2^63: limit*w is at most 2^53 (LimitBound).
func gcraMoreAfter(w, limit, remaining, resetAfter int64) (int64, bool) {
	if limit <= 0 || remaining < 0 || remaining >= limit || resetAfter <= 0 || w <= 0 {
		return 0, false
	}
	num := resetAfter*limit - w*(limit-remaining-1)
	if num <= 0 {
		return 0, false
	}
	return (num + limit - 1) / limit, true
}
