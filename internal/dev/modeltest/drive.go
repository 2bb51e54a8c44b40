package modeltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// Lateness is how late (in ms) a request may be stamped behind the newest
// time a key has seen; windows are chosen so that w2 <= 2*w1-Lateness.
const lateness = 700

// rateWindows are the windows the log and two_level runs change between;
// the approximate algorithms keep the first.
var rateWindows = []int64{1000, 1200}

var limits = []int64{3, 5, 8, 12}

// run drives one algorithm on one store with two processes' rules on one
// key (a rolling deploy), and returns the first divergence.
type run struct {
	ctx     context.Context
	store   backend.Store
	alg     algorithms.Name
	check   check // what the model checks, from alg's descriptor
	rng     *rand.Rand
	keys    [2]backend.Key
	rules   [2]algorithms.Rule
	newest  int64 // the newest time any request carried
	logs    [2]Log
	leases  Leases
	maxL    int64
	minW    int64
	history []string
	// lims, when set, are the two processes' limiters on the store (the
	// limiter's own calls are driven instead of the store's), each on its
	// own clock.
	lims   [2]*limiter.Limiter
	clocks [2]*clock.Fake
	// rsv, when set, adds reservations to the alphabet (reserve.go).
	rsv *reservations
}

// withLimiters makes r drive two limiters on its store, one per process,
// with the processes' rules as their configs.
func (r *run) withLimiters() error {
	for p := range r.lims {
		r.clocks[p] = clock.NewFake(time.UnixMilli(r.newest))
		l, err := limiter.New(r.store, r.config(r.rules[p]), limiter.WithClock(r.clocks[p]))
		if err != nil {
			return err
		}
		r.lims[p] = l
	}
	return nil
}

func (r *run) config(rule algorithms.Rule) limiter.Config {
	return limiter.Config{Algorithm: rule.Algorithm, Limit: rule.Limit, Window: rule.Window, Prefix: r.keys[0].Prefix,
		ReservationTimeout: reservationTimeout}
}

// decide makes one decision for process p on key a at now: through the
// limiter when there are limiters (a Peek there always costs 1).
func (r *run) decide(p int, req backend.Request, take bool) (backend.Result, error) {
	l := r.lims[p]
	switch {
	case l == nil && take:
		return r.store.Take(r.ctx, req)
	case l == nil:
		return r.store.Peek(r.ctx, req)
	}
	r.clocks[p].Set(req.Now)
	switch {
	case !take:
		return l.Peek(r.ctx, req.Key.ID)
	case req.Cost == 1 && r.rng.IntN(2) == 0:
		return l.Allow(r.ctx, req.Key.ID)
	}
	return l.AllowN(r.ctx, req.Key.ID, req.Cost)
}

// Drive runs steps random steps of the registered algorithm alg on store,
// under keys of prefix, from seed, and returns the first divergence from
// the model (what it checks follows alg's descriptor: see Covers).
func Drive(ctx context.Context, store backend.Store, alg algorithms.Name, prefix string, seed uint64, steps int) error {
	if err := Covers(algorithms.Lookup(alg)); err != nil {
		return err
	}
	return newRun(ctx, store, alg, prefix, seed).Steps(steps)
}

func newRun(ctx context.Context, store backend.Store, alg algorithms.Name, prefix string, seed uint64) *run {
	r := &run{ctx: ctx, store: store, alg: alg, rng: rand.New(rand.NewPCG(seed, 0x6d6f64656c))}
	r.check, _ = checkOf(algorithms.Lookup(alg)) // TestModelCoversEveryAlgorithm: known
	r.keys = [2]backend.Key{{Prefix: prefix, ID: "a"}, {Prefix: prefix, ID: "b"}}
	// Real time: the memory store's sweeper and Redis expiries run on it,
	// and the simulated clock only ever runs ahead of it.
	r.newest = time.Now().UnixMilli()
	for p := range r.rules {
		r.rules[p] = r.randomRule()
	}
	r.epoch()
	return r
}

// epoch starts the invariant's bookkeeping again (after a Reset, what was
// admitted before no longer counts).
func (r *run) epoch() {
	r.maxL, r.minW = 0, 1<<62
	for _, rule := range r.rules {
		r.inForce(rule)
	}
}

func (r *run) inForce(rule algorithms.Rule) {
	r.maxL = max(r.maxL, rule.Limit)
	r.minW = min(r.minW, rule.Window.Milliseconds())
}

func (r *run) randomRule() algorithms.Rule {
	w := rateWindows[0]
	if r.check.neverOver() {
		w = rateWindows[r.rng.IntN(len(rateWindows))]
	}
	return algorithms.Rule{Algorithm: r.alg, Limit: limits[r.rng.IntN(len(limits))], Window: ms(w)}
}

func (r *run) failf(format string, args ...any) error {
	tail := r.history
	if len(tail) > 25 {
		tail = tail[len(tail)-25:]
	}
	return fmt.Errorf("%s after %d steps: %s\nlast steps:\n  %s", r.alg, len(r.history), fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (r *run) note(format string, args ...any) {
	r.history = append(r.history, fmt.Sprintf(format, args...))
}

// Steps runs n random steps.
func (r *run) Steps(n int) error {
	for i := range n {
		var err error
		if r.check == checkLeases {
			err = r.leaseStep()
		} else {
			err = r.rateStep()
		}
		if err == nil && (i%40 == 39 || i == n-1) {
			err = r.invariant()
		}
		if err == nil && (i%40 == 39 || i == n-1) {
			err = r.reserveInvariant()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *run) rateStep() error {
	p := r.rng.IntN(2)
	rule := r.rules[p]
	switch x := r.rng.IntN(100); {
	case x < 25:
		d := int64(r.rng.IntN(400))
		if r.rng.IntN(30) == 0 {
			d = int64(2+r.rng.IntN(4)) * rule.Window.Milliseconds() // a clock jump
		}
		r.newest += d
		r.note("clock +%dms", d)
		return nil
	case x < 33:
		r.rules[p] = r.randomRule()
		if l := r.lims[p]; l != nil {
			if err := l.SetConfig(r.config(r.rules[p])); err != nil {
				return r.failf("SetConfig: %v", err)
			}
		}
		r.inForce(r.rules[p])
		r.note("process %d: SetConfig %d per %v", p, r.rules[p].Limit, r.rules[p].Window)
		return nil
	case x < 35:
		k := r.rng.IntN(2)
		// At the run's time: the Redis stores delete a fixed window's keys
		// around it (the limiter passes its clock's, so its clock is set to
		// the run's time first: left at p's last request, it could be
		// windows behind after a clock jump, and the reset would delete
		// other windows than the one the next request counts in).
		reset := func() error {
			return r.store.Reset(r.ctx, r.keys[k], rule, time.UnixMilli(r.newest))
		}
		if l := r.lims[p]; l != nil {
			reset = func() error {
				r.clocks[p].Set(time.UnixMilli(r.newest))
				return l.Reset(r.ctx, r.keys[k].ID)
			}
		}
		if err := reset(); err != nil {
			return r.failf("Reset: %v", err)
		}
		r.logs[k].Reset()
		r.note("Reset key %d", k)
		if k == 0 {
			r.epoch()
			if r.rsv != nil {
				// A refund after a Reset gives back units taken since
				// (docs/reservations.md); the open ones are left unsettled.
				r.rsv.charges.Reset()
				r.rsv.open = nil
			}
		}
		return nil
	case x < 45 && r.lims[p] == nil:
		return r.takeAll(p)
	case x < 60 && r.canReserve():
		return r.reserveStep(p)
	case x < 64 && r.canReserve():
		return r.chargeStep(p)
	case x < 50 && r.lims[p] == nil && r.check == checkExact:
		if u, ok := backend.As[backend.UnitRefunder](r.store); ok {
			return r.giveBack(p, u)
		}
	}
	now := r.newest
	if r.check.neverOver() && r.rng.IntN(4) == 0 {
		now -= int64(r.rng.IntN(lateness))
	}
	cost := 1 + int64(r.rng.IntN(int(min(rule.Limit, 3))))
	req := backend.Request{Key: r.keys[0], Rule: rule, Now: time.UnixMilli(now), Cost: cost}
	take := r.rng.IntN(5) != 0
	if !take && r.lims[p] != nil {
		req.Cost = 1
	}
	cost = req.Cost
	got, err := r.decide(p, req, take)
	verb := map[bool]string{true: "Take", false: "Peek"}[take]
	r.note("process %d: %s cost %d at %+dms (%d per %v): allowed=%v remaining=%d retry=%v reset=%v",
		p, verb, cost, now-r.newest, rule.Limit, rule.Window, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter)
	if err != nil {
		return r.failf("%s: %v", verb, err)
	}
	if got.Degraded {
		return r.failf("%s was degraded: the stack did not reach its store", verb)
	}
	w := rule.Window.Milliseconds()
	want := r.logs[0].Decide(now, w, rule.Limit, cost, take)
	if r.check == checkAligned {
		want = r.logs[0].DecideFixed(now, w, rule.Limit, cost, take)
	}
	if err := r.compare(verb, got, want); err != nil {
		return err
	}
	if take && got.Allowed {
		r.logs[0].Record(now, cost)
	}
	return nil
}

// compare checks a store's decision against the exact log's.
func (r *run) compare(verb string, got, want backend.Result) error {
	if got.Allowed && !want.Allowed && r.check.neverOver() {
		return r.failf("%s admitted what the exact log denies (want %+v)", verb, want)
	}
	if got.Cached && got.Allowed {
		return r.failf("%s: a cached answer admitted", verb)
	}
	if r.check != checkExact && r.check != checkAligned {
		return nil
	}
	if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
		return r.failf("%s: store says allowed=%v remaining=%d retry=%v reset=%v; the model says allowed=%v remaining=%d retry=%v reset=%v",
			verb, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter, want.Allowed, want.Remaining, want.RetryAfter, want.ResetAfter)
	}
	return nil
}

// takeAll decides both keys together, all or nothing.
func (r *run) takeAll(p int) error {
	rule := r.rules[p]
	now := r.newest
	reqs := []backend.Request{
		{Key: r.keys[0], Rule: rule, Now: time.UnixMilli(now), Cost: 1},
		{Key: r.keys[1], Rule: rule, Now: time.UnixMilli(now), Cost: 1},
	}
	got, err := r.store.TakeAll(r.ctx, reqs)
	r.note("process %d: TakeAll both keys (%d per %v): allowed=%v", p, rule.Limit, rule.Window, got.Allowed)
	if err != nil {
		return r.failf("TakeAll: %v", err)
	}
	if got.Degraded {
		return r.failf("TakeAll was degraded")
	}
	w := rule.Window.Milliseconds()
	want := r.logs[0].Decide(now, w, rule.Limit, 1, true).Allowed && r.logs[1].Decide(now, w, rule.Limit, 1, true).Allowed
	if r.check == checkAligned {
		want = r.logs[0].DecideFixed(now, w, rule.Limit, 1, true).Allowed && r.logs[1].DecideFixed(now, w, rule.Limit, 1, true).Allowed
	}
	if got.Allowed && !want && r.check.neverOver() {
		return r.failf("TakeAll admitted what the exact log denies")
	}
	if (r.check == checkExact || r.check == checkAligned) && got.Allowed != want {
		return r.failf("TakeAll: store says allowed=%v, the model %v", got.Allowed, want)
	}
	if got.Allowed {
		r.logs[0].Record(now, 1)
		r.logs[1].Record(now, 1)
	}
	return nil
}

// giveBack gives units back on key a by time (negative hits), possibly
// late, and compares the outcome with the exact log's after it drops its
// newest live units.
func (r *run) giveBack(p int, u backend.UnitRefunder) error {
	rule := r.rules[p]
	now := r.newest - int64(r.rng.IntN(lateness))
	cost := 1 + int64(r.rng.IntN(int(min(rule.Limit, 3))))
	got, err := u.GiveBack(r.ctx, backend.Request{Key: r.keys[0], Rule: rule, Now: time.UnixMilli(now), Cost: cost})
	r.note("process %d: GiveBack cost %d at %+dms (%d per %v): remaining=%d", p, cost, now-r.newest, rule.Limit, rule.Window, got.Remaining)
	if err != nil {
		return r.failf("GiveBack: %v", err)
	}
	w := rule.Window.Milliseconds()
	r.logs[0].GiveBack(now, w, cost)
	return r.compare("GiveBack", got, r.logs[0].Decide(now, w, rule.Limit, cost, false))
}

// invariant checks the window bounds over everything admitted on key a.
func (r *run) invariant() error {
	if r.rsv != nil {
		return nil // charged excesses count past the limit: reserveInvariant
	}
	l := &r.logs[0]
	switch r.check {
	case checkAligned:
		if n := l.MaxInAlignedWindow(r.minW); n > r.maxL {
			return r.failf("an aligned window of %dms holds %d units; the largest limit in force is %d", r.minW, n, r.maxL)
		}
	case checkApproximate:
		if n, at := l.MaxInWindow(r.minW); n > 2*r.maxL {
			return r.failf("the window ending at %d holds %d units; twice the largest limit in force is %d", at, n, 2*r.maxL)
		}
	default:
		if n, at := l.MaxInWindow(r.minW); n > r.maxL {
			return r.failf("the %dms window ending at %+dms holds %d units; the largest limit in force is %d", r.minW, at-r.newest, n, r.maxL)
		}
	}
	return nil
}

func (r *run) leaseStep() error {
	ls, ok := r.store.(backend.LeaseStore)
	if !ok {
		return r.failf("%T holds no leases", r.store)
	}
	p := r.rng.IntN(2)
	rule := r.rules[p]
	w := rule.Window.Milliseconds()
	now := r.newest
	req := backend.Request{Key: r.keys[0], Rule: rule, Now: time.UnixMilli(now), Cost: 1}
	switch x := r.rng.IntN(100); {
	case x < 25:
		d := int64(r.rng.IntN(300))
		r.newest += d
		r.note("clock +%dms", d)
	case x < 32:
		r.rules[p] = r.randomRule()
		r.inForce(r.rules[p])
		r.note("process %d: SetConfig %d per %v", p, r.rules[p].Limit, r.rules[p].Window)
	case x < 55, x < 70 && len(r.leases.expiry) == 0:
		got, err := ls.Take(r.ctx, req)
		r.note("process %d: Acquire (%d, %v): allowed=%v lease=%d", p, rule.Limit, rule.Window, got.Allowed, got.Lease)
		if err != nil {
			return r.failf("Acquire: %v", err)
		}
		if want := r.leases.Held(now)+1 <= rule.Limit; got.Allowed != want {
			return r.failf("Acquire: store says allowed=%v with %d held at limit %d", got.Allowed, r.leases.Held(now), rule.Limit)
		}
		if got.Allowed {
			if err := r.leases.Grant(got.Lease, now, w); err != nil {
				return r.failf("Acquire: %v", err)
			}
		}
	default:
		var id int64
		for k := range r.leases.expiry {
			id = k
			break
		}
		if x < 85 {
			held, err := ls.Release(r.ctx, req, id)
			r.note("process %d: Release %d: held=%v", p, id, held)
			if err != nil {
				return r.failf("Release: %v", err)
			}
			if want := r.leases.IsHeld(id, now); held != want {
				return r.failf("Release %d: store says held=%v, the model %v", id, held, want)
			}
			r.leases.Release(id)
		} else {
			got, err := ls.Renew(r.ctx, req, id)
			r.note("process %d: Renew %d: allowed=%v lease=%d", p, id, got.Allowed, got.Lease)
			if err != nil {
				return r.failf("Renew: %v", err)
			}
			want := r.leases.IsHeld(id, now)
			if got.Allowed != want {
				return r.failf("Renew %d: store says %v, the model %v", id, got.Allowed, want)
			}
			if got.Allowed {
				if err := r.leases.Renew(id, got.Lease, now, w); err != nil {
					return r.failf("Renew: %v", err)
				}
			} else {
				r.leases.Release(id)
			}
		}
	}
	if n := r.leases.Held(r.newest); n > r.maxL {
		return r.failf("%d leases held; the largest limit in force is %d", n, r.maxL)
	}
	return nil
}
