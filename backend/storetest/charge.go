package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// chargeCases are the cases of charges (backend.Request.Charge): costs
// recorded after the work, kept as debt beyond the limit.
func chargeCases() []testCase {
	return []testCase{
		{"charge/same_as_go_engine", chargeSameAsGoEngine},
		{"charge/debt_refuses", chargeDebtRefuses},
		{"charge/take_all", chargeTakeAll},
		{"charge/refused_rules", chargeRefusedRules},
		{"charge/log_bounded", chargeLogBounded},
	}
}

// chargeRules are the rules of every algorithm that records charges.
func chargeRules(limits ...int64) []algorithms.Rule {
	var rules []algorithms.Rule
	for _, alg := range algorithms.Names() {
		for _, limit := range limits {
			rule := algorithms.Rule{Algorithm: alg, Limit: limit, Window: time.Second}
			if rule.CheckCharge() == nil {
				rules = append(rules, rule)
			}
		}
	}
	return rules
}

// chargeSameAsGoEngine replays random Takes, charges (up to three times
// the limit) and Peeks (of charges too), the clock creeping and crossing
// windows, and compares each Result with the Go engine's.
func chargeSameAsGoEngine(c *checker) {
	rng := rand.New(rand.NewPCG(29, 31))
	for _, rule := range chargeRules(3, 6, 40) {
		id := fmt.Sprintf("charge:%s:%d", rule.Algorithm, rule.Limit)
		var st algorithms.State
		now := at
		charged := 0
		for step := range 150 {
			if rng.IntN(2) == 0 {
				now += time.Duration(rng.IntN(300)) * time.Millisecond
			}
			ms := base.Add(now).UnixMilli()
			req := c.request(id, rule, now, 1+rng.Int64N(rule.Limit))
			var got, want backend.Result
			var err error
			op := "Take"
			switch p := rng.IntN(10); {
			case p < 4:
				want = backend.ResultOf(rule, rule.Take(&st, ms, req.Cost))
				got, err = c.store.Take(c.ctx, req)
			case p < 7:
				op, req.Charge, req.Cost = "Charge", true, 1+rng.Int64N(3*rule.Limit)
				want = backend.ResultOf(rule, rule.Charge(&st, ms, req.Cost, true))
				got, err = c.store.Take(c.ctx, req)
				charged++
			case p < 8:
				op, req.Charge = "Peek of a charge", true
				want = backend.ResultOf(rule, rule.Charge(&st, ms, req.Cost, false))
				got, err = c.store.Peek(c.ctx, req)
			default:
				op = "Peek"
				want = backend.ResultOf(rule, rule.Peek(&st, ms, req.Cost))
				got, err = c.store.Peek(c.ctx, req)
			}
			what := fmt.Sprintf("%s step %d: %s(%v, cost %d) at %v", id, step, op, rule, req.Cost, now)
			if err != nil {
				c.r.Errorf("%s: unexpected error: %v", what, err)
				return
			}
			if !c.expect(what, got, want) {
				return
			}
		}
		if charged == 0 {
			c.r.Errorf("%s: no charge in the sequence", id)
		}
	}
}

// chargeDebtRefuses: on 1000 per hour, four charges of 300 leave nothing,
// and so does one of 1200; every later Take is refused until the debt has
// left the window, and what is reported left is 0, never negative.
func chargeDebtRefuses(c *checker) {
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 1000, Window: time.Hour}
		if rule.CheckCharge() != nil {
			continue
		}
		for _, charges := range [][]int64{{300, 300, 300, 300}, {1200}} {
			id := fmt.Sprintf("debt:%s:%d", alg, len(charges))
			var last backend.Result
			for i, cost := range charges {
				req := c.request(id, rule, at+time.Duration(i)*time.Millisecond, cost)
				req.Charge = true
				res, err := c.store.Take(c.ctx, req)
				if err != nil {
					c.r.Errorf("%s: charge %d of %d: unexpected error: %v", id, i, cost, err)
					return
				}
				if !res.Allowed || res.Remaining < 0 {
					c.r.Errorf("%s: charge %d of %d: %+v, want recorded (Allowed) with Remaining >= 0", id, i, cost, res)
				}
				last = res
			}
			if last.Remaining != 0 || last.ResetAfter <= 0 {
				c.r.Errorf("%s: after the charges %+v, want 0 left and a ResetAfter", id, last)
			}
			for _, cost := range []int64{1, 100} {
				got, ok := c.take(id, rule, at+time.Minute, cost)
				if ok && (got.Allowed || got.Remaining != 0 || got.RetryAfter <= 0) {
					c.r.Errorf("%s: Take of %d a minute after charges %v: %+v, want refused, 0 left", id, cost, charges, got)
				}
			}
		}
	}
}

// chargeTakeAll: in a TakeAll a charge never refuses the others, and is
// recorded when another refuses the call, which consumes nothing else.
func chargeTakeAll(c *checker) {
	for _, rule := range chargeRules(5) {
		full := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}
		id := "charge:all:" + string(rule.Algorithm)
		if _, ok := c.take(id+":full", full, at, 1); !ok {
			return
		}
		charge := c.request(id, rule, at, 7)
		charge.Charge = true
		other := c.request(id+":other", rule, at, 1)
		res, err := c.store.TakeAll(c.ctx, []backend.Request{charge, other})
		if err != nil || !res.Allowed {
			c.r.Errorf("%s: TakeAll of a charge of 7 and a take: %+v (err %v), want admitted", id, res, err)
			continue
		}
		refused := c.request(id+":full", full, at, 1)
		charge.Cost = 1
		res, err = c.store.TakeAll(c.ctx, []backend.Request{charge, other, refused})
		if err != nil || res.Allowed {
			c.r.Errorf("%s: TakeAll with a spent limit: %+v (err %v), want refused", id, res, err)
			continue
		}
		if got, ok := c.peek(id+":other", rule, at, 1); ok && got.Remaining != 4 {
			c.r.Errorf("%s: the refused TakeAll took from the other request: %d left, want 4", id, got.Remaining)
		}
		if got, ok := c.peek(id, rule, at, 1); ok && (got.Allowed || got.Remaining != 0) {
			c.r.Errorf("%s: after charges of 7 and 1 on 5: %+v, want refused with 0 left", id, got)
		}
	}
}

// chargeRefusedRules: a charge on a rule that cannot record one, or of a
// cost beyond the bound, is an error wrapping ErrInvalidRequest that says
// why.
func chargeRefusedRules(c *checker) {
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 5, Window: time.Second}
		req := c.request("charge:refused:"+string(alg), rule, at, 1)
		req.Charge = true
		if rule.CheckCharge() == nil {
			req.Cost = rule.ChargeBound() + 1
		}
		if _, err := c.store.Take(c.ctx, req); !errors.Is(err, algorithms.ErrInvalidRequest) {
			c.r.Errorf("%s: charge of %d: error %v, want one wrapping ErrInvalidRequest", alg, req.Cost, err)
		}
	}
}

// chargeLogBounded: fourteen charges of 5,000 in one window (70,000
// units, past what compact_log's 16-bit header counts), then Peeks and a
// Take at MaxSlidingLogLimit, also as they slide out, each answer as the
// Go engine's: compact_log and two_level keep 20,000 of them live
// (compactLogCharge).
func chargeLogBounded(c *checker) {
	for _, alg := range []algorithms.Name{algorithms.CompactLog, algorithms.TwoLevel} {
		rule := algorithms.Rule{Algorithm: alg, Limit: 5000, Window: time.Second}
		wide := algorithms.Rule{Algorithm: alg, Limit: algorithms.MaxSlidingLogLimit, Window: time.Second}
		id := "charge:bounded:" + string(alg)
		var st algorithms.State
		for i := range 18 {
			now := at + time.Duration(i)*time.Millisecond
			if i >= 16 {
				now += wide.Window - 4*time.Millisecond // the oldest charges slid out
			}
			ms := base.Add(now).UnixMilli()
			req, op := c.request(id, rule, now, rule.Limit), "Charge"
			var got, want backend.Result
			var err error
			switch {
			case i < 14:
				req.Charge = true
				want = backend.ResultOf(rule, rule.Charge(&st, ms, req.Cost, true))
				got, err = c.store.Take(c.ctx, req)
			case i == 15:
				op, req = "Take at the widest limit", c.request(id, wide, now, 1)
				want = backend.ResultOf(wide, wide.Take(&st, ms, 1))
				got, err = c.store.Take(c.ctx, req)
			default:
				op, req = "Peek at the widest limit", c.request(id, wide, now, 1)
				want = backend.ResultOf(wide, wide.Peek(&st, ms, 1))
				got, err = c.store.Peek(c.ctx, req)
			}
			what := fmt.Sprintf("%s step %d: %s at %v", id, i, op, now)
			if err != nil {
				c.r.Errorf("%s: unexpected error: %v", what, err)
				return
			}
			if !c.expect(what, got, want) {
				return
			}
		}
	}
}
