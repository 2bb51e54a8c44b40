package modeltest

// ChargeN in the model's alphabet, beside the reservations (it shares
// their record of charged units): a cost known after the work, recorded
// whatever is left. The model records it at its time as charged units
// (on the logs at most the charging rule's limit of one charge, as a
// settle's excess), so the later decisions compared with the model see
// the debt, and the reservations' bound leaves it out.

import (
	"time"
)

// chargeStep charges between 1 and twice the limit on key a at the newest
// time through process p's limiter: often past what is left.
func (r *run) chargeStep(p int) error {
	rule := r.rules[p]
	now := r.newest
	n := 1 + int64(r.rng.IntN(int(2*rule.Limit)))
	r.clocks[p].Set(time.UnixMilli(now))
	got, err := r.lims[p].ChargeN(r.ctx, r.keys[0].ID, n)
	r.note("process %d: ChargeN %d (%d per %v): allowed=%v remaining=%d reset=%v",
		p, n, rule.Limit, rule.Window, got.Allowed, got.Remaining, got.ResetAfter)
	if err != nil {
		return r.failf("ChargeN: %v", err)
	}
	if got.Degraded {
		return r.failf("ChargeN was degraded: the stack did not reach its store")
	}
	if !got.Allowed || got.Remaining < 0 || got.RetryAfter != 0 {
		return r.failf("ChargeN: allowed=%v remaining=%d retry=%v; a charge is recorded, reports 0 or more left and no wait",
			got.Allowed, got.Remaining, got.RetryAfter)
	}
	recorded := n
	if r.check.neverOver() {
		// The logs (two_level's too) record at most the charging rule's
		// limit of one charge: decisions read only its newest limit units.
		recorded = min(n, rule.Limit)
	}
	r.logs[0].Record(now, recorded)
	r.rsv.charges.Record(now, recorded)
	if r.check == checkExact {
		w := rule.Window.Milliseconds()
		if want := max(rule.Limit-r.logs[0].Count(now, w), 0); got.Remaining != want {
			return r.failf("ChargeN: remaining=%d; the model says %d", got.Remaining, want)
		}
	}
	return nil
}
