package storetest

import (
	"fmt"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// step is one request of a table: at an offset from base, Take (or Peek) a
// cost for the key "k", expecting a result.
type step struct {
	at      time.Duration
	peek    bool
	cost    int64
	allowed bool
	remain  int64
	retry   time.Duration
	reset   time.Duration
}

func take(at time.Duration, cost int64, allowed bool, remain int64, retry, reset time.Duration) step {
	return step{at: at, cost: cost, allowed: allowed, remain: remain, retry: retry, reset: reset}
}

func peek(at time.Duration, cost int64, allowed bool, remain int64, retry, reset time.Duration) step {
	return step{at: at, peek: true, cost: cost, allowed: allowed, remain: remain, retry: retry, reset: reset}
}

const (
	ms = time.Millisecond
	s  = time.Second
)

// slidingLogSteps are the sliding log's table; CompactLog decides the same.
var slidingLogSteps = []step{
	take(0, 1, true, 2, 0, 10*s),
	take(0, 1, true, 1, 0, 10*s),
	take(1*s, 1, true, 0, 0, 10*s),
	// Full: the oldest entry (at 0) slides out at 10 s.
	take(2*s, 1, false, 0, 8*s, 9*s),
	peek(2*s, 1, false, 0, 8*s, 9*s),
	take(9999*ms, 1, false, 0, 1*ms, 1001*ms),
	// Boundary: entries at now-window have slid out.
	take(10*s, 1, true, 1, 0, 10*s),
	// Cost 2 needs one more slot: the entry at 1 s leaves at 11 s.
	take(10*s, 2, false, 1, 1*s, 10*s),
	peek(10*s, 1, true, 1, 0, 10*s),
	take(11*s, 2, true, 0, 0, 10*s),
	// Cost 3 needs all three: the newest (11 s) leaves at 21 s.
	take(12*s, 3, false, 0, 9*s, 9*s),
	peek(25*s, 1, true, 3, 0, 0),
}

// tableCases are the semantics written out by hand, for a limit of 3 per 10 s
// unless a table says otherwise. Offsets are from base, which starts a fixed
// window.
func tableCases() []testCase {
	tables := []struct {
		alg   algorithms.Name
		limit int64
		steps []step
	}{
		{algorithms.SlidingLog, 3, slidingLogSteps},
		{algorithms.CompactLog, 3, slidingLogSteps},
		{algorithms.TwoLevel, 4, []step{
			// Light while each aligned window holds at most 4/2 = 2.
			take(1*s, 1, true, 3, 0, 10*s),
			take(4*s, 1, true, 2, 0, 10*s),
			// A third unit in the window: the key turns heavy, its log
			// seeded with both units at the window's newest time, 4 s.
			take(5*s, 1, true, 1, 0, 10*s),
			take(6*s, 1, true, 0, 0, 10*s),
			// The unit taken at 1 s is seeded at 4 s, so it counts until
			// 14 s: the exact log would admit this request, the two-level
			// limiter waits for the seeds to slide out.
			take(11500*ms, 1, false, 0, 2500*ms, 4500*ms),
			peek(11500*ms, 1, false, 0, 2500*ms, 4500*ms),
			take(14*s, 1, true, 1, 0, 10*s),
			// Nothing since 14 s in the window of 31 s or the one before:
			// light again, the log dropped.
			take(31*s, 1, true, 3, 0, 10*s),
			// Stamped before the window (30 s): charged to its start,
			// the newest time stays 31 s.
			take(29*s, 1, true, 2, 0, 12*s),
			peek(31*s, 3, false, 2, 10*s, 10*s),
			// Next window: the two units at 31 s have slid out at 41 s.
			peek(41*s, 1, true, 4, 0, 0),
		}},
		{algorithms.GCRA, 3, []step{
			// A unit every 10 s/3 = 3333.3 ms; a full bucket holds 3.
			take(0, 1, true, 2, 0, 3334*ms),
			take(0, 1, true, 1, 0, 6667*ms),
			// 1 s refilled 0.3 units: 0.3 left, rounded down.
			take(1*s, 1, true, 0, 0, 9*s),
			// 2.4 units in use: one fits at 1 s + 0.4 units later.
			take(2*s, 1, false, 0, 1334*ms, 8*s),
			peek(2*s, 1, false, 0, 1334*ms, 8*s),
			take(3334*ms, 1, true, 0, 0, 10*s),
			take(4*s, 2, false, 0, 6*s, 9334*ms),
			// Stamped before the newest admission (3.334 s): decided at
			// that time.
			take(3*s, 1, false, 0, 3667*ms, 10334*ms),
			peek(20*s, 3, true, 3, 0, 0),
			take(20*s, 3, true, 0, 0, 10*s),
		}},
		{algorithms.FixedWindow, 3, []step{
			take(0, 1, true, 2, 0, 10*s),
			take(0, 1, true, 1, 0, 10*s),
			take(1*s, 1, true, 0, 0, 9*s),
			take(2*s, 1, false, 0, 8*s, 8*s),
			peek(2*s, 1, false, 0, 8*s, 8*s),
			take(9999*ms, 1, false, 0, 1*ms, 1*ms),
			// A new window starts at 10 s with the full limit.
			take(10*s, 1, true, 2, 0, 10*s),
			take(10*s, 2, true, 0, 0, 10*s),
			take(11*s, 2, false, 0, 9*s, 9*s),
			peek(19999*ms, 1, false, 0, 1*ms, 1*ms),
			peek(20*s, 3, true, 3, 0, 0),
		}},
		{algorithms.SlidingCounter, 3, []step{
			// The current window runs 0-10 s; its count weighs on the
			// next window, so the key is free at 20 s.
			take(0, 1, true, 2, 0, 20*s),
			take(0, 1, true, 1, 0, 20*s),
			take(1*s, 1, true, 0, 0, 19*s),
			// In the next window the 3 weigh 3*(10 s-e)/10 s; they fall
			// to 2 (room for 1) at e = 3.334 s, i.e. at 13.334 s.
			take(2*s, 1, false, 0, 11334*ms, 18*s),
			peek(2*s, 1, false, 0, 11334*ms, 18*s),
			take(9999*ms, 1, false, 0, 3335*ms, 10001*ms),
			take(10*s, 1, false, 0, 3334*ms, 10*s),
			take(13334*ms, 1, true, 0, 0, 16666*ms),
			// At 15 s the previous 3 weigh 1.5, counted as 2; with the 1
			// in this window there is no room until they weigh 1, at
			// e = 6.667 s.
			take(15*s, 1, false, 0, 1667*ms, 15*s),
			take(16667*ms, 1, true, 0, 0, 13333*ms),
			peek(30*s, 3, true, 3, 0, 0),
		}},
	}
	var out []testCase
	for _, tb := range tables {
		rule := algorithms.Rule{Algorithm: tb.alg, Limit: tb.limit, Window: 10 * time.Second}
		out = append(out, testCase{name: "table/" + string(tb.alg), run: func(c *checker) {
			for i, st := range tb.steps {
				var got backend.Result
				var ok bool
				op := "Take"
				if st.peek {
					op = "Peek"
					got, ok = c.peek("k", rule, st.at, st.cost)
				} else {
					got, ok = c.take("k", rule, st.at, st.cost)
				}
				want := backend.Result{Allowed: st.allowed, Limit: rule.Limit, Remaining: st.remain, RetryAfter: st.retry, ResetAfter: st.reset}
				if !ok || !c.expect(fmt.Sprintf("step %d: %s cost %d at %v", i, op, st.cost, st.at), got, want) {
					return
				}
			}
		}})
	}
	return out
}
