// Package modeltest checks every store and wrapper stack against one
// reference model of the algorithms, driven by random interleavings.
//
// The model is deliberately plain: it keeps every admitted unit with its
// timestamp (and every held lease with its expiry) forever, and decides by
// counting them. It never calls the algorithm steps of package algorithms.
// Its state is the store's own admissions: every unit the store admits is
// recorded in the model, so a store that over-admits is caught by the
// invariants, and one that decides differently from the model is caught by
// the comparison, at the step where it happens.
//
// What the model checks follows each algorithm's descriptor
// (algorithms.Algorithm.Accuracy; a new registry row is driven with no
// edit here):
//
//   - Exact (sliding_log, compact_log): a request at now with window w,
//     limit L and cost c counts the units with timestamp u > now-w (units
//     later than now too) and is admitted iff count+c <= L. Remaining,
//     RetryAfter and ResetAfter follow from the same units. The model is
//     exact, and compared field by field, for any mix of limits and of
//     windows w1 <= w2 <= 2*w1-lateness, with requests up to `lateness`
//     late (the store forgets units older than two of the request's
//     windows).
//   - NeverOver (two_level): every admission is one the exact log would
//     make over the units already admitted (its documented promise); it
//     may deny more. Driven as Exact is.
//   - Exact, holding leases (concurrency): a lease is held from its grant
//     until released or until its window has passed since the time its id
//     names (the grant's ms, in 1/1000 ms, so at most 1 ms late; a
//     renewal moves it to a new id). An acquire is admitted iff
//     held+c <= L: compared exactly.
//   - PerAlignedWindow (fixed_window): a request at now counts the units
//     in the aligned window [k*w, (k+1)*w) holding now and is admitted iff
//     count+c <= L; compared exactly (the runs' requests never go back in
//     time, and one window is in force), so a refused request that left
//     its units counted (a missing refund on the Redis stores' native
//     path) is caught at the next request it wrongly denies; and checked
//     by the invariant that one aligned window never holds more than the
//     largest limit.
//   - Approximate (sliding_counter, gcra): checked by invariants only, on
//     one window per run: never more than twice the largest limit in any
//     window.
//
// GiveBack (by time, Envoy's negative hits) is driven on the Exact logs,
// whose model drops its newest units that count at now. The other
// algorithms' give backs are compared with the Go engine by the store
// conformance suite (backend/storetest give_back/*): two_level's light
// counters know a window's newest time, not each unit's, so the exact
// log cannot say how many of its units a give back finds counted.
//
// The invariant checked for every Exact and NeverOver run, whatever the
// interleaving: for every interval (t-w, t] with w the shortest window in
// force, the admitted units are at most the largest limit in force.
package modeltest

import (
	"fmt"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Log is the exact log model of one key: every admitted unit, ascending.
type Log struct{ units []int64 }

// Count returns the units that count at now under window w.
func (l *Log) Count(now, w int64) int64 {
	n := int64(0)
	for _, u := range l.units {
		if u > now-w {
			n++
		}
	}
	return n
}

// Record adds cost units at now, keeping the order.
func (l *Log) Record(now, cost int64) {
	i, _ := slices.BinarySearch(l.units, now+1)
	for range cost {
		l.units = slices.Insert(l.units, i, now)
	}
}

// GiveBack forgets up to cost of the newest units that count at now under
// window w (negative hits); those that slid out stay.
func (l *Log) GiveBack(now, w, cost int64) {
	k := min(cost, l.Count(now, w))
	l.units = l.units[:int64(len(l.units))-k]
}

// Reset forgets every unit.
func (l *Log) Reset() { l.units = nil }

// Decide returns what the exact log decides for a request; take says
// whether the request consumes (a Take) or only looks (a Peek). It does not
// record anything.
func (l *Log) Decide(now, w, limit, cost int64, take bool) backend.Result {
	var live []int64
	for _, u := range l.units {
		if u > now-w {
			live = append(live, u)
		}
	}
	n := int64(len(live))
	r := backend.Result{Limit: limit, Allowed: n+cost <= limit}
	if r.Allowed {
		r.Remaining = limit - n
		if take {
			r.Remaining -= cost
			live = append(live, now)
		}
	} else {
		r.Remaining = max(limit-n, 0)
		// The (n+cost-limit)-th oldest counted unit must slide out first.
		r.RetryAfter = ms(live[n+cost-limit-1] + w - now)
	}
	newest := int64(-1 << 62)
	for _, u := range live {
		newest = max(newest, u)
	}
	if len(live) > 0 {
		r.ResetAfter = ms(newest + w - now)
	}
	return r
}

// DecideFixed returns what an exact fixed window decides for a request
// (take: a Take, else a Peek) over the log's units: those in the aligned
// window [k*w, (k+1)*w) holding now count, and the request is admitted iff
// they and its cost are within limit. It records nothing.
func (l *Log) DecideFixed(now, w, limit, cost int64, take bool) backend.Result {
	start := now - now%w
	n := int64(0)
	for _, u := range l.units {
		if u >= start && u < start+w {
			n++
		}
	}
	end := ms(start + w - now)
	r := backend.Result{Limit: limit, Allowed: n+cost <= limit}
	if !r.Allowed {
		r.Remaining, r.RetryAfter, r.ResetAfter = max(limit-n, 0), end, end
		return r
	}
	r.Remaining = limit - n
	if take {
		r.Remaining -= cost
		n += cost
	}
	if n > 0 {
		r.ResetAfter = end
	}
	return r
}

// MaxInWindow returns the most units found in any interval (t-w, t].
func (l *Log) MaxInWindow(w int64) (most int64, at int64) {
	j := 0
	for i, u := range l.units {
		for l.units[j] <= u-w {
			j++
		}
		if n := int64(i - j + 1); n > most {
			most, at = n, u
		}
	}
	return most, at
}

// MaxInAlignedWindow returns the most units in one window [k*w, (k+1)*w).
func (l *Log) MaxInAlignedWindow(w int64) int64 {
	counts := map[int64]int64{}
	most := int64(0)
	for _, u := range l.units {
		counts[u/w]++
		most = max(most, counts[u/w])
	}
	return most
}

// Leases is the concurrency model of one key: held leases by id, each with
// its expiry in lease ids (1/1000 ms). A lease id names its grant's time
// in 1/1000 ms, so a lease of window w granted at now with id expires at
// id + w*1000: at now + w when it is the ms's first grant, at most 1 ms
// later when the ms saw others before it. The model checks that an id is
// never before its grant (which would make it expire early) nor a whole ms
// after it (late by more than the documented tick).
type Leases struct{ expiry map[int64]int64 }

const tick = 1000 // lease ids per ms

// Held returns the units held at now.
func (s *Leases) Held(now int64) int64 {
	n := int64(0)
	for _, e := range s.expiry {
		if now*tick < e {
			n++
		}
	}
	return n
}

// checkID reports an id that does not name now's ms.
func checkID(id, now int64) error {
	if id < now*tick || id >= (now+1)*tick {
		return fmt.Errorf("lease id %d granted at %d ms does not name that ms (ids count 1/%d ms)", id, now, tick)
	}
	return nil
}

// Grant records an admitted acquire (cost 1).
func (s *Leases) Grant(id, now, w int64) error {
	if s.expiry == nil {
		s.expiry = map[int64]int64{}
	}
	if err := checkID(id, now); err != nil {
		return err
	}
	if s.IsHeld(id, now) {
		return fmt.Errorf("lease id %d granted twice while held", id)
	}
	s.expiry[id] = id + w*tick
	return nil
}

// IsHeld reports whether lease id is held at now.
func (s *Leases) IsHeld(id, now int64) bool {
	e, ok := s.expiry[id]
	return ok && now*tick < e
}

// Release forgets id.
func (s *Leases) Release(id int64) { delete(s.expiry, id) }

// Renew moves a held lease to its new id, which names now.
func (s *Leases) Renew(old, id, now, w int64) error {
	if err := checkID(id, now); err != nil {
		return err
	}
	delete(s.expiry, old)
	s.expiry[id] = id + w*tick
	return nil
}

// Reset forgets every lease.
func (s *Leases) Reset() { s.expiry = nil }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// check is what the model checks of an algorithm, from its descriptor.
type check uint8

const (
	checkExact       check = iota + 1 // compared field by field with the exact log
	checkNeverOver                    // never admits what the exact log denies
	checkAligned                      // compared field by field with a count per aligned window
	checkApproximate                  // at most twice the largest limit in any window
	checkLeases                       // compared with the held leases
)

// neverOver reports whether the check holds the store to the exact log's
// bound (never more than the largest limit in force in any window), so
// that runs can change windows and send late requests.
func (c check) neverOver() bool { return c == checkExact || c == checkNeverOver }

// Covers reports whether the model checks a, a registered algorithm's
// descriptor: the error says why not (an Accuracy it has no model for).
func Covers(a *algorithms.Algorithm) error {
	_, err := checkOf(a)
	return err
}

// checkOf returns what the model checks of a, from its descriptor's
// Accuracy and HoldsLeases.
func checkOf(a *algorithms.Algorithm) (check, error) {
	switch {
	case a == nil:
		return 0, fmt.Errorf("modeltest: no such algorithm")
	case a.HoldsLeases() && a.Accuracy == algorithms.Exact:
		return checkLeases, nil
	case a.HoldsLeases():
		return 0, fmt.Errorf("modeltest: %s holds leases with Accuracy %v; the lease model checks Exact only", a.Name, a.Accuracy)
	}
	switch a.Accuracy {
	case algorithms.Exact:
		return checkExact, nil
	case algorithms.NeverOver:
		return checkNeverOver, nil
	case algorithms.PerAlignedWindow:
		return checkAligned, nil
	case algorithms.Approximate:
		return checkApproximate, nil
	}
	return 0, fmt.Errorf("modeltest: %s states Accuracy %v, which the model cannot check", a.Name, a.Accuracy)
}
