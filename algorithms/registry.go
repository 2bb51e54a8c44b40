package algorithms

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms/internal/registryhook"
)

// Algorithm describes one algorithm: everything a store, a script runner
// or the documentation needs to know about it, in one place. Each is
// defined in the algorithm's own Go file, beside its Lua twin of the same
// base name (gcra.go and gcra.lua), and listed in the registry. Callers
// reach the steps through Rule (Take, Peek, Refund, ChargedAt); a rule
// from Rule.Resolve carries its descriptor, others find it by name.
type Algorithm struct {
	// Name is the name used in configuration files, at most 32 bytes.
	Name Name
	// Accuracy is the algorithm's promise measured against the exact
	// sliding log (or, for one that holds leases, the held leases): what
	// the model test checks every store against, and which change tables
	// the conformance suite replays. Required.
	Accuracy Accuracy
	// Refills marks a bucket (gcra): an outcome that left r units means at
	// least min(Limit, r + floor(elapsed*Limit/Window)) left elapsed ms
	// later if nothing else is taken. Where it is false, what an outcome
	// left is all there is until its ResetAfter (units come back at window
	// boundaries or as entries slide out, which an outcome does not tell).
	Refills bool
	// CountedUntil, when set, returns when units taken at now (ms) under
	// a window of w ms no longer count: the end of the aligned window
	// (fixed_window), or of the one after it, which the sliding counter
	// weighs. Nil means a window later, now + w (the logs, gcra,
	// concurrency); see Rule.CountedUntil.
	CountedUntil func(now, w int64) int64
	// Suffix is what a store appends to a key's name to keep the states of
	// different algorithms for one key apart (":gc"). Distinct per
	// algorithm.
	Suffix string
	// Salt keeps the states of different algorithms for one key apart in
	// the memory store's table. Distinct per algorithm.
	Salt uint64
	// Take, Peek, Refund and ChargedAt are the Go steps, on a window of w
	// ms; see the Rule methods of the same names.
	Take      func(s *State, now, w, limit, cost int64) Outcome
	Peek      func(s *State, now, w, limit, cost int64) Outcome
	Refund    func(s *State, at, w, limit, cost int64)
	ChargedAt func(s *State, now int64) int64
	// Release and Renew are set, both, for an algorithm that holds leases
	// (Concurrency), and nil otherwise; see Rule.Release and Rule.Renew.
	// The Lua twin runs Release as its refund mode (take false, refund
	// true; the reply's fifth value is 1 when the lease was held, else 0)
	// and Renew with take and refund both true.
	Release func(s *State, now, at, w, limit, cost int64) bool
	Renew   func(s *State, now, at, w, limit, cost int64) Outcome
	// GiveBack, when set, gives back up to cost of the units still counted
	// at now, newest first, named by time alone (Envoy's negative hits);
	// see Rule.GiveBack. The Lua twin runs it as its refund mode with a
	// negative at. Nil for an algorithm that cannot (Concurrency: its
	// leases are released by id).
	GiveBack func(s *State, now, w, limit, cost int64)
	// Charge, when set, records cost units already incurred (a charge,
	// see Rule.Charge): never refused, units beyond what is left kept as
	// debt. With record false it only reports what the charge would leave.
	// The Lua twin runs it as a take (or, not taking, a peek) of -cost. Nil
	// for an algorithm that cannot record charges.
	Charge func(s *State, now, w, limit, cost int64, record bool) Outcome
	// ChargeNote, for an algorithm without Charge, says why and what to
	// use instead.
	ChargeNote string
	// MoreAfter, when set, tells from an admission's outcome how many ms
	// until the key has more allowance than Remaining (the RateLimit
	// header draft's effective window), and whether the outcome tells it
	// exactly; nil when it cannot (the logs, whose outcome does not say
	// when their oldest entry slides out). See Rule.MoreAfter.
	MoreAfter func(w, limit, remaining, resetAfter int64) (int64, bool)
	// LimitBound is the largest limit the algorithm accepts with a window
	// of w ms (see Rule.LimitBound).
	LimitBound func(w int64) int64
	// LimitNote ends the error for a limit above LimitBound: why, and what
	// to use instead.
	LimitNote string
	// ChargeBound, when set, bounds the cost of a charge with a window of
	// w ms below MaxCharge (gcra: its debt must stay exact); see
	// Rule.ChargeBound.
	ChargeBound func(w int64) int64
	// PerWindow marks an algorithm that counts each request in the window
	// aligned to the epoch that holds its own time, a Redis key per window
	// (FixedWindow): a request stamped in an earlier window counts there,
	// a take is charged at its window's start (Rule.ChargedAt), and its
	// Lua twin appends ':' and the window's start to a key that ends in
	// its Suffix (own_suffix in its body).
	PerWindow bool
	// anyWindowBound is LimitBound(0), the bound whatever the window,
	// which Validate checks on every request.
	anyWindowBound int64
	// Lua is the body of the Lua twin: the statements of
	//
	//	local function step(key, now, w, limit, cost, take, refund, at)
	//
	// (see prelude.lua), which perform the same step atomically in Redis.
	Lua string
	// Examples are steps worked out by hand; the conformance suite
	// (backend/storetest) replays them on every store.
	Examples Examples
	// Changes are further tables, named by case (the conformance suite
	// replays each as "case/name"), whose steps change the rule under one
	// key (Example.Limit, Example.Window): a limit lowered and raised, a
	// window shortened or lengthened, requests arriving late. An Exact
	// rate algorithm needs none: the suite holds the exact log's own. A
	// NeverOver algorithm states its decisions here, as two_level does.
	Changes map[string][]Example
}

// Accuracy is an algorithm's promise, measured against a reference: the
// exact sliding log over the algorithm's own admissions for a rate
// algorithm, the held leases for one that holds leases.
type Accuracy uint8

// The promises. The zero value is no promise, which the registry refuses.
const (
	// Exact decides as its reference, field by field (Allowed, Remaining,
	// RetryAfter, ResetAfter), whatever the limits and windows in force
	// on a key and for requests arriving up to a window late: sliding_log,
	// compact_log and, over its leases, concurrency.
	Exact Accuracy = iota + 1
	// NeverOver admits only what the exact log would admit over the
	// admissions already made, so never more than the limit in any
	// window, across limit and window changes; it may deny more:
	// two_level.
	NeverOver
	// PerAlignedWindow decides exactly as a count per window aligned to
	// the epoch, so up to twice the limit across a window boundary:
	// fixed_window.
	PerAlignedWindow
	// Approximate admits at most twice the limit in any window, with
	// nothing closer promised: sliding_counter, gcra.
	Approximate
)

// String returns the promise's name, as the model test reports it.
func (a Accuracy) String() string {
	switch a {
	case Exact:
		return "exact"
	case NeverOver:
		return "never over"
	case PerAlignedWindow:
		return "per aligned window"
	case Approximate:
		return "approximate"
	}
	return fmt.Sprintf("Accuracy(%d)", uint8(a))
}

// Examples is a table of steps of one key, on a rule of Limit per Window.
type Examples struct {
	Limit  int64
	Window time.Duration
	Steps  []Example
}

// Example is one step of an Examples table: at At from a moment aligned to
// the window, a Take (or a Peek; for an algorithm that holds leases, a
// Release or a Renew) of Cost, and what it reports.
type Example struct {
	At time.Duration
	// Limit and Window, when set, are the step's rule in place of the
	// table's (Algorithm.Changes sets them on every step).
	Limit                  int64
	Window                 time.Duration
	Peek                   bool
	Cost                   int64
	Allowed                bool
	Remaining              int64
	RetryAfter, ResetAfter time.Duration
	// For an algorithm that holds leases: Release and Renew make the step
	// a release or a renewal of the lease whose id is Of (an offset from
	// the table's zero like At, whose microseconds count the id's 1/1000
	// ms). Held is what a release reports. Lease is the id an admitted
	// Take or Renew grants.
	Release, Renew bool
	Of, Lease      time.Duration
	Held           bool
}

// registry lists the algorithms in the order the documentation presents
// them. Adding an algorithm is its two files (name.go with its descriptor,
// name.lua) and a row here; docs/algorithms.md, "Adding an algorithm",
// says what the row brings with it.
var registry = []*Algorithm{
	&slidingLog,
	&slidingCounter,
	&fixedWindow,
	&compactLog,
	&twoLevel,
	&gcra,
	&concurrency,
}

// maxNameLen is the longest algorithm name the registry holds.
const maxNameLen = 32

// byLen holds the registry by the length of the names: Lookup compares a
// name with the few of its length.
var byLen [maxNameLen + 1][]*Algorithm

func init() {
	for _, a := range registry {
		add(a) // checked by TestRowsAreComplete
	}
	registryhook.Register = func(a any) error {
		alg, ok := a.(*Algorithm)
		if !ok {
			return fmt.Errorf("%w: register an *algorithms.Algorithm, not %T", ErrInvalidRule, a)
		}
		return register(alg)
	}
}

// add indexes a checked algorithm.
func add(a *Algorithm) {
	a.anyWindowBound = a.LimitBound(0)
	byLen[len(a.Name)] = append(byLen[len(a.Name)], a)
}

// HoldsLeases reports whether the algorithm holds leases (Release and
// Renew are set).
func (a *Algorithm) HoldsLeases() bool { return a.Release != nil }

// Algorithms returns the registered algorithms in the order the
// documentation presents them. The descriptors are shared: do not modify
// them.
func Algorithms() []*Algorithm { return slices.Clone(registry) }

// Names lists the registered algorithms' names, in the order the
// documentation presents them.
func Names() []Name {
	names := make([]Name, len(registry))
	for i, a := range registry {
		names[i] = a.Name
	}
	return names
}

// Lookup returns the registered algorithm of that name, or nil. A
// decision does not call it: a resolved Rule (Rule.Resolve) carries its
// descriptor.
func Lookup(name Name) *Algorithm { return lookupTable(name) }

// lookupTable returns the registered algorithm of that name from the
// table built from the registry, or nil.
func lookupTable(name Name) *Algorithm {
	if len(name) > maxNameLen {
		return nil
	}
	for _, a := range byLen[len(name)] {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// check reports what keeps a from joining the registry others: a missing
// field, or a name, suffix or salt already taken. The error wraps
// ErrInvalidRule.
func check(a *Algorithm, others []*Algorithm) error {
	if err := checkFields(a); err != nil {
		return err
	}
	var errs []error
	for _, b := range others {
		if b != a && (b.Name == a.Name || b.Suffix == a.Suffix || b.Salt == a.Salt) {
			errs = append(errs, fmt.Errorf("%w: algorithm %q shares its name, key suffix or salt with %q", ErrInvalidRule, a.Name, b.Name))
		}
	}
	return errors.Join(errs...)
}

// checkFields reports a field of a that is missing or does not fit the
// others.
func checkFields(a *Algorithm) error {
	switch {
	case a == nil || a.Name == "" || a.Suffix == "" || a.Lua == "":
		return fmt.Errorf("%w: an algorithm needs a name, a key suffix and a Lua body", ErrInvalidRule)
	case len(a.Name) > maxNameLen:
		return fmt.Errorf("%w: algorithm name of %d bytes; at most %d", ErrInvalidRule, len(a.Name), maxNameLen)
	case a.Take == nil || a.Peek == nil || a.Refund == nil || a.ChargedAt == nil || a.LimitBound == nil:
		return fmt.Errorf("%w: algorithm %q lacks a step (Take, Peek, Refund, ChargedAt, LimitBound)", ErrInvalidRule, a.Name)
	case (a.Release == nil) != (a.Renew == nil):
		return fmt.Errorf("%w: algorithm %q has one of Release and Renew; a lease-holding algorithm needs both", ErrInvalidRule, a.Name)
	case a.Accuracy < Exact || a.Accuracy > Approximate:
		return fmt.Errorf("%w: algorithm %q states no Accuracy; set one of Exact, NeverOver, PerAlignedWindow, Approximate", ErrInvalidRule, a.Name)
	case a.HoldsLeases() && a.Accuracy != Exact:
		return fmt.Errorf("%w: algorithm %q holds leases, so its Accuracy is Exact (the held leases), not %v", ErrInvalidRule, a.Name, a.Accuracy)
	}
	return nil
}

// register adds an algorithm to the registry, after the built-in ones,
// for tests that show a new row is picked up by the conformance suite,
// the model test, the scripts and the docs check (algorithms/internal/algtest,
// through algorithms/internal/registryhook). It must run before the
// registry is read, from an init function: the registry is read without locks. The
// error wraps ErrInvalidRule when a field is missing or a name, suffix or
// salt is already taken.
func register(a *Algorithm) error {
	if err := check(a, registry); err != nil {
		return err
	}
	registry = append(registry, a)
	add(a)
	return nil
}

// Shorthands for the Examples tables.
const (
	usec = time.Microsecond
	msec = time.Millisecond
	sec  = time.Second
)

func take(at time.Duration, cost int64, allowed bool, remaining int64, retry, reset time.Duration) Example {
	return Example{At: at, Cost: cost, Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// under sets the step's rule, for a table whose rule changes (Changes).
func (e Example) under(limit int64, w time.Duration) Example {
	e.Limit, e.Window = limit, w
	return e
}

func peek(at time.Duration, cost int64, allowed bool, remaining int64, retry, reset time.Duration) Example {
	e := take(at, cost, allowed, remaining, retry, reset)
	e.Peek = true
	return e
}
