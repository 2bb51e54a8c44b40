package algorithms

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Algorithm describes one algorithm: everything a store, a script runner
// or the documentation needs to know about it, in one place. Each is
// defined in the algorithm's own Go file, beside its Lua twin of the same
// base name (gcra.go and gcra.lua), and listed in the registry. Callers
// reach the steps through Rule (Take, Peek, Refund, ChargedAt), which
// resolves the descriptor by name.
type Algorithm struct {
	// Name is the name used in configuration files.
	Name Name
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
	At                     time.Duration
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
// name.lua) and a row here.
var registry = []*Algorithm{
	&slidingLog,
	&slidingCounter,
	&fixedWindow,
	&compactLog,
	&twoLevel,
	&gcra,
	&concurrency,
}

func init() {
	for _, a := range registry {
		a.anyWindowBound = a.LimitBound(0)
	}
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

// Lookup returns the registered algorithm of that name, or nil.
func Lookup(name Name) *Algorithm {
	// Every decision looks its algorithm up, so the built-in names are
	// found by a switch (a few length and byte comparisons, no calls);
	// the scan below finds any entry, the switch only saves time.
	switch name {
	case SlidingLog:
		return &slidingLog
	case SlidingCounter:
		return &slidingCounter
	case FixedWindow:
		return &fixedWindow
	case CompactLog:
		return &compactLog
	case TwoLevel:
		return &twoLevel
	case GCRA:
		return &gcra
	case Concurrency:
		return &concurrency
	}
	for _, a := range registry {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Register adds an algorithm to the registry, after the built-in ones. It
// exists for algorithms defined outside this package (tests use it to show
// that the conformance suite, the scripts and the docs check pick a new
// entry up). It must be called before the package is otherwise used, from
// an init function or TestMain: the registry is read without locks. The
// error wraps ErrInvalidRule when a field is missing or a name, suffix or
// salt is already taken.
func Register(a *Algorithm) error {
	switch {
	case a == nil || a.Name == "" || a.Suffix == "" || a.Lua == "":
		return fmt.Errorf("%w: an algorithm needs a name, a key suffix and a Lua body", ErrInvalidRule)
	case a.Take == nil || a.Peek == nil || a.Refund == nil || a.ChargedAt == nil || a.LimitBound == nil:
		return fmt.Errorf("%w: algorithm %q lacks a step (Take, Peek, Refund, ChargedAt, LimitBound)", ErrInvalidRule, a.Name)
	case (a.Release == nil) != (a.Renew == nil):
		return fmt.Errorf("%w: algorithm %q has one of Release and Renew; a lease-holding algorithm needs both", ErrInvalidRule, a.Name)
	}
	var errs []error
	for _, b := range registry {
		if b.Name == a.Name || b.Suffix == a.Suffix || b.Salt == a.Salt {
			errs = append(errs, fmt.Errorf("%w: algorithm %q shares its name, key suffix or salt with %q", ErrInvalidRule, a.Name, b.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.anyWindowBound = a.LimitBound(0)
	registry = append(registry, a)
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

func peek(at time.Duration, cost int64, allowed bool, remaining int64, retry, reset time.Duration) Example {
	e := take(at, cost, allowed, remaining, retry, reset)
	e.Peek = true
	return e
}
