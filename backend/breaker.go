package backend

import "time"

// BreakerState is the state of the circuit breaker a store that guards
// another one keeps (package fallback's Store). It lives here, beside
// FailurePolicy, so that observers can name breaker changes without linking
// the fallback store and its circuit breaker library.
type BreakerState string

// The breaker's states.
const (
	// BreakerClosed: decisions come from the primary store.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: the primary is skipped; decisions follow the failure
	// policy.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: a bounded number of probes go to the primary.
	BreakerHalfOpen BreakerState = "half-open"
)

// StateChange describes one transition of a circuit breaker.
type StateChange struct {
	From, To BreakerState
	// At is when the breaker changed state.
	At time.Time
	// Cause is, when To is Open, the primary's error that opened it (the
	// last of the failures that tripped it, or the failed probe's).
	Cause error
	// Node is the Redis Cluster node whose breaker changed (its address),
	// or "" for a store's only breaker (see backend.NodeLocator).
	Node string
}
