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

// skipHolds turns the holds off, skipLower their lowering, skipNext the
// newest answer kept during a hold, skipKeepVia the floor of a credit
// (controls: the tests show what each is for). Holds are off by default:
// the blip model (internal/dev/modeltest) found two faults, fixed here
// (TestHoldEndsOnTheNewestAnswer, TestGiveBackKeepsWhatThePrimaryAdmitted),
// but with holds on it still finds admissions past its bound in 4 to 5
// of 40 runs under -race over Redis with "Redis emptied" (issue 43, item
// 6, open; docs/outages.md). Their own tests turn them on.
var skipHolds atomic.Bool

var skipLower, skipNext, skipKeepVia = false, false, false

func init() { skipHolds.Store(true) }

// nextAnswer is the primary's newest answer to a held key, kept beside
// the hold: the hold ends at its own reset, and the key's baseline is
// then this answer, not none (a second outage would otherwise decide
// the key on the local store alone while the newest answer still binds).
type nextAnswer struct {
	at, remaining, resetAt int64
	// epoch is outages when the answer was recorded.
	epoch uint64
	set   bool
}

// keepNext keeps res, the primary's answer at now (outages epoch), as
// e's next answer unless it is older news (as update): what is left by
// it and by the hold (lowered first), as the caller is told. The caller
// holds the shard's lock.
func (e *baseline) keepNext(res *backend.Result, now int64, epoch uint64) {
	n := &e.newest
	r := min(res.Remaining, max(e.remaining-e.spent, 0))
	if skipNext || (n.set && (now < n.at || (now == n.at && r >= n.remaining))) {
		return
	}
	*n = nextAnswer{at: now, remaining: r, resetAt: now + res.ResetAfter.Milliseconds(), epoch: epoch, set: true}
}

// settle makes e's next answer its answer once the hold is over (now at
// or past its reset). What the hold counted of Takes the primary admitted
// (via) is in that answer, so it leaves spent; what the policy admitted
// stays counted while it is in its window, as update keeps it (counted
// twice: the answer took it off too, and a GiveBack may credit it). The
// caller holds the shard's lock.
func (e *baseline) settle(now int64) {
	if !e.newest.set || now < e.resetAt {
		return
	}
	n := e.newest
	e.at, e.remaining, e.resetAt, e.epoch = n.at, n.remaining, n.resetAt, n.epoch
	e.newest = nextAnswer{}
	e.spent, e.via, e.told = max(e.spent-e.via, 0), 0, 0
	if now >= e.spentUntil {
		e.spent = 0
	}
}

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
	if e != nil {
		e.settle(now)
	}
	if e == nil || !t.holding() || !e.holds(req, now, t.outages.Load()) {
		return bound{}
	}
	if now >= e.spentUntil {
		e.spent, e.via, e.told = 0, 0, 0
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
		bd.e.via = max(bd.e.via-req.Cost, 0) // first: credit keeps via counted
		bd.credit(req.Cost)
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
		// The primary took these back: what record kept as told is not
		// the floor, what is left after them is.
		bd.e.told = bd.e.via
		bd.credit(req.Cost)
		defer func() { bd.e.told = bd.e.spent }()
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
