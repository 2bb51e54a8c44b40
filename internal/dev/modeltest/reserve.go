package modeltest

// Reservations in the model's alphabet: ReserveN, Settle (below, at and
// above the estimate), Cancel and expiry, driven through the two
// processes' limiters. The model records a reservation's estimate at its
// time as a Take's units, gives a settle's refund back from those units
// (never the newest), records a settle's excess at the settle's time as
// charged units, and leaves an expired reservation's estimate counted. The
// bound checked with the invariant: in every window, the units counted
// less the charged excesses in it are at most the largest limit in force
// (for the approximate algorithms, twice it).

import (
	"errors"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
)

// reservationTimeout is the runs' ReservationTimeout: clock steps of up to
// 400 ms and jumps of windows make some reservations expire.
const reservationTimeout = 1500 * time.Millisecond

// open is a reservation not yet settled.
type open struct {
	res  *limiter.Reservation
	p    int   // the process (limiter) that reserved it
	at   int64 // its time, where its units are recorded
	est  int64
	w    int64 // its rule's window, in ms
	ends int64 // its Expires, in ms
}

// reservations is a run's reservation state.
type reservations struct {
	open    []open
	charges Log // the settled excesses, at their settles' times
	settled int // settles and cancels that changed the store
	expired int
}

// withReservations makes r drive two limiters (withLimiters) and add
// reservations to the alphabet of the algorithms that can reserve.
func (r *run) withReservations() error {
	if err := r.withLimiters(); err != nil {
		return err
	}
	r.rsv = &reservations{}
	return nil
}

// canReserve reports whether r drives reservations.
func (r *run) canReserve() bool {
	return r.rsv != nil && r.lims[0] != nil && algorithms.Rule{Algorithm: r.alg}.CheckCharge() == nil
}

// reserveStep reserves, or settles, cancels or lets expire one reservation.
func (r *run) reserveStep(p int) error {
	if len(r.rsv.open) == 0 || r.rng.IntN(2) == 0 {
		return r.reserve(p)
	}
	i := r.rng.IntN(len(r.rsv.open))
	o := r.rsv.open[i]
	r.rsv.open = slices.Delete(r.rsv.open, i, i+1)
	actual := int64(r.rng.IntN(int(o.est) + 5)) // below, at and above the estimate
	return r.settle(o, actual)
}

// reserve is ReserveN at the newest time, compared with AllowN's model.
func (r *run) reserve(p int) error {
	rule := r.rules[p]
	now := r.newest
	est := 1 + int64(r.rng.IntN(int(min(rule.Limit, 4))))
	r.clocks[p].Set(time.UnixMilli(now))
	res, got, err := r.lims[p].ReserveN(r.ctx, r.keys[0].ID, est)
	r.note("process %d: ReserveN %d (%d per %v): allowed=%v remaining=%d retry=%v reset=%v",
		p, est, rule.Limit, rule.Window, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter)
	if err != nil {
		return r.failf("ReserveN: %v", err)
	}
	if got.Degraded {
		return r.failf("ReserveN was degraded: the stack did not reach its store")
	}
	w := rule.Window.Milliseconds()
	want := r.logs[0].Decide(now, w, rule.Limit, est, true)
	if r.check == checkAligned {
		want = r.logs[0].DecideFixed(now, w, rule.Limit, est, true)
	}
	if err := r.compare("ReserveN", got, want); err != nil {
		return err
	}
	if (res != nil) != got.Allowed {
		return r.failf("ReserveN: reservation %v with allowed=%v", res != nil, got.Allowed)
	}
	if got.Allowed {
		r.logs[0].Record(now, est)
		r.rsv.open = append(r.rsv.open, open{res: res, p: p, at: now, est: est, w: w, ends: res.Expires().UnixMilli()})
	}
	return nil
}

// settle settles o at actual (0: Cancel) at the newest time.
func (r *run) settle(o open, actual int64) error {
	now := r.newest
	r.clocks[o.p].Set(time.UnixMilli(now))
	var got limiter.Decision
	var err error
	verb := "Settle"
	if actual == 0 && r.rng.IntN(2) == 0 {
		verb, err = "Cancel", o.res.Cancel(r.ctx)
		got.Allowed = true
	} else {
		got, err = o.res.Settle(r.ctx, actual)
	}
	r.note("process %d: %s %d of %d reserved at %+dms: remaining=%d err=%v", o.p, verb, actual, o.est, o.at-now, got.Remaining, err)
	if now > o.ends {
		if !errors.Is(err, limiter.ErrReservationExpired) {
			return r.failf("%s after the reservation's timeout: %v, want ErrReservationExpired", verb, err)
		}
		r.rsv.expired++
		return nil // it ended counting its estimate: the model keeps it
	}
	if err != nil {
		return r.failf("%s: %v", verb, err)
	}
	if !got.Allowed || got.Remaining < 0 {
		return r.failf("%s: allowed=%v remaining=%d; a settle is recorded, and reports 0 or more left", verb, got.Allowed, got.Remaining)
	}
	if _, err := o.res.Settle(r.ctx, actual); !errors.Is(err, limiter.ErrReservationSettled) {
		return r.failf("a second Settle: %v, want ErrReservationSettled", err)
	}
	switch {
	case actual < o.est && r.check == checkAligned:
		// The counter gives back to the window that took them, whichever
		// units of it (after a Reset: others').
		start := o.at - o.at%o.w
		r.logs[0].RemoveIn(start, start+o.w, o.est-actual)
	case actual < o.est:
		r.logs[0].RemoveAt(o.at, o.est-actual)
	case actual > o.est:
		excess := actual - o.est
		if r.check.neverOver() {
			// The logs (two_level's too) record at most the charging
			// rule's limit of one charge: decisions read only its newest
			// limit units.
			excess = min(excess, r.rules[o.p].Limit)
		}
		r.logs[0].Record(now, excess)
		r.rsv.charges.Record(now, excess)
	}
	r.rsv.settled++
	return nil
}

// RemoveAt forgets up to n units recorded at exactly at.
func (l *Log) RemoveAt(at, n int64) {
	i, _ := slices.BinarySearch(l.units, at)
	j := i
	for j < len(l.units) && l.units[j] == at && int64(j-i) < n {
		j++
	}
	l.units = slices.Delete(l.units, i, j)
}

// RemoveIn forgets up to n of the newest units in [from, to).
func (l *Log) RemoveIn(from, to, n int64) {
	i, _ := slices.BinarySearch(l.units, from)
	j, _ := slices.BinarySearch(l.units, to)
	l.units = slices.Delete(l.units, max(i, j-int(n)), j)
}

// MaxOverCharges returns the most units found in any interval (t-w, t]
// less the charged units in it, and t.
func (l *Log) MaxOverCharges(charges *Log, w int64) (most, at int64) {
	for _, u := range l.units {
		n := l.countIn(u-w, u) - charges.countIn(u-w, u)
		if n > most {
			most, at = n, u
		}
	}
	return most, at
}

// countIn counts the units in (from, to].
func (l *Log) countIn(from, to int64) int64 {
	i, _ := slices.BinarySearch(l.units, from+1)
	j, _ := slices.BinarySearch(l.units, to+1)
	return int64(j - i)
}

// reserveInvariant checks the reservations' bound on key a.
func (r *run) reserveInvariant() error {
	if r.rsv == nil {
		return nil
	}
	l := &r.logs[0]
	bound := r.maxL
	if r.check == checkApproximate {
		bound = 2 * r.maxL
	}
	if r.check == checkAligned {
		counts, charged := map[int64]int64{}, map[int64]int64{}
		for _, u := range l.units {
			counts[u/r.minW]++
		}
		for _, u := range r.rsv.charges.units {
			charged[u/r.minW]++
		}
		for k, n := range counts {
			if n-charged[k] > bound {
				return r.failf("the aligned window %d holds %d units and %d charged: over the largest limit in force %d plus the charges", k, n, charged[k], bound)
			}
		}
		return nil
	}
	if n, at := l.MaxOverCharges(&r.rsv.charges, r.minW); n > bound {
		return r.failf("the %dms window ending at %+dms holds %d units besides its charged excesses; the bound is %d", r.minW, at-r.newest, n, bound)
	}
	return nil
}
