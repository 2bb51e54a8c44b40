package fallback

import (
	"sync/atomic"

	"github.com/limitkit/limitkit/backend"
)

// Holds: a primary that comes back empty.
//
// A Redis restarted without persistence, or failed over to a replica that
// had not received the last writes, answers as if its keys were new. So an
// answer recorded before the breaker last opened keeps binding after the
// primary answers again, until that answer's reset: the key is held. A
// held key's Takes are checked against it as during an outage, with the
// whole of what was left (n = 1: the primary is back, and the fleet shares
// it again) less what this process admitted since (locally and on the
// primary), and counted in it; the primary's answers do not replace it.
// Where the primary kept its counts the hold refuses nothing it would not
// (a fixed window: what this process admitted since is in both) but the
// units the policy admitted while it was away, which are real; where it
// lost them, the hold refuses what it forgot. The primary is asked even
// when the hold refuses: its answer is the decision's (not degraded) and
// probes the breaker, and the units it counts of a refused Take stand in
// for those it lost or never saw.

// skipHolds turns the holds off, skipLower their lowering (a control).
// Holds are off by default: with them on, the blip model test
// (internal/dev/modeltest TestBlipModel, under -race) finds degraded
// admissions past its bound, a race not found yet (issue 43, item 6, is
// open). Their own tests turn them on.
var skipHolds atomic.Bool

var skipLower = false

func init() { skipHolds.Store(true) }

// holding reports whether t holds keys at all: with holds off no call
// takes a shard's lock for them.
func (t *baselines) holding() bool { return t != nil && !skipHolds.Load() }

// holds reports whether e is held at now for req: recorded before the
// last outage (epoch, the outages since), not yet reset, of req's rule.
func (e *baseline) holds(req *backend.Request, now int64, epoch uint64) bool {
	return e.epoch < epoch && now < e.resetAt && e.limit == req.Rule.Limit && e.window == req.Rule.Window.Milliseconds()
}

// heldOf returns the bound of req's held key (nil entry when not held);
// the caller holds the shard's lock.
func (t *baselines) heldOf(req *backend.Request) bound {
	k := keyOf(req)
	e := t.shards[t.shardOf(k)].m[k]
	now := req.Millis()
	if e == nil || !t.holding() || !e.holds(req, now, t.outages.Load()) {
		return bound{}
	}
	if now >= e.spentUntil {
		e.spent, e.via = 0, 0
	}
	return bound{e: e, n: 1}
}

// reserveHeld checks a Take of req against its key's hold: one that fits
// is counted in it (reserved; releaseHeld gives it back when the primary
// does not admit it); one that does not is refused (the denial, refused),
// after the primary was asked all the same (heldDenial): its answer keeps
// decisions and probes flowing, and what it counts of a refused Take stands
// in for the units it lost or never saw. A charge is counted, never
// refused.
func (t *baselines) reserveHeld(req *backend.Request) (res backend.Result, refused, reserved bool) {
	if !t.holding() {
		return res, false, false
	}
	defer t.lock(req)()
	bd := t.heldOf(req)
	if bd.e == nil {
		return res, false, false
	}
	now := req.Millis()
	if !req.Charge && !bd.allows(now, req.Cost) {
		res = bd.denial(now, req.Cost, req.Rule.Limit)
		res.Degraded = false // the primary answers; this process knows more
		return res, true, false
	}
	bd.spend(now, req.Cost)
	bd.e.via += req.Cost
	return res, false, true
}

// heldDenial is the answer to a Take the hold refused: the primary's own
// refusal, else the hold's denial.
func heldDenial(primary, denial backend.Result) backend.Result {
	if !primary.Allowed {
		return primary
	}
	return denial
}

// releaseHeld gives back a Take reserveHeld counted: the primary refused
// it or did not answer.
func (t *baselines) releaseHeld(req *backend.Request) {
	if !t.holding() {
		return
	}
	defer t.lock(req)()
	if bd := t.heldOf(req); bd.e != nil {
		bd.credit(req.Cost)
		bd.e.via = max(bd.e.via-req.Cost, 0)
	}
}

// lower makes the held answer e no looser than res, the primary's answer
// at now: what it leaves is then at most what the primary says is left
// less what the policy admitted (spent less via), as an answer that
// replaced it would leave. For a bucket (gcra) res is moved back to e's
// time by the refill between them. The caller holds the shard's lock.
func (e *baseline) lower(res *backend.Result, now int64) {
	if skipLower {
		return
	}
	r := res.Remaining + e.via
	if refills(e.key.alg) && now > e.at {
		r -= (now - e.at) * e.limit / e.window
	}
	e.remaining = min(e.remaining, r)
}

// afterHeld applies a held key's bound to the primary's answer res to req
// (kind: a Peek is refused when the hold would refuse its Take; a give
// back takes its units off what the hold counted) and returns it.
func (t *baselines) afterHeld(req *backend.Request, kind localKind, res backend.Result) backend.Result {
	if !t.holding() || kind == localTake {
		return res
	}
	defer t.lock(req)()
	bd := t.heldOf(req)
	if bd.e == nil {
		return res
	}
	now := req.Millis()
	if kind == localGiveBack {
		bd.credit(req.Cost)
	}
	if res.Allowed && !bd.allows(now, req.Cost) {
		d := bd.denial(now, req.Cost, req.Rule.Limit)
		d.Degraded = false
		return d
	}
	res.Remaining = min(res.Remaining, max(bd.left(now), 0))
	return res
}

// heldAll is reserveHeld for a TakeAll's requests whose policy is local:
// which it counted (reserved), or the call's denial when one does not fit
// (refused; nothing stays counted, and the primary is asked all the same).
func (s *Store) heldAll(reqs []backend.Request) (res backend.Result, refused bool, reserved [backend.MaxRequests]bool) {
	if !s.base.holding() || len(reqs) > backend.MaxRequests {
		return res, false, reserved
	}
	for i := range reqs {
		if s.policyOf(&reqs[i]).Mode() != backend.ModeLocal {
			continue
		}
		denial, no, ok := s.base.reserveHeld(&reqs[i])
		reserved[i] = ok
		if no {
			s.releaseHeldAll(reqs, &reserved, false)
			denial.Rule = i
			return denial, true, reserved
		}
	}
	return res, false, reserved
}

// releaseHeldAll gives back what heldAll counted, but the charges when
// the primary answered (a charge is taken even when the call is refused).
func (s *Store) releaseHeldAll(reqs []backend.Request, reserved *[backend.MaxRequests]bool, answered bool) {
	for i, r := range reserved[:min(len(reqs), len(reserved))] {
		if r && !(answered && reqs[i].Charge) {
			s.base.releaseHeld(&reqs[i])
			reserved[i] = false
		}
	}
}
