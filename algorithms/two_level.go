package algorithms

import (
	_ "embed"
	"time"
	"unsafe"
)

// twoLevel is TwoLevel's descriptor.
var twoLevel = Algorithm{
	Name:       TwoLevel,
	Suffix:     ":tl",
	Salt:       0x85ebca77c2b2ae63,
	Take:       twoLevelTake,
	Peek:       twoLevelPeek,
	Refund:     twoLevelRefund,
	ChargedAt:  twoLevelChargedAt,
	LimitBound: logLimitBound,
	LimitNote:  logLimitNote,
	Lua:        logLib + twoLevelLua,
	Examples: Examples{Limit: 4, Window: 10 * time.Second, Steps: []Example{
		// Light while each aligned window holds at most 4/2 = 2.
		take(1*sec, 1, true, 3, 0, 10*sec),
		take(4*sec, 1, true, 2, 0, 10*sec),
		// A third unit in the window: the key turns heavy, its log
		// seeded with both units at the window's newest time, 4 s.
		take(5*sec, 1, true, 1, 0, 10*sec),
		take(6*sec, 1, true, 0, 0, 10*sec),
		// The unit taken at 1 s is seeded at 4 s, so it counts until
		// 14 s: the exact log would admit this request, the two-level
		// limiter waits for the seeds to slide out.
		take(11500*msec, 1, false, 0, 2500*msec, 4500*msec),
		peek(11500*msec, 1, false, 0, 2500*msec, 4500*msec),
		take(14*sec, 1, true, 1, 0, 10*sec),
		// Nothing since 14 s in the window of 31 s or the one before:
		// light again, the log dropped.
		take(31*sec, 1, true, 3, 0, 10*sec),
		// Stamped before the window (30 s): charged to its start,
		// the newest time stays 31 s.
		take(29*sec, 1, true, 2, 0, 12*sec),
		peek(31*sec, 3, false, 2, 10*sec, 10*sec),
		// Next window: the two units at 31 s have slid out at 41 s.
		peek(41*sec, 1, true, 4, 0, 0),
	}},
}

//go:embed two_level.lua
var twoLevelLua string

// twoLevelState is TwoLevel's view of a State's words (its heavy keys' log
// is the State's log).
type twoLevelState struct {
	// start is a light key's current window start, and a heavy key's
	// floor (the start of the light window it was promoted from).
	start int64
	// cur and prev are a light key's current and previous windows.
	cur, prev packedWindow
}

// twoLevel returns the State's words as TwoLevel's.
func (s *State) twoLevel() *twoLevelState { return (*twoLevelState)(unsafe.Pointer(&s.words)) }

// packedWindow is a light key's window in one word, so that a State stays
// four words: its units in the low countBits bits (at most limit/2 <
// 2^countBits), and above them the distance from the current window's
// start to the newest time charged to the window.
type packedWindow int64

func packWindow(units, dist int64) packedWindow { return packedWindow(units | dist<<countBits) }

func (p packedWindow) units() int64 { return int64(p) & countMask }

func (p packedWindow) dist() int64 { return int64(p) >> countBits }

// twoLevelChargedAt is a heavy key's log time (no earlier than its floor),
// or a light key's window start tagged with lightCharge.
func twoLevelChargedAt(s *State, now int64) int64 {
	if s.log.size() > 0 {
		return max(now, s.twoLevel().start)
	}
	return lightCharge + s.twoLevel().start
}

// Two-level limiting: a fixed-window counter screens every key, and only
// keys that use more than half the limit in one aligned window get an exact
// log.
//
// A sliding window (now-w, now] overlaps at most two aligned windows, so a
// key that never has more than h = floor(limit/2) units in one aligned
// window never has more than the limit in any sliding window. While that
// holds the key is light: its state is the counter of the current aligned
// window and of the one before, plus the newest time charged to each. A
// light key admits a request of cost n when the previous window holds at
// most h and the current one at most h-n; every such admission is one the
// exact log would make too (the screen is exact, never approximate).
//
// A request the screen cannot admit turns the key heavy: its log is seeded
// with each window's units stamped at that window's newest time (an upper
// bound of each unit's real time, so the seeded log never undercounts), and
// from then on the key is decided as CompactLog decides, exactly, by
// timestamp. The seeds can make the first window or two after the switch
// deny what the exact log would admit; they never admit more. A heavy key
// turns light again, and its log is dropped, at the first request that
// finds nothing admitted in its aligned window or the one before.
//
// Requests stamped out of order (the clock went back, or they arrived
// late) are charged to a time no earlier than what the key still knows
// about: a light key charges a request stamped before its current window
// to the window's start; a heavy key records its real time, as the logs
// do, but no earlier than its floor, the start of the light window it was
// promoted from (older units were never logged). So no window of charged
// times ever holds more than the limit. Peek never changes the state.
//
// A light key reports what its seeded log would: Remaining is the limit
// less the units of both windows still inside the sliding window by their
// seeds, ResetAfter when the newest seed slides out. A refund gives units
// back to the counter or the log that took them, and nothing once the key
// has switched since. When the window changes under a light key, the
// previous window's newest time is clamped to the new window's start:
// exact only for the window the units were counted in.
//
// Go state (twoLevelState): light keys keep start (the current window's
// start) and each window's units and newest time packed in a word
// (packedWindow), with the log empty; heavy keys keep the log and, in
// start, the floor.

const (
	countBits = 16
	countMask = 1<<countBits - 1
	// lightCharge tags a light key's charge (a window start) apart from a
	// heavy key's (a timestamp, below 2^51, the latest time the Redis
	// stores accept): see Rule.ChargedAt.
	lightCharge = int64(1) << 52
)

// light is a light key's counters.
type light struct {
	start, cur, prev int64
	// newestCur and newestPrev are the newest times charged to the current
	// and previous window; meaningful only when cur or prev is not 0.
	newestCur, newestPrev int64
}

func unpackLight(s *State) light {
	t := s.twoLevel()
	l := light{start: t.start, cur: t.cur.units(), prev: t.prev.units()}
	l.newestCur = t.start + t.cur.dist()
	l.newestPrev = t.start - t.prev.dist()
	return l
}

func (l *light) pack(s *State) {
	t := s.twoLevel()
	*t = twoLevelState{start: l.start}
	if l.cur > 0 {
		t.cur = packWindow(l.cur, l.newestCur-l.start)
	}
	if l.prev > 0 {
		t.prev = packWindow(l.prev, l.start-l.newestPrev)
	}
}

// roll moves l to the window holding now (see windowStart). A request
// before the current window leaves it alone.
func (l *light) roll(now, w int64) {
	ws := windowStart(l.start, now, w)
	if ws <= l.start {
		return
	}
	if ws-l.start <= w && l.cur > 0 {
		// The previous window ends at ws-1 (it can end later only after
		// the window was shortened).
		l.prev, l.newestPrev = l.cur, min(l.newestCur, ws-1)
	} else {
		l.prev = 0
	}
	l.cur, l.start = 0, ws
}

// seed writes l's units into r as log entries at their windows' newest
// times, keeping the newest limit.
func (l *light) seed(r *ring, limit int64) {
	r.dropOldest(r.size())
	cur := min(l.cur, limit)
	if prev := min(l.prev, limit-cur); prev > 0 {
		r.insert(l.newestPrev, prev, limit)
	}
	if cur > 0 {
		r.insert(l.newestCur, cur, limit)
	}
}

// outcome reports on a light key whose screen admitted (or would admit) a
// request, as its seeded log would.
func (l *light) outcome(now, w, limit int64) Outcome {
	livePrev := int64(0)
	if l.prev > 0 && l.newestPrev > now-w {
		livePrev = l.prev
	}
	out := Outcome{Allowed: true, Remaining: limit - l.cur - livePrev}
	switch {
	case l.cur > 0:
		out.ResetAfter = l.newestCur + w - now
	case livePrev > 0:
		out.ResetAfter = l.newestPrev + w - now
	}
	return out
}

// quiet reports whether a heavy key's log holds nothing admitted in the
// aligned window of e or the one before, so it can turn light.
func quiet(r ring, e, w int64) bool {
	return r.at(r.size()-1) < e-e%w-w
}

// heavyTake decides a heavy key's request at its effective time, no
// earlier than the floor, and reports the times from now.
func heavyTake(s *State, now, w, limit, cost int64) Outcome {
	e := max(now, s.twoLevel().start)
	return fromNow(slidingLogTake(s, e, w, limit, cost), e-now)
}

// fromNow moves an outcome decided d ms after now to now: the request is
// decided the same way until then.
func fromNow(out Outcome, d int64) Outcome {
	if !out.Allowed {
		out.RetryAfter += d
	}
	if out.ResetAfter > 0 {
		out.ResetAfter += d
	}
	return out
}

func twoLevelTake(s *State, now, w, limit, cost int64) Outcome {
	if s.log.size() > 0 {
		if !quiet(s.log, max(now, s.twoLevel().start), w) {
			return heavyTake(s, now, w, limit, cost)
		}
		*s = State{}
	}
	l := unpackLight(s)
	l.roll(now, w)
	if h := limit / 2; l.prev <= h && l.cur+cost <= h {
		// Charged at the window's start when stamped before it.
		charged := max(now, l.start)
		if l.cur == 0 || charged > l.newestCur {
			l.newestCur = charged
		}
		l.cur += cost
		l.pack(s)
		return l.outcome(now, w, limit)
	}
	l.seed(&s.log, limit)
	*s.twoLevel() = twoLevelState{start: l.start}
	return heavyTake(s, now, w, limit, cost)
}

func twoLevelPeek(s *State, now, w, limit, cost int64) Outcome {
	if s.log.size() > 0 {
		e := max(now, s.twoLevel().start)
		if !quiet(s.log, e, w) {
			return fromNow(slidingLogPeek(s, e, w, limit, cost), e-now)
		}
		return slidingLogPeek(&State{}, now, w, limit, cost)
	}
	l := unpackLight(s)
	l.roll(now, w)
	if h := limit / 2; l.prev <= h && l.cur+cost <= h {
		return l.outcome(now, w, limit)
	}
	var view State
	view.twoLevel().start = l.start
	l.seed(&view.log, limit)
	e := max(now, l.start)
	return fromNow(slidingLogPeek(&view, e, w, limit, cost), e-now)
}

// twoLevelRefund gives back cost units recorded at at: from a light key's
// window counter (at tagged with lightCharge) or a heavy key's log. A
// refund that finds the key switched since (light to heavy or back) gives
// nothing back: the units stay counted, which is safe.
func twoLevelRefund(s *State, at, w, _, cost int64) {
	if at < lightCharge {
		// A log emptied this way leaves a light key whose window starts
		// at the floor.
		s.log.remove(at, cost)
		return
	}
	if s.log.size() > 0 {
		return
	}
	l := unpackLight(s)
	switch win := at - lightCharge; {
	case l.start == win:
		l.cur -= min(cost, l.cur)
	case l.start == win+w:
		l.prev -= min(cost, l.prev)
	}
	l.pack(s)
}
