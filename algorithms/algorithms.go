// Package algorithms holds each rate-limiting algorithm once, as math.
//
// Every algorithm has two engines that compute the same step: a pure Go step
// over a [State] (used by the in-memory store) and a Lua twin that performs the
// step atomically inside Redis (used by the Redis stores). Both take the
// current time as an argument, in whole milliseconds since the Unix epoch, and
// use only integer arithmetic that stays exact in a Lua number (a float64), so
// the two engines return identical decisions for identical inputs. The
// conformance suite in backend/storetest holds them together.
//
// The algorithms, each described once by an Algorithm in its own file
// (gcra.go beside gcra.lua) and listed by Algorithms:
//
//   - sliding_log: exact, a timestamp per admitted unit.
//   - sliding_counter: two weighted fixed windows; constant memory,
//     approximate (never under-counts).
//   - fixed_window: one counter per window; cheapest, up to twice the limit
//     across a window boundary.
//   - compact_log: the decisions of sliding_log, stored on Redis in one
//     string of 7-byte timestamps.
//   - two_level: a counter until a key uses half its limit in a window,
//     then an exact log.
//   - gcra: a token bucket (the generic cell rate algorithm).
//   - concurrency: at most Limit units held at once, as leases that expire
//     after Window unless released or renewed.
//
// The semantics every engine meets:
//
//   - A request of cost n is admitted all-or-nothing; a denied request
//     consumes nothing.
//   - Every outcome carries the remaining allowance, the exact time until the
//     same request would be admitted (RetryAfter, 0 when admitted) and the time
//     until the key is completely free (ResetAfter).
//   - When the clock goes back (a request carries an earlier time than one
//     already recorded), state recorded "in the future" still counts: a clock
//     step back never creates extra allowance.
package algorithms

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/limitkit/limitkit/internal/validations"
)

// Name selects an algorithm. It is the string used in configuration files.
type Name string

// The algorithms limitkit implements on every store.
const (
	// SlidingLog is exact: it records a timestamp per admitted unit of cost
	// and admits a request when the units recorded in (now-window, now] plus
	// its cost do not exceed the limit. Memory grows with the limit: a log
	// keeps two windows' units (the older one for late requests), forgotten
	// by time only, whatever the limit of the request.
	SlidingLog Name = "sliding_log"
	// SlidingCounter approximates the sliding log with two fixed windows, the
	// previous one weighted by the share of it still inside the sliding
	// window. Constant memory per key.
	SlidingCounter Name = "sliding_counter"
	// FixedWindow counts per window aligned to the Unix epoch. Cheapest, but
	// admits up to twice the limit across a window boundary.
	FixedWindow Name = "fixed_window"
	// CompactLog makes exactly the decisions of SlidingLog, and stores the
	// log in Redis as one string of 7-byte timestamps instead of a sorted
	// set: a key full in one window at limit 100 takes 840 bytes instead
	// of 1,352, at 1,000 it takes 7,240 instead of 94,480, and kept full
	// across two windows (the slid-out window is kept for late requests)
	// 1,640 instead of 19,888 (MEMORY USAGE, Redis 7.0).
	CompactLog Name = "compact_log"
	// TwoLevel screens each key with a fixed-window counter and keeps an
	// exact log only for keys that use more than half the limit in one
	// aligned window; see two_level.go for the precise semantics. Light keys
	// cost a counter, heavy ones a compact log.
	TwoLevel Name = "two_level"
	// GCRA is a token bucket (the generic cell rate algorithm of
	// redis-cell and go-redis/redis_rate): Limit units per Window refill
	// smoothly, one every Window/Limit, and a full bucket holds Limit
	// units, so a burst of up to Limit is admitted at once. A window of
	// length Window can therefore admit up to 2*Limit-1 (a full bucket,
	// then its refill). Constant memory per key.
	GCRA Name = "gcra"
	// Concurrency limits how many units are held at once, not how often:
	// an admitted Take holds cost units as a lease, until it is released
	// (Rule.Release) or Window passes, which a renewal (Rule.Renew)
	// restarts. So a holder that crashed frees its slots after Window.
	// Each lease has an id unique per key (ChargedAt): its grant time in
	// 1/1000 ms, or just after the last id issued, so a lease expires
	// Window after its grant, to the ms, up to 1,000 grants per ms on one
	// key (past that, ids run ahead of the clock and leases expire that
	// much late, never early). Memory grows with the limit, as a log's.
	Concurrency Name = "concurrency"
)

// Bounds on rules. They keep every intermediate value of every engine an
// exact integer in a float64 (below 2^53).
const (
	// MaxLimit is the largest limit any algorithm accepts.
	MaxLimit = int64(1) << 53
	// MaxSlidingLogLimit is the largest limit of a SlidingLog, CompactLog,
	// TwoLevel or Concurrency rule: the log stores one timestamp per admitted unit, so
	// memory per key grows with the limit. Use SlidingCounter, FixedWindow
	// or GCRA for larger limits.
	MaxSlidingLogLimit = int64(10_000)
	// MinWindow is the shortest window: decisions are made in whole
	// milliseconds.
	MinWindow = time.Millisecond
	// MaxWindow is the longest window, a leap year.
	MaxWindow = 366 * 24 * time.Hour
	// MaxLeaseMillis is the latest time (ms since the Unix epoch, in June
	// 2255) a rule that holds leases can decide at: its lease ids count
	// 1/1000 ms and must stay below 2^53.
	MaxLeaseMillis = (int64(1)<<53 - 1) / leaseTick
)

// Errors returned for bad input. Errors from this module that report bad
// input wrap one of them, so callers can test with errors.Is.
var (
	// ErrInvalidRule reports a rule (algorithm, limit, window) that cannot be used.
	ErrInvalidRule = errors.New("limitkit: invalid rule")
	// ErrInvalidRequest reports a request that cannot be decided: an empty
	// key, a cost outside 1..limit, or a time before the Unix epoch.
	ErrInvalidRequest = errors.New("limitkit: invalid request")
)

// Rule is one limit: at most Limit units of cost per Window, counted by
// Algorithm.
type Rule struct {
	// Algorithm names the counting method.
	Algorithm Name
	// Limit is the number of units admitted per window, 1..LimitBound():
	// MaxLimit, MaxSlidingLogLimit for the logs (SlidingLog, CompactLog,
	// TwoLevel), MaxLimit divided by the window in ms for GCRA.
	Limit int64
	// Window is the period the limit applies to, a whole number of
	// milliseconds between MinWindow and MaxWindow.
	Window time.Duration

	// checked is set by Resolve: the descriptor and the fields it
	// accepted, so that the decision path neither looks the algorithm up
	// by name nor validates again (a field changed since is seen).
	checked *checked
}

// checked is a rule Resolve accepted: its algorithm's descriptor, and the
// limit and window it was validated with. Shared by every resolved rule
// of the same fields (see intern), so that equal rules compare equal.
type checked struct {
	alg    *Algorithm
	limit  int64
	window time.Duration
}

// NewRule returns the rule of limit units per window counted by the named
// algorithm, resolved (see Rule.Resolve), or Validate's error.
func NewRule(name Name, limit int64, window time.Duration) (Rule, error) {
	return Rule{Algorithm: name, Limit: limit, Window: window}.Resolve()
}

// Resolve validates r once and returns it with its algorithm's descriptor
// attached: stores then decide it without looking the algorithm up by name
// or validating it again on every request (Resolved reports it). A rule
// whose fields are changed afterwards is no longer resolved, and is
// validated and looked up as one built as a literal. The error is
// Validate's.
func (r Rule) Resolve() (Rule, error) {
	r.checked = nil
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	a := lookupTable(r.Algorithm)
	// The row's own name, so that sameName finds it by its address.
	r.Algorithm = a.Name
	r.checked = intern(checked{alg: a, limit: r.Limit, window: r.Window})
	return r, nil
}

// Resolved reports whether r was returned by Resolve (or NewRule) and its
// fields have not changed since: it is valid, and its descriptor is known.
func (r Rule) Resolved() bool {
	c := r.checked
	return c != nil && c.limit == r.Limit && c.window == r.Window && sameName(c.alg.Name, r.Algorithm)
}

// sameName is a == b, answered by the strings' addresses when they share
// them (a resolved rule's name is its row's), without a call.
func sameName(a, b Name) bool {
	return len(a) == len(b) && (unsafe.StringData(string(a)) == unsafe.StringData(string(b)) || a == b)
}

// Descriptor returns the descriptor of r's algorithm: the one Resolve
// attached, or the registry's row of that name, or nil for an unknown
// algorithm.
func (r Rule) Descriptor() *Algorithm {
	if c := r.checked; c != nil && sameName(c.alg.Name, r.Algorithm) {
		return c.alg
	}
	return lookupTable(r.Algorithm)
}

// maxInterned bounds the resolved rules kept for sharing; past it a
// resolved rule gets a record of its own (it still decides the same, but
// compares unequal to an equal rule resolved apart).
const maxInterned = 1 << 14

var (
	internMu sync.Mutex
	interned = map[checked]*checked{}
)

// intern returns the shared record equal to c.
func intern(c checked) *checked {
	internMu.Lock()
	defer internMu.Unlock()
	if p, ok := interned[c]; ok {
		return p
	}
	p := &c
	if len(interned) < maxInterned {
		interned[c] = p
	}
	return p
}

// Validate reports whether the rule can be used, and if not, what to change.
// The error wraps ErrInvalidRule.
func (r Rule) Validate() error {
	validations.Count.Add(1)
	a := lookupTable(r.Algorithm)
	if a == nil {
		if r.Algorithm == "" {
			return fmt.Errorf("%w: algorithm is empty; choose one of %q", ErrInvalidRule, Names())
		}
		return fmt.Errorf("%w: unknown algorithm %q; choose one of %q", ErrInvalidRule, string(r.Algorithm), Names())
	}
	if r.Limit <= 0 {
		return fmt.Errorf("%w: limit is %d; it must be at least 1", ErrInvalidRule, r.Limit)
	}
	if r.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d is above the maximum %d (2^53)", ErrInvalidRule, r.Limit, MaxLimit)
	}
	// A bound that holds for every window is reported before the window.
	if bound := a.anyWindowBound; r.Limit > bound {
		return fmt.Errorf("%w: limit %d is above the %s maximum %d%s", ErrInvalidRule, r.Limit, a.Name, bound, a.LimitNote)
	}
	if r.Window < MinWindow {
		return fmt.Errorf("%w: window is %v; it must be at least %v", ErrInvalidRule, r.Window, MinWindow)
	}
	if r.Window > MaxWindow {
		return fmt.Errorf("%w: window %v is longer than the maximum %v", ErrInvalidRule, r.Window, MaxWindow)
	}
	if r.Window%time.Millisecond != 0 {
		return fmt.Errorf("%w: window %v is not a whole number of milliseconds", ErrInvalidRule, r.Window)
	}
	if bound := a.LimitBound(r.Window.Milliseconds()); r.Limit > bound {
		return fmt.Errorf("%w: limit %d with a window of %v is above the %s maximum %d%s",
			ErrInvalidRule, r.Limit, r.Window, a.Name, bound, a.LimitNote)
	}
	return nil
}

// LimitBound returns the largest Limit that Validate accepts for r's
// algorithm and window (r.Window must be valid): MaxSlidingLogLimit for the
// logs, MaxLimit / window-in-ms for GCRA (whose exact arithmetic works in
// units of 1/Limit ms), MaxLimit otherwise.
func (r Rule) LimitBound() int64 {
	if a := r.Descriptor(); a != nil {
		return a.LimitBound(r.Window.Milliseconds())
	}
	return MaxLimit
}

// ValidateCost reports whether a request of the given cost can ever be
// admitted under the rule. The error wraps ErrInvalidRequest.
func (r Rule) ValidateCost(cost int64) error {
	if cost <= 0 {
		return fmt.Errorf("%w: cost is %d; it must be at least 1", ErrInvalidRequest, cost)
	}
	if cost > r.Limit {
		return fmt.Errorf("%w: cost %d is above the limit %d, so it could never be admitted", ErrInvalidRequest, cost, r.Limit)
	}
	return nil
}

// PerWindow reports whether r's algorithm counts a key per window aligned
// to the epoch (Algorithm.PerWindow: FixedWindow).
func (r Rule) PerWindow() bool {
	a := r.Descriptor()
	return a != nil && a.PerWindow
}

// KeySuffix is what a store appends to a key's name to keep the state of
// different algorithms for the same key apart (the descriptor's Suffix).
func (r Rule) KeySuffix() string {
	if a := r.Descriptor(); a != nil {
		return a.Suffix
	}
	return ":" + string(r.Algorithm)
}

// ExpiryMargin is how long past KeyTTL's window a key is kept, in both
// engines. It absorbs the latency between the limiter reading its clock
// and the store deciding, and clock differences between callers of up to
// the margin.
const ExpiryMargin = time.Second

// KeyTTL returns how long after a step a key must be kept, given the
// step's ResetAfter (ms): until it is back to its full allowance, plus a
// window for requests that arrive late (stamped before others already
// decided: the logs keep timestamps that slid out for one window, and a
// counter that forgot its window would count a late request afresh), plus
// ExpiryMargin. Both engines use it: the memory store for a key's expiry,
// and the scripts (through key_ttl in prelude.lua, generated from the same
// constants) for the Redis key's. A key dropped earlier would hand its
// allowance back.
func (r Rule) KeyTTL(resetAfter int64) int64 {
	return resetAfter + keepWindows*r.Window.Milliseconds() + ExpiryMargin.Milliseconds()
}

// keepWindows is how many windows past its reset KeyTTL keeps a key.
const keepWindows = 1

// Outcome is the result of one step, with times in milliseconds.
type Outcome struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Remaining is the allowance left after this step.
	Remaining int64
	// RetryAfter is how long until the same request would be admitted, if
	// nothing else is admitted meanwhile; 0 when it was admitted.
	RetryAfter int64
	// ResetAfter is how long until the key is back to its full allowance.
	ResetAfter int64
}

// State is the Go engine's state for one key. Its zero value is an empty key.
// A State is not safe for concurrent use; stores serialise access to it.
// It is kept to five words (the memory store holds one per key, in a
// 64-byte slot): four words each algorithm reads through its own view
// (counters, gcraState, twoLevelState), and a log of timestamps.
type State struct {
	words [4]int64
	// log holds the logs' admitted timestamps, oldest first.
	log ring
}

// counters is the counting algorithms' view of a State's words: the start
// of the current fixed window and the units counted in it and in the one
// before (the sliding counter's previous window).
type counters struct {
	start, current, previous int64
}

// counters returns the State's words as counters.
func (s *State) counters() *counters { return (*counters)(unsafe.Pointer(&s.words)) }

// Clone returns a copy of s that shares no memory with it, for stores that
// decide on a copy and write it back.
func (s *State) Clone() State {
	c := *s
	c.log = s.log.clone()
	return c
}

// algorithm returns the descriptor of r's algorithm (Descriptor). The
// rule must be valid; an unknown algorithm (Validate rejects it) steps as
// FixedWindow, as it always has, rather than panic.
func (r Rule) algorithm() *Algorithm {
	if a := r.Descriptor(); a != nil {
		return a
	}
	return &fixedWindow
}

// Take performs one step of the rule's algorithm at now (milliseconds since
// the Unix epoch) for a request of the given cost, updating s when the
// request is admitted. The rule and cost must be valid (see Validate and
// ValidateCost) and now must not be negative; a cost above the limit,
// which can never be admitted, is refused with what a Peek of the limit's
// cost reports (the most the key could ever take).
func (r Rule) Take(s *State, now, cost int64) Outcome {
	a := r.algorithm()
	if cost > r.Limit {
		return refuse(a.Peek(s, now, r.Window.Milliseconds(), r.Limit, r.Limit))
	}
	return a.Take(s, now, r.Window.Milliseconds(), r.Limit, cost)
}

// Peek reports what a request of the given cost would get at now, without
// changing s. Remaining counts the allowance before that request. A cost
// above the limit is refused as in Take.
func (r Rule) Peek(s *State, now, cost int64) Outcome {
	a := r.algorithm()
	if cost > r.Limit {
		return refuse(a.Peek(s, now, r.Window.Milliseconds(), r.Limit, r.Limit))
	}
	return a.Peek(s, now, r.Window.Milliseconds(), r.Limit, cost)
}

// refuse turns out into a refusal: the steps index their logs by cost,
// so a cost they could never admit is answered for the limit's.
func refuse(out Outcome) Outcome {
	out.Allowed = false
	return out
}

// MoreAfter returns, for an admission that left remaining units and
// reported resetAfter, how long until the key has more allowance than
// remaining if nothing else is taken, and whether the algorithm can tell
// that from the outcome (fixed_window and gcra can; the others report
// false). It is never early, and at most 1 ms late (gcra's ResetAfter is
// rounded up to the ms).
func (r Rule) MoreAfter(remaining int64, resetAfter time.Duration) (time.Duration, bool) {
	f := r.algorithm().MoreAfter
	if f == nil {
		return 0, false
	}
	ms, ok := f(r.Window.Milliseconds(), r.Limit, remaining, resetAfter.Milliseconds())
	return time.Duration(ms) * time.Millisecond, ok
}

// windowStart returns the start of the window of length w that holds now,
// given the start of the window recorded last. While now is inside the
// recorded window, that is the answer without a division; the Lua twins take
// the same shortcut, so they agree even when a key's window was changed and
// the recorded start is not a multiple of the new one.
func windowStart(recorded, now, w int64) int64 {
	if recorded <= now && now-recorded < w {
		return recorded
	}
	return now - now%w
}

// ChargedAt returns where a Take at now that was just admitted recorded its
// units: the logs' timestamp (now, or a heavy TwoLevel key's floor), the
// start of the window the counters charged (for a light TwoLevel key,
// tagged with lightCharge), GCRA's time of the admission, or Concurrency's
// lease id (in 1/1000 ms; also after a Renew). Refund takes it.
func (r Rule) ChargedAt(s *State, now int64) int64 {
	a := r.Descriptor()
	if a == nil {
		return fixedWindow.ChargedAt(s, now) // as algorithm steps it
	}
	if a.PerWindow && r.Window > 0 {
		w := r.Window.Milliseconds()
		return now - now%w // the window holding now, whichever of its kept ones
	}
	return a.ChargedAt(s, now)
}

// CountedUntil returns when units taken at now (ms) under r no longer
// count, at the latest (Algorithm.CountedUntil): the end of a fixed
// window, the end of the next one for the sliding counter, now + Window
// for the others.
func (r Rule) CountedUntil(now int64) int64 {
	w := r.Window.Milliseconds()
	if a := r.Descriptor(); a != nil && a.CountedUntil != nil {
		return a.CountedUntil(now, w)
	}
	return now + w
}

// HoldsLeases reports whether r's algorithm holds leases (Concurrency):
// its admissions are leases to Release or Renew.
func (r Rule) HoldsLeases() bool {
	a := r.Descriptor()
	return a != nil && a.HoldsLeases()
}

// Release gives back the lease at (its id, see ChargedAt) at now, and
// reports whether it was held: a lease that expired (its id <= (now -
// Window) * 1000), was released or never granted is not, and s is left as
// it was.
// For an algorithm that holds no leases it reports false.
func (r Rule) Release(s *State, now, at int64) bool {
	a := r.algorithm()
	if a.Release == nil {
		return false
	}
	return a.Release(s, now, at, r.Window.Milliseconds(), r.Limit, 0)
}

// Renew extends the lease at from now, atomically: when it is held it is
// recorded again under a new id (ChargedAt then returns it) and the
// outcome is an admission; when not, nothing changes and the outcome is a
// denial, with what a Peek of cost reports. For an algorithm that holds no
// leases it is that denial.
func (r Rule) Renew(s *State, now, at, cost int64) Outcome {
	a := r.algorithm()
	w := r.Window.Milliseconds()
	if a.Renew == nil {
		out := a.Peek(s, now, w, r.Limit, cost)
		out.Allowed = false
		return out
	}
	return a.Renew(s, now, at, w, r.Limit, cost)
}

// GiveBack gives back up to cost units still counted at now, the newest
// first, and returns what a Peek of cost at now reports afterwards. Unlike
// Refund it names no admission, only a time (Envoy's negative hits): the
// counters give back to the window holding now, the logs remove their
// newest live timestamps, two_level its log's or, on a light key, its
// window counters' newest units (a window counts while its newest time is
// inside the window, as Remaining counts it), GCRA pays back debt. Units
// that no longer count at now are not given back, nor more than are
// counted, so it never creates allowance that was not taken. Check
// CheckGiveBack first: an algorithm without a GiveBack step only reports.
func (r Rule) GiveBack(s *State, now, cost int64) Outcome {
	a := r.algorithm()
	w := r.Window.Milliseconds()
	if a.GiveBack != nil {
		a.GiveBack(s, now, w, r.Limit, cost)
	}
	return a.Peek(s, now, w, r.Limit, cost)
}

// MaxCharge is the largest cost of a charge (Rule.Charge) on most
// algorithms, 2^40 units: a counter of charges stays an exact integer in a
// float64 for thousands of them. gcra's is smaller (Rule.ChargeBound).
const MaxCharge = int64(1) << 40

// Charge records cost units already incurred at now (tokens counted
// after the response): it is never refused, and units beyond what is left
// are debt that later requests wait out. With record false s is left as it
// was and the outcome is what the charge would report. The outcome is
// Allowed, with Remaining never below 0 and ResetAfter when the key, debt
// included, is free. Check CheckCharge and ChargeBound first.
func (r Rule) Charge(s *State, now, cost int64, record bool) Outcome {
	a := r.algorithm()
	if a.Charge == nil {
		out := a.Peek(s, now, r.Window.Milliseconds(), r.Limit, min(cost, r.Limit))
		out.Allowed, out.RetryAfter = true, 0
		return out
	}
	return a.Charge(s, now, r.Window.Milliseconds(), r.Limit, cost, record)
}

// CheckCharge reports whether r's algorithm can record charges (Rule.Charge);
// the error wraps ErrInvalidRequest and says why not.
func (r Rule) CheckCharge() error {
	a := r.Descriptor()
	if a == nil {
		return fmt.Errorf("%w: unknown algorithm %q", ErrInvalidRule, string(r.Algorithm))
	}
	if a.Charge == nil {
		return fmt.Errorf("%w: %s cannot record a charge (a cost counted after the work)%s", ErrInvalidRequest, r.Algorithm, a.ChargeNote)
	}
	return nil
}

// ChargeBound returns the largest cost of a charge under r: MaxCharge, or
// less where the algorithm bounds it (Algorithm.ChargeBound: for gcra
// MaxLimit divided by the window in ms, as its debt is kept in units of
// 1/Limit ms, exact below 2^53).
func (r Rule) ChargeBound() int64 {
	if a := r.Descriptor(); a != nil && a.ChargeBound != nil && r.Window >= MinWindow {
		return min(MaxCharge, a.ChargeBound(r.Window.Milliseconds()))
	}
	return MaxCharge
}

// CheckGiveBack reports whether r's algorithm can give units back by time
// (Rule.GiveBack); the error wraps ErrInvalidRequest.
func (r Rule) CheckGiveBack() error {
	if a := r.Descriptor(); a == nil || a.GiveBack == nil {
		return fmt.Errorf("%w: %s cannot give units back by time; the rate algorithms can (a lease is given back by its id: Release)", ErrInvalidRequest, r.Algorithm)
	}
	return nil
}

// Refund gives back cost units that a Take admitted and recorded at at (see
// ChargedAt), for stores that must undo an admission (a later rule of a
// composite denied, or too few replicas acknowledged it), and returns what a
// Peek of cost at now reports afterwards. Units that are no longer where
// they were recorded (their window has moved out of the state) are not
// given back, so a refund never creates allowance that was not taken. For
// an algorithm that holds leases it is Release.
func (r Rule) Refund(s *State, now, at, cost int64) Outcome {
	a := r.algorithm()
	w := r.Window.Milliseconds()
	if a.Release != nil {
		// A lease's refund is its release, as in the Lua twin's refund mode.
		a.Release(s, now, at, w, r.Limit, cost)
	} else {
		a.Refund(s, at, w, r.Limit, cost)
	}
	return a.Peek(s, now, w, r.Limit, cost)
}
