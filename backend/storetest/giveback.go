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
		{"give_back/never_more_than_taken", giveBackNeverMoreThanTaken},
		{"give_back/newest_first", giveBackNewestFirst},
		{"give_back/refused", giveBackRefused},
	}
}

// giveBackSameAsGoEngine replays random Takes, GiveBacks and Peeks on
// every algorithm that gives back by time (the clock creeping, crossing
// windows and going back; limits that read a small log whole, count a
// larger one and turn a two_level key heavy) and compares each Result with
// the Go engine's Take, GiveBack and Peek.
func giveBackSameAsGoEngine(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	rng := rand.New(rand.NewPCG(13, 17))
	for _, alg := range algorithms.Names() {
		for _, limit := range []int64{3, 6, 40} {
			rule := algorithms.Rule{Algorithm: alg, Limit: limit, Window: time.Second}
			if rule.CheckGiveBack() != nil {
				continue
			}
			id := fmt.Sprintf("give:%s:%d", alg, limit)
			var st algorithms.State
			now := at
			latest := now
			gave := 0
			for step := range 200 {
				switch p := rng.IntN(100); {
				case p < 50:
				case p < 95:
					now += time.Duration(rng.IntN(200)) * time.Millisecond
				default:
					now = max(now-time.Duration(rng.IntN(1500))*time.Millisecond, 0)
				}
				now, latest = floorFixed(now, latest, rule)
				cost := 1 + rng.Int64N(limit)
				if rng.IntN(2) == 0 {
					cost = 1 + rng.Int64N(min(limit, 3))
				}
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
					want = backend.ResultOf(rule, rule.GiveBack(&st, ms, cost))
					got, err = u.GiveBack(c.ctx, req)
					gave++
				default:
					op = "Peek"
					want = backend.ResultOf(rule, rule.Peek(&st, ms, cost))
					got, err = c.store.Peek(c.ctx, req)
				}
				if err != nil {
					c.r.Errorf("%s step %d: %s(%v, cost %d) at %v: unexpected error: %v", id, step, op, rule, cost, now, err)
					return
				}
				if !c.expect(fmt.Sprintf("%s step %d: %s(%v, cost %d) at %v", id, step, op, rule, cost, now), got, want) {
					return
				}
			}
			if gave == 0 {
				c.r.Errorf("%s: no GiveBack in the sequence", id)
			}
		}
	}
}

// giveBackNeverMoreThanTaken: 4 of 6 taken, 6 given back leaves 6, not
// more, on every algorithm that gives back; a give back on a new key
// changes nothing.
func giveBackNeverMoreThanTaken(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 6, Window: time.Hour}
		if rule.CheckGiveBack() != nil {
			continue
		}
		id := "give:cap:" + string(alg)
		if got, err := u.GiveBack(c.ctx, c.request(id, rule, at, 3)); err != nil || got.Remaining != rule.Limit {
			c.r.Errorf("%s: GiveBack of 3 on a new key: remaining %d (err %v), want %d", alg, got.Remaining, err, rule.Limit)
			continue
		}
		if _, ok := c.take(id, rule, at, 4); !ok {
			return
		}
		got, err := u.GiveBack(c.ctx, c.request(id, rule, at+time.Millisecond, 6))
		if err != nil || got.Remaining != rule.Limit {
			c.r.Errorf("%s: GiveBack of 6 after 4 taken: remaining %d (err %v), want %d", alg, got.Remaining, err, rule.Limit)
			continue
		}
		if got, ok := c.take(id, rule, at+2*time.Millisecond, 6); ok && (!got.Allowed || got.Remaining != 0) {
			c.r.Errorf("%s: Take of 6 after the give back: %+v, want admitted with 0 left", alg, got)
		}
		if got, ok := c.take(id, rule, at+3*time.Millisecond, 1); ok && got.Allowed {
			c.r.Errorf("%s: a seventh unit admitted after giving back 6 of 4: %+v", alg, got)
		}
	}
}

// giveBackNewestFirst: the exact logs (algorithms.Exact) give back their
// newest units. With 2 units at 0 and 2 at 500 ms (4 per second), giving 2
// back at 600 ms and reading at 1 s, when the first two slid out, finds
// all 4 free; had the oldest been given back, 2.
func giveBackNewestFirst(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	for _, a := range algorithms.Algorithms() {
		if !exactRate(a) {
			continue
		}
		alg := a.Name
		rule := algorithms.Rule{Algorithm: alg, Limit: 4, Window: time.Second}
		id := "give:newest:" + string(alg)
		if _, ok := c.take(id, rule, at, 2); !ok {
			return
		}
		if _, ok := c.take(id, rule, at+500*time.Millisecond, 2); !ok {
			return
		}
		if _, err := u.GiveBack(c.ctx, c.request(id, rule, at+600*time.Millisecond, 2)); err != nil {
			c.r.Errorf("%s: GiveBack: %v", alg, err)
			return
		}
		if got, ok := c.peek(id, rule, at+time.Second, 1); ok && got.Remaining != 4 {
			c.r.Errorf("%s: after giving back 2 of 4 and the oldest 2 slid out: remaining %d, want 4 (the newest given back)", alg, got.Remaining)
		}
	}
}

// giveBackRefused: algorithms that cannot give units back by time
// (concurrency) are refused with algorithms.ErrInvalidRequest, and nothing
// changes.
func giveBackRefused(c *checker) {
	u, ok := backend.As[backend.UnitRefunder](c.store)
	if !ok {
		return
	}
	refused := 0
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 4, Window: time.Minute}
		if rule.CheckGiveBack() == nil {
			continue
		}
		refused++
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
	if refused == 0 {
		c.r.Errorf("no algorithm refuses GiveBack; concurrency should (its leases are released by id)")
	}
}
