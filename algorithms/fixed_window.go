package algorithms

import (
	_ "embed"
	"time"
	"unsafe"
)

// fixedWindow is FixedWindow's descriptor.
var fixedWindow = Algorithm{
	Name:         FixedWindow,
	Suffix:       ":fw",
	Salt:         0x165667b19e3779f9,
	Accuracy:     PerAlignedWindow,
	Take:         fixedWindowTake,
	Peek:         fixedWindowPeek,
	Refund:       fixedWindowRefund,
	GiveBack:     fixedWindowGiveBack,
	Charge:       fixedWindowCharge,
	ChargedAt:    fixedWindowChargedAt,
	LimitBound:   func(int64) int64 { return MaxFixedWindowLimit },
	CountedUntil: func(now, w int64) int64 { return now - now%w + w },
	PerWindow:    true,
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

// MaxFixedWindowLimit is the largest limit of a fixed window: 2^43. The
// Redis stores keep a window's count below 2^44 in its key, above it the
// epoch a Reset moved it to (internal/rediswire/epoch.go), so that a refund
// in flight at a Reset cannot give back units taken after it.
const MaxFixedWindowLimit = int64(1) << 43

//go:embed fixed_window.lua
var fixedWindowLua string

// countersChargedAt is where the sliding counter charged a take: the
// start of the current window.
func countersChargedAt(s *State, _ int64) int64 { return s.counters().start }

// fixedWindowChargedAt is where a fixed window charged a take at now: the
// start of the window holding now, the latest kept unless that starts
// after now (a take in the window before it).
func fixedWindowChargedAt(s *State, now int64) int64 {
	if f := s.fixedWindow(); f.start > now {
		return f.previousStart
	}
	return s.fixedWindow().start
}

// The fixed window counts units per window aligned to the Unix epoch,
// [k*w, (k+1)*w), each request in the window holding its own time: the
// Redis stores keep one counter per window (a key named by the window's
// start, INCRBY and an expiry), as envoyproxy/ratelimit does. State
// (fixedWindowState): the latest window counted in and the one counted in
// before it (a request whose time falls in the window before the latest,
// such as one from a host whose clock is a little behind, counts there).
// A window older than both counts from zero, and takes the place of the
// one before; Redis keeps every window's key until it expires, two windows
// after its end.

// fixedWindowState is a fixed window's view of a State's words.
type fixedWindowState struct {
	start, current, previousStart, previous int64
}

// fixedWindow returns the State's words as a fixed window's.
func (s *State) fixedWindow() *fixedWindowState {
	return (*fixedWindowState)(unsafe.Pointer(&s.words))
}

// count returns the units counted in the window starting at ws.
func (f *fixedWindowState) count(ws int64) int64 {
	switch ws {
	case f.start:
		return f.current
	case f.previousStart:
		return f.previous
	}
	return 0
}

// add counts n units in the window starting at ws: one of the two kept,
// a later one (the latest becomes the one before), or an earlier one,
// which takes the place of the one before (so that what it admits is
// counted while it is asked about).
func (f *fixedWindowState) add(ws, n int64) {
	switch {
	case ws == f.start:
		f.current += n
	case ws == f.previousStart:
		f.previous += n
	case ws > f.start:
		f.previousStart, f.previous = f.start, f.current
		f.start, f.current = ws, n
	default:
		f.previousStart, f.previous = ws, n
	}
}

// fixedWindowRefund gives units back to the window that took them (at, its
// start), while it is kept.
func fixedWindowRefund(s *State, at, _, _, cost int64) {
	f := s.fixedWindow()
	if c := f.count(at); c > 0 {
		f.add(at, -min(cost, c))
	}
}

// fixedWindowGiveBack gives units back to the window holding now.
func fixedWindowGiveBack(s *State, now, w, limit, cost int64) {
	fixedWindowRefund(s, now-now%w, w, limit, cost)
}

// fixedWindowCharge counts cost in the window holding now whatever is
// left: the count may pass the limit, and the window refuses until it ends.
func fixedWindowCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	f := s.fixedWindow()
	ws := now - now%w
	current := max(f.count(ws), 0) + cost
	if record {
		f.add(ws, cost)
	}
	return Outcome{Allowed: true, Remaining: max(limit-current, 0), ResetAfter: ws + w - now}
}

func fixedWindowTake(s *State, now, w, limit, cost int64) Outcome {
	return fixedWindowDecide(s.fixedWindow(), now, w, limit, cost, true)
}

func fixedWindowPeek(s *State, now, w, limit, cost int64) Outcome {
	return fixedWindowDecide(s.fixedWindow(), now, w, limit, cost, false)
}

// fixedWindowDecide decides a request at now against the window holding
// it, as the Redis stores do from the count INCRBY returns: admitted when
// the count after adding cost is within limit.
func fixedWindowDecide(f *fixedWindowState, now, w, limit, cost int64, consume bool) Outcome {
	ws := now - now%w
	current := max(f.count(ws), 0)
	end := ws + w - now
	if cost > limit-current {
		return Outcome{Remaining: max(limit-current, 0), RetryAfter: end, ResetAfter: end}
	}
	if consume {
		f.add(ws, cost)
		current += cost
	}
	out := Outcome{Allowed: true, Remaining: limit - current}
	if current > 0 {
		out.ResetAfter = end
	}
	return out
}
