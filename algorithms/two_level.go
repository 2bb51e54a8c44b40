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
	Accuracy:   NeverOver,
	Take:       twoLevelTake,
	Peek:       twoLevelPeek,
	Refund:     twoLevelRefund,
	GiveBack:   twoLevelGiveBack,
	Charge:     twoLevelCharge,
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
		// light again, the log dropped; its unit at 14 s is older,
		// counted at its window's end (20 s) by late requests.
		take(31*sec, 1, true, 3, 0, 10*sec),
		// Stamped before the window (30 s), late: the three windows
		// hold 3 with it, within the limit; charged at 29 s to the
		// previous window.
		take(29*sec, 1, true, 1, 0, 12*sec),
		// Cost 3 needs the unit at 29 s gone.
		peek(31*sec, 3, false, 2, 8*sec, 10*sec),
		// Next window: the units at 29 s and 31 s have slid out at 41 s.
		peek(41*sec, 1, true, 4, 0, 0),
	}},
	Changes: twoLevelChanges,
}

// twoLevelChanges: its screen and its seeded log never admit what the
// exact log would deny over its admissions, across limit and window
// changes and for requests late by less than a window (issue 22, defects
// 1 and 2).
var twoLevelChanges = map[string][]Example{
	"limit_change": {
		// Light at 4 (h = 2), then heavy, its log seeded with the units
		// at 0 s and 1 s at 1 s.
		take(0, 1, true, 3, 0, 10*sec).under(4, 10*sec),
		take(1*sec, 1, true, 2, 0, 10*sec).under(4, 10*sec),
		take(2*sec, 1, true, 1, 0, 10*sec).under(4, 10*sec),
		take(3*sec, 1, true, 0, 0, 10*sec).under(4, 10*sec),
		// Lowered to 2, raised back: all four still count.
		take(4*sec, 1, false, 0, 8*sec, 9*sec).under(2, 10*sec),
		take(5*sec, 1, false, 0, 6*sec, 8*sec).under(4, 10*sec),
		// The seeds at 1 s slide out at 11 s.
		take(11*sec, 2, true, 0, 0, 10*sec).under(4, 10*sec),
		// Two limits interleaved (3 s, 11 s and 11 s count at 2), then
		// late at the higher one.
		take(12*sec, 1, false, 0, 9*sec, 9*sec).under(2, 10*sec),
		take(10500*msec, 1, false, 0, 1500*msec, 10500*msec).under(4, 10*sec),
	},
	// A window shortened from 90 s to 30 s at limit 10: the five units at
	// 89 s still count at 90.001 s (it admitted 15 in 30 s).
	"window_shortened": {
		take(89*sec, 5, true, 5, 0, 90*sec).under(10, 90*sec),
		take(90001*msec, 5, true, 0, 0, 30*sec).under(10, 30*sec),
		take(90002*msec, 1, false, 0, 28998*msec, 29999*msec).under(10, 30*sec),
	},
	// 4 per second, 2 units at 1.9 s, 2 at 2.95 s, 1 at 3.01 s, then a
	// window of 1.9 s at 3.02 s holds all 5 (its screen admitted it, the
	// units at 1.9 s rolled two windows back at 1 s).
	"window_lengthened": {
		take(1900*msec, 2, true, 2, 0, sec).under(4, sec),
		take(2950*msec, 2, true, 2, 0, sec).under(4, sec),
		take(3010*msec, 1, true, 1, 0, sec).under(4, sec),
		take(3020*msec, 1, false, 0, 780*msec, 1890*msec).under(4, 1900*msec),
	},
	// 4 per second, 3 units at 0.999 s, one at 2 s, then 2 stamped 1.996
	// s: the 3 at 0.999 s are in their window. Heavy at once (3 > 4/2);
	// light again at 2 s, the three units older, counted by the late
	// request at their window's end (1 s), so it waits 4 ms, not 3.
	"late_after_gap": {
		take(999*msec, 3, true, 1, 0, sec).under(4, sec),
		take(2000*msec, 1, true, 3, 0, sec).under(4, sec),
		take(1996*msec, 2, false, 0, 4*msec, 1004*msec).under(4, sec),
	},
}

//go:embed two_level.lua
var twoLevelLua string

// twoLevelState is TwoLevel's view of a State's words (its heavy keys' log
// is the State's log).
type twoLevelState struct {
	// start is a light key's current window start, and a heavy key's
	// floor (a window before the light window it was promoted from).
	start int64
	// cur and prev are a light key's current and previous windows; the
	// bits above each one's units and distance hold half the count of the
	// window before them (light.older).
	cur, prev packedWindow
	// olderEnd is an upper bound of light.older's times, kept because a
	// request with a longer window than the one that rolled them reads
	// them (see light.olderStamp).
	olderEnd int64
}

// twoLevel returns the State's words as TwoLevel's.
func (s *State) twoLevel() *twoLevelState { return (*twoLevelState)(unsafe.Pointer(&s.words)) }

// packedWindow is a light key's window in one word, so that a State stays
// five words: its units in the low countBits bits, above them (distBits)
// the distance from the current window's start to the newest time charged
// to the window, and above that half of light.older's bits.
type packedWindow int64

func packWindow(units, dist, older int64) packedWindow {
	return packedWindow(units | dist<<countBits | older<<(countBits+distBits))
}

func (p packedWindow) units() int64 { return int64(p) & countMask }

func (p packedWindow) dist() int64 { return int64(p) >> countBits & distMask }

func (p packedWindow) older() int64 { return int64(p) >> (countBits + distBits) & olderMask }

// twoLevelChargedAt is a heavy key's log time (no earlier than its floor),
// or a light key's window start tagged with lightCharge, and with
// lightPrev when the units went to the previous window (a late request).
func twoLevelChargedAt(s *State, now int64) int64 {
	t := s.twoLevel()
	if s.log.size() > 0 {
		return max(now, t.start)
	}
	if now < t.start {
		return lightCharge + lightPrev + t.start
	}
	return lightCharge + t.start
}

// Two-level limiting: a fixed-window counter screens every key, and only
// keys that use more than half the limit in one aligned window get an exact
// log.
//
// A sliding window (now-w, now] overlaps at most two aligned windows, so a
// key that never has more than h = floor(limit/2) units in one aligned
// window never has more than the limit in any sliding window. While that
// holds the key is light: its state counts the current aligned window, the
// one before, and the one before that (older), with the newest time
// charged to the first two. A light key admits a request of cost n stamped
// in its current window when the previous window holds at most h and the
// current one at most h-n; a request stamped before the current window (it
// arrived late) when all three windows together hold at most limit-n. Every
// such admission is one the exact log would make too, over the units
// two_level admitted (the screen is exact, never approximate).
//
// A request the screen cannot admit turns the key heavy: its log is seeded
// with each window's units stamped at an upper bound of their times (the
// window's newest time; older's at the end of its window), so the seeded
// log never undercounts, and from then on the key is decided as CompactLog
// decides, exactly, by timestamp. The seeds can make the first window or
// two after the switch deny what the exact log would admit; they never
// admit more. A heavy key turns light again, its log dropped (counted into
// older), at the first request that finds nothing admitted in its aligned
// window or the one before.
//
// The promise, for requests stamped in any order but late by less than one
// window (stamped after the newest time the key has seen, less a window),
// and across limit changes and processes deciding one key at different
// limits: every admission at (now, limit, window) is one the exact log
// would make over two_level's own admissions by their stamps, so no window
// of stamps holds more than the largest limit in force. A request later
// than that is charged no earlier than what the key still knows about (a
// heavy key's floor, the end of a light key's older window), never earlier
// than its stamp. Windows that change keep the promise as the logs do, for
// any windows w1 <= w2 < 2*w1 (a longer window counts older at the bound
// the roll recorded, olderEnd, and its screen adds older when it still
// counts); beyond 2*w1 units two old windows back are forgotten, as the
// logs forget them. Peek never changes the state.
//
// A light key reports what its seeded log would: Remaining is the limit
// less the seeds still inside the sliding window, ResetAfter when the
// newest seed slides out. A refund gives units back to the counter or the
// log that took them, and nothing once the key has switched since.
//
// Go state (twoLevelState): light keys keep start (the current window's
// start) and each window's units and newest time packed in a word
// (packedWindow), older split across the two, with the log empty; heavy
// keys keep the log and, in start, the floor.

const (
	countBits = 16
	countMask = 1<<countBits - 1
	// distBits holds a distance of up to MaxWindow ms.
	distBits = 35
	distMask = 1<<distBits - 1
	// olderBits is half of older's 16 bits, in the top of each word.
	olderBits = 8
	olderMask = 1<<olderBits - 1
	// lightCharge tags a light key's charge (a window start) apart from a
	// heavy key's (a timestamp, below 2^51, the latest time the Redis
	// stores accept): see Rule.ChargedAt. lightPrev marks a charge to the
	// window before the start.
	lightCharge = int64(1) << 52
	lightPrev   = int64(1) << 51
)

// light is a light key's counters.
type light struct {
	start, cur, prev int64
	// older counts the window before prev; its units are no later than
	// olderEnd (start - w of the window that rolled them).
	older, olderEnd int64
	// newestCur and newestPrev are the newest times charged to the current
	// and previous window; meaningful only when cur or prev is not 0.
	newestCur, newestPrev int64
}

func unpackLight(s *State) light {
	t := s.twoLevel()
	l := light{start: t.start, cur: t.cur.units(), prev: t.prev.units()}
	l.older = t.cur.older() | t.prev.older()<<olderBits
	l.newestCur = t.start + t.cur.dist()
	l.newestPrev = t.start - t.prev.dist()
	l.olderEnd = t.olderEnd
	return l
}

func (l *light) pack(s *State) {
	t := s.twoLevel()
	var dcur, dprev int64
	if l.cur > 0 {
		dcur = l.newestCur - l.start
	}
	if l.prev > 0 {
		dprev = l.start - l.newestPrev
	}
	var oend int64
	if l.older > 0 {
		oend = l.olderEnd
	}
	*t = twoLevelState{start: l.start,
		cur:      packWindow(l.cur, dcur, l.older&olderMask),
		prev:     packWindow(l.prev, dprev, l.older>>olderBits),
		olderEnd: oend}
}

// olderStamp is the time older's units count at under window w: the upper
// bound the roll recorded, and no earlier than a window of w before the
// start. With one window throughout that is start - w; a longer window
// than the one that rolled them must count them later, or it would forget
// units still inside it.
func (l *light) olderStamp(w int64) int64 { return max(l.olderEnd, l.start-w) }

// roll moves l to the window holding now (see windowStart). A request
// before the current window leaves it alone. Each window's units go where
// their newest time falls (after a window change, that need not be the
// next window), and are forgotten two windows after it.
func (l *light) roll(now, w int64) {
	ws := windowStart(l.start, now, w)
	if ws <= l.start {
		return
	}
	n := light{start: ws}
	put := func(units, newest int64) {
		switch {
		case units == 0:
		case newest >= ws:
			n.newestCur = max(n.newestCur, newest)
			n.cur += units
		case newest > ws-w:
			if n.prev == 0 || newest > n.newestPrev {
				n.newestPrev = newest
			}
			n.prev += units
		case newest > ws-2*w:
			n.older += units
			n.olderEnd = max(n.olderEnd, newest)
		}
	}
	put(l.older, l.olderStamp(w))
	put(l.prev, l.newestPrev)
	put(l.cur, l.newestCur)
	*l = n
}

// seed writes l's units into r as log entries at upper bounds of their
// times: each window's newest, older's end.
func (l *light) seed(r *ring, w, limit int64) {
	r.dropOldest(r.size())
	if l.older > 0 {
		r.insert(l.olderStamp(w), l.older, limit)
	}
	if l.prev > 0 {
		r.insert(l.newestPrev, l.prev, limit)
	}
	if l.cur > 0 {
		r.insert(l.newestCur, l.cur, limit)
	}
}

// floor is the floor of the heavy key l turns into: its seeds count every
// unit stamped after a window before l's, so the log decides exactly from
// a window before l's start on (times are never negative).
func (l *light) floor(w int64) int64 { return max(l.start-w, 0) }

// admits reports whether the screen admits a request of cost at now. In
// the current window older has slid out, unless a longer window than the
// one that rolled it reaches back to it: then it counts too.
func (l *light) admits(now, w, limit, cost int64) bool {
	if now >= l.start {
		h := limit / 2
		if l.prev > h || l.cur+cost > h {
			return false
		}
		return l.older == 0 || l.olderStamp(w) <= now-w || l.older+l.prev+l.cur+cost <= limit
	}
	return l.older+l.prev+l.cur+cost <= limit
}

// charge records cost units at now, which the screen admitted: to the
// current window, or for a late request to the previous one, no earlier
// than older's end.
func (l *light) charge(now, w, cost int64) {
	if now >= l.start {
		if l.cur == 0 || now > l.newestCur {
			l.newestCur = now
		}
		l.cur += cost
		return
	}
	if e := max(now, l.olderStamp(w)); l.prev == 0 || e > l.newestPrev {
		l.newestPrev = e
	}
	l.prev += cost
}

// outcome reports on a light key whose screen admitted (or would admit) a
// request, as its seeded log would.
func (l *light) outcome(now, w, limit int64) Outcome {
	live, newest := int64(0), int64(0)
	if l.older > 0 {
		newest = l.olderStamp(w)
		if newest > now-w {
			live += l.older
		}
	}
	if l.prev > 0 {
		newest = l.newestPrev
		if newest > now-w {
			live += l.prev
		}
	}
	if l.cur > 0 {
		newest = l.newestCur
		if newest > now-w {
			live += l.cur
		}
	}
	out := Outcome{Allowed: true, Remaining: max(limit-live, 0)}
	if live > 0 {
		out.ResetAfter = newest + w - now
	}
	return out
}

// quiet reports whether a heavy key's log holds nothing admitted in the
// aligned window of e or the one before, so it can turn light.
func quiet(r ring, e, w int64) bool {
	return r.at(r.size()-1) < e-e%w-w
}

// demoted returns the light key a quiet heavy key turns into at e: its
// window is e's, and the log's units of the window before the previous
// one are older. It reports false when they do not fit in older.
func demoted(r ring, e, w int64) (light, bool) {
	l := light{start: e - e%w}
	l.older = r.size() - r.countUpTo(l.start-2*w)
	l.olderEnd = l.start - w
	return l, l.older <= countMask
}

// heavyTake decides a heavy key's request at its effective time, no
// earlier than the floor, and reports the times from now; a charge is
// recorded as compact_log records one.
func heavyTake(s *State, now, w, limit, cost int64, charge bool) Outcome {
	e := max(now, s.twoLevel().start)
	if charge {
		return fromNow(compactLogCharge(s, e, w, limit, cost, true), e-now)
	}
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
	return twoLevelStep(s, now, w, limit, cost, false)
}

// twoLevelCharge records min(cost, limit) units whatever is left: as a take
// where the screen admits them, else on the log, heavy from then on, as
// compact_log records a charge. With record false it reports the charge of
// a copy.
func twoLevelCharge(s *State, now, w, limit, cost int64, record bool) Outcome {
	if !record {
		c := s.Clone()
		s = &c
	}
	return twoLevelStep(s, now, w, limit, min(cost, limit), true)
}

// twoLevelStep is a take, or with charge a charge of cost (at most limit).
func twoLevelStep(s *State, now, w, limit, cost int64, charge bool) Outcome {
	var l light
	if s.log.size() > 0 {
		e := max(now, s.twoLevel().start)
		if !quiet(s.log, e, w) {
			return heavyTake(s, now, w, limit, cost, charge)
		}
		var ok bool
		if l, ok = demoted(s.log, e, w); !ok {
			return heavyTake(s, now, w, limit, cost, charge)
		}
		*s = State{}
	} else {
		l = unpackLight(s)
	}
	l.roll(now, w)
	if l.admits(now, w, limit, cost) {
		l.charge(now, w, cost)
		l.pack(s)
		return l.outcome(now, w, limit)
	}
	// Heavy from now on, admitted or not: the seeds cover the three
	// windows, so the log decides exactly from a window before start on.
	l.seed(&s.log, w, limit)
	*s.twoLevel() = twoLevelState{start: l.floor(w)}
	return heavyTake(s, now, w, limit, cost, charge)
}

func twoLevelPeek(s *State, now, w, limit, cost int64) Outcome {
	var l light
	if s.log.size() > 0 {
		e := max(now, s.twoLevel().start)
		var ok bool
		if quiet(s.log, e, w) {
			l, ok = demoted(s.log, e, w)
		}
		if !ok {
			return fromNow(slidingLogPeek(s, e, w, limit, cost), e-now)
		}
	} else {
		l = unpackLight(s)
	}
	l.roll(now, w)
	if l.admits(now, w, limit, cost) {
		return l.outcome(now, w, limit)
	}
	var view State
	view.twoLevel().start = l.floor(w)
	l.seed(&view.log, w, limit)
	e := max(now, l.floor(w))
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
	win := at - lightCharge
	switch {
	case win >= lightPrev:
		if l.start == win-lightPrev {
			l.prev -= min(cost, l.prev)
		}
	case l.start == win:
		l.cur -= min(cost, l.cur)
	case l.start == win+w:
		l.prev -= min(cost, l.prev)
	}
	l.pack(s)
}

// twoLevelGiveBack gives back up to cost of the newest units counted at
// now: a heavy key's newest live timestamps (at its floor or later, as it
// decides), a light key's units from its current window, then the previous
// one, then older, each while it still counts at now. A heavy key whose log
// empties is light at its floor, as after a refund.
func twoLevelGiveBack(s *State, now, w, _, cost int64) {
	if s.log.size() > 0 {
		e := max(now, s.twoLevel().start)
		logGiveBack(s, e, w, 0, cost)
		return
	}
	l := unpackLight(s)
	giveBack := func(units *int64, newest int64) {
		if *units > 0 && newest > now-w {
			k := min(cost, *units)
			*units -= k
			cost -= k
		}
	}
	giveBack(&l.cur, l.newestCur)
	giveBack(&l.prev, l.newestPrev)
	giveBack(&l.older, l.olderStamp(w))
	l.pack(s)
}
