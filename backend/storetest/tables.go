package storetest

import (
	"fmt"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// tableCases replay every registered algorithm's Examples (the semantics
// written out by hand, in the algorithm's own file) on one key. Offsets are
// from base, which starts a fixed window.
func tableCases() []testCase {
	var out []testCase
	for _, a := range algorithms.Algorithms() {
		ex := a.Examples
		rule := algorithms.Rule{Algorithm: a.Name, Limit: ex.Limit, Window: ex.Window}
		out = append(out, testCase{name: "table/" + string(a.Name), run: func(c *checker) {
			if len(ex.Steps) == 0 {
				c.r.Errorf("algorithm %s has no Examples to replay", a.Name)
				return
			}
			for i, st := range ex.Steps {
				var got backend.Result
				var ok bool
				op := "Take"
				switch {
				case st.Release:
					held, ok := c.release("k", rule, st.At, st.Cost, leaseID(st.Of))
					if ok && held != st.Held {
						c.r.Errorf("step %d: Release of lease %v at %v: held %v, want %v", i, st.Of, st.At, held, st.Held)
					}
					if !ok || held != st.Held {
						return
					}
					continue
				case st.Renew:
					op = fmt.Sprintf("Renew of lease %v", st.Of)
					got, ok = c.renew("k", rule, st.At, st.Cost, leaseID(st.Of))
				case st.Peek:
					op = "Peek"
					got, ok = c.peek("k", rule, st.At, st.Cost)
				default:
					got, ok = c.take("k", rule, st.At, st.Cost)
				}
				want := backend.Result{Allowed: st.Allowed, Limit: rule.Limit, Remaining: st.Remaining, RetryAfter: st.RetryAfter, ResetAfter: st.ResetAfter}
				if st.Allowed && !st.Peek && a.HoldsLeases() {
					want.Lease = leaseID(st.Lease)
				}
				if !ok || !c.expect(fmt.Sprintf("step %d: %s cost %d at %v", i, op, st.Cost, st.At), got, want) {
					return
				}
			}
		}})
	}
	return out
}

// leaseID is the id of a lease stamped at offset of from base: ids count
// 1/1000 ms, microseconds.
func leaseID(of time.Duration) int64 { return base.Add(of).UnixMicro() }
