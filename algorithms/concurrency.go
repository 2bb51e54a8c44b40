package algorithms

import (
	_ "embed"
	"time"
)

// concurrency is Concurrency's descriptor: the one algorithm that holds
// leases (Release and Renew set).
var concurrency = Algorithm{
	Name:       Concurrency,
	Suffix:     ":cc",
	Salt:       0x94d049bb133111eb,
	Accuracy:   Exact,
	Take:       concurrencyTake,
	Peek:       concurrencyPeek,
	Refund:     concurrencyRefund,
	ChargedAt:  concurrencyChargedAt,
	Release:    concurrencyRelease,
	Renew:      concurrencyRenew,
	LimitBound: logLimitBound,
	LimitNote:  ` (it stores one entry per held unit)`,
	ChargeNote: `: it holds leases, which are held while the work runs and released by id, not charged after it; use a rate algorithm for costs counted afterwards`,
	Lua:        concurrencyLua,
	Examples:   concurrencyExamples,
}

//go:embed concurrency.lua
var concurrencyLua string

// concurrencyExamples are leases on 2 at once, each held 10 s unless
// released or renewed. Lease ids are offsets from the table's zero in
// 1/1000 ms (usec): the id is now in those units, bumped past the last id
// issued.
var concurrencyExamples = Examples{Limit: 2, Window: 10 * time.Second, Steps: []Example{
	acquire(0, 1, true, 1, 0, 10*sec, 0),
	// Same ms: the id is bumped by 1/1000 ms to stay unique; its expiry,
	// rounded up to the ms, is reported 1 ms later.
	acquire(0, 1, true, 0, 0, 10001*msec, 1*usec),
	// Full: the lease 0 expires at 10 s if not released.
	take(2*sec, 1, false, 0, 8*sec, 8001*msec),
	peek(2*sec, 1, false, 0, 8*sec, 8001*msec),
	release(3*sec, 0, true),
	// Twice: not held, nothing changes.
	release(3*sec, 0, false),
	acquire(3*sec, 1, true, 0, 0, 10*sec, 3*sec),
	// Renew 1 usec: held, so it moves to a new id at now.
	renew(5*sec, 1*usec, 1, true, 0, 0, 10*sec, 5*sec),
	// Renew the old id again: not held; a denial that changes nothing.
	renew(5*sec, 1*usec, 1, false, 0, 8*sec, 10*sec, 0),
	// The lease 3 s expired at 13 s (its id is now - window): not held.
	release(13*sec, 3*sec, false),
	acquire(13*sec, 1, true, 0, 0, 10*sec, 13*sec),
	// Lease 5 s expired at 15 s: renewal refused though one would fit.
	renew(16*sec, 5*sec, 1, false, 1, 0, 7*sec, 0),
	take(16*sec, 2, false, 1, 7*sec, 7*sec),
	release(16*sec, 13*sec, true),
	acquire(16*sec, 2, true, 0, 0, 10*sec, 16*sec),
	// The clock goes back: leases stamped later still count.
	take(15*sec, 1, false, 0, 11*sec, 11*sec),
	peek(30*sec, 1, true, 2, 0, 0),
	// A release and an acquire in one ms: the new id is not the released one,
	// so releasing the old id again frees nothing.
	acquire(40*sec, 1, true, 1, 0, 10*sec, 40*sec),
	release(40*sec, 40*sec, true),
	acquire(40*sec, 1, true, 1, 0, 10001*msec, 40*sec+1*usec),
	release(40*sec, 40*sec, false),
	peek(40*sec, 1, true, 1, 0, 10001*msec),
	// The lease 40 s + 1 usec is held at 50 s (1 ms left, rounded up) and
	// free 1 ms later: it lasts the window from its grant, to the ms.
	peek(50*sec, 2, false, 1, 1*msec, 1*msec),
	peek(50001*msec, 2, true, 2, 0, 0),
}}

// acquire is an admitted take of a lease-holding algorithm, reporting lease.
func acquire(at time.Duration, cost int64, allowed bool, remaining int64, retry, reset, lease time.Duration) Example {
	e := take(at, cost, allowed, remaining, retry, reset)
	e.Lease = lease
	return e
}

// release is a release at at of the lease of id of, which reports held.
func release(at, of time.Duration, held bool) Example {
	return Example{At: at, Release: true, Of: of, Held: held, Cost: 1}
}

// renew is a renewal at at of the lease of id of: admitted with the new id
// lease when it was held, else denied as a peek of cost.
func renew(at, of time.Duration, cost int64, allowed bool, remaining int64, retry, reset, lease time.Duration) Example {
	e := take(at, cost, allowed, remaining, retry, reset)
	e.Renew, e.Of, e.Lease = true, of, lease
	return e
}

// The concurrency algorithm keeps one entry per held unit in the State's
// log, stamped with its lease's id, oldest first, and in words[0] the last
// id issued. Ids count 1/1000 ms (leaseTick per ms): a lease's id is
// max(now*leaseTick, last id + 1), unique per key for as long as the key
// lives, so a release names its lease alone. An entry stamped id has
// expired at now when id <= (now-window)*leaseTick: a lease lasts window
// from its grant, to the ms, whatever the grants around it. Ids run ahead
// of the clock only past leaseTick grants per ms on one key, more than one
// Redis key serves; then its leases expire late, never early. Times
// reported go back to whole ms rounded up (leaseAfter), so a held lease is
// never reported free early. Unlike the logs, a take forgets expired
// entries at once: nothing late can need them.

// leaseTick is how many lease ids one ms holds.
const leaseTick = 1000

// leaseCutoff is the id at or below which a lease has expired at now.
func leaseCutoff(now, w int64) int64 { return (now - w) * leaseTick }

// leaseAfter is how many whole ms from now until the unit stamped id
// (> cutoff) expires, rounded up: not free before then.
func leaseAfter(id, cutoff int64) int64 { return (id - cutoff + leaseTick - 1) / leaseTick }

// grantID issues the next lease id at now.
func grantID(s *State, now int64) int64 {
	id := max(now*leaseTick, s.words[0]+1)
	s.words[0] = id
	return id
}

func concurrencyTake(s *State, now, w, limit, cost int64) Outcome {
	l := &s.log
	cutoff := leaseCutoff(now, w)
	l.dropOldest(l.countUpTo(cutoff))
	size := l.size()
	out := Outcome{Remaining: max(limit-size, 0)}
	if size+cost <= limit {
		id := grantID(s, now)
		l.insert(id, cost, limit)
		out.Allowed = true
		out.Remaining -= cost
		out.ResetAfter = leaseAfter(id, cutoff)
		return out
	}
	// The (size+cost-limit)-th oldest must expire first. size > 0: cost <= limit.
	out.RetryAfter = leaseAfter(l.at(size+cost-limit-1), cutoff)
	out.ResetAfter = leaseAfter(l.at(size-1), cutoff)
	return out
}

// concurrencyPeek is slidingLogPeek over the lease ids.
func concurrencyPeek(s *State, now, w, limit, cost int64) Outcome {
	l := s.log
	cutoff := leaseCutoff(now, w)
	expired := l.countUpTo(cutoff)
	live := l.size() - expired
	out := Outcome{Allowed: live+cost <= limit, Remaining: max(limit-live, 0)}
	if !out.Allowed {
		out.RetryAfter = leaseAfter(l.at(expired+live+cost-limit-1), cutoff)
	}
	if live > 0 {
		out.ResetAfter = leaseAfter(l.at(l.size()-1), cutoff)
	}
	return out
}

// concurrencyChargedAt is the id of the lease just granted (or renewed).
func concurrencyChargedAt(s *State, _ int64) int64 { return s.words[0] }

// concurrencyRefund removes the lease at, expired or not. Rule.Refund
// releases instead (it knows now), as the Lua twin's refund mode does;
// this is the step for callers of the descriptor without a time.
func concurrencyRefund(s *State, at, _, _, _ int64) { s.log.remove(at, s.log.size()) }

// heldUnits returns how many units the lease at holds at now: 0 when it
// expired, was released or never granted.
func heldUnits(s *State, now, at, w int64) int64 {
	if at <= 0 || at <= leaseCutoff(now, w) {
		return 0
	}
	return s.log.countUpTo(at) - s.log.countUpTo(at-1)
}

func concurrencyRelease(s *State, now, at, w, _, _ int64) bool {
	n := heldUnits(s, now, at, w)
	if n > 0 {
		s.log.remove(at, n)
	}
	return n > 0
}

func concurrencyRenew(s *State, now, at, w, limit, cost int64) Outcome {
	n := heldUnits(s, now, at, w)
	if n == 0 {
		out := concurrencyPeek(s, now, w, limit, cost)
		out.Allowed = false
		return out
	}
	l := &s.log
	cutoff := leaseCutoff(now, w)
	l.remove(at, n)
	l.dropOldest(l.countUpTo(cutoff))
	id := grantID(s, now)
	// Always admitted: its own units were just freed (with a lowered
	// limit, holding on does not add to what is held).
	l.insert(id, n, max(limit, l.size()+n))
	return Outcome{Allowed: true, Remaining: max(limit-l.size(), 0), ResetAfter: leaseAfter(id, cutoff)}
}
