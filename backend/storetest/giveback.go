package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// giveBackCases are the cases of backend.UnitRefunder; a store that does
// not have it (through backend.As) passes them.
func giveBackCases() []testCase {
	return []testCase{
		{"give_back/same_as_go_engine", giveBackSameAsGoEngine},
		{"give_back/refused", giveBackRefused},
	}
}

// giveBackSameAsGoEngine replays random Takes, GiveBacks and Peeks on the
// counters (fixed_window, sliding_counter; the clock creeping, crossing
// windows and going back) and compares each Result with the Go engine's
// Take, Refund (at backend.GiveBackWindow) and Peek. Giving back more than
// was taken frees only what was taken.
func giveBackSameAsGoEngine(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	rng := rand.New(rand.NewPCG(13, 17))
	for _, alg := range []algorithms.Name{algorithms.FixedWindow, algorithms.SlidingCounter} {
		rule := algorithms.Rule{Algorithm: alg, Limit: 6, Window: time.Second}
		id := "give:" + string(alg)
		var st algorithms.State
		now := at
		gave := 0
		for step := range 300 {
			switch p := rng.IntN(100); {
			case p < 50:
			case p < 95:
				now += time.Duration(rng.IntN(200)) * time.Millisecond
			default:
				now = max(now-time.Duration(rng.IntN(1500))*time.Millisecond, 0)
			}
			cost := 1 + rng.Int64N(rule.Limit)
			ms := base.Add(now).UnixMilli()
			req := c.request(id, rule, now, cost)
			var got, want backend.Result
			var err error
			op := "Take"
			switch p := rng.IntN(10); {
			case p < 5:
				want = backend.ResultOf(rule, rule.Take(&st, ms, cost))
				got, err = c.store.Take(c.ctx, req)
			case p < 8:
				op = "GiveBack"
				win, werr := backend.GiveBackWindow(rule, ms)
				if werr != nil {
					c.r.Errorf("GiveBackWindow(%v): %v", rule, werr)
					return
				}
				want = backend.ResultOf(rule, rule.Refund(&st, ms, win, cost))
				got, err = u.GiveBack(c.ctx, req)
				gave++
			default:
				op = "Peek"
				want = backend.ResultOf(rule, rule.Peek(&st, ms, cost))
				got, err = c.store.Peek(c.ctx, req)
			}
			if err != nil {
				c.r.Errorf("step %d: %s(%v, cost %d) at %v: unexpected error: %v", step, op, rule, cost, now, err)
				return
			}
			if !c.expect(fmt.Sprintf("step %d: %s(%v, cost %d) at %v", step, op, rule, cost, now), got, want) {
				return
			}
		}
		if gave == 0 {
			c.r.Errorf("%s: no GiveBack in the sequence", alg)
		}
	}
	// Explicitly: 4 of 6 taken, 10 given back: 6 left, not more.
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 6, Window: time.Hour}
	if _, ok := c.take("give:cap", rule, at, 4); !ok {
		return
	}
	got, err := u.GiveBack(c.ctx, c.request("give:cap", rule, at, 6))
	if err != nil || got.Remaining != rule.Limit {
		c.r.Errorf("GiveBack of 6 after 4 taken: remaining %d (err %v), want %d", got.Remaining, err, rule.Limit)
	}
	if got, ok := c.take("give:cap", rule, at, 6); ok && (!got.Allowed || got.Remaining != 0) {
		c.r.Errorf("Take of 6 after the give back: %+v, want admitted with 0 left", got)
	}
}

// giveBackRefused: algorithms that cannot give units back by time are
// refused with algorithms.ErrInvalidRequest, and nothing changes.
func giveBackRefused(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 4, Window: time.Minute}
		if _, err := backend.GiveBackWindow(rule, 0); err == nil {
			continue
		}
		id := "refused:" + string(alg)
		if _, ok := c.take(id, rule, at, 2); !ok {
			return
		}
		before, ok := c.peek(id, rule, at, 1)
		if !ok {
			return
		}
		if _, err := u.GiveBack(c.ctx, c.request(id, rule, at, 2)); !errors.Is(err, algorithms.ErrInvalidRequest) {
			c.r.Errorf("GiveBack on %s: error %v, want one wrapping %v", alg, err, algorithms.ErrInvalidRequest)
		}
		if after, ok := c.peek(id, rule, at, 1); ok {
			c.expect(fmt.Sprintf("%s after a refused GiveBack", alg), after, before)
		}
	}
}
