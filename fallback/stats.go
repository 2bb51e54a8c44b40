package fallback

import (
	"time"

	"github.com/limitkit/limitkit/backend"
)

// Stats counts what the store did since it was created.
type Stats struct {
	// State is the breaker's current state.
	State backend.BreakerState
	// Direct reports that primary calls run in the caller's goroutine
	// with a context deadline, because the primary (or a store it wraps)
	// honours contexts (backend.ContextHonourer); false: a goroutine per
	// call, abandoned at the deadline.
	Direct bool
	// Timeout is the deadline of each primary call (WithTimeout, or the
	// one derived from the primary's replica acknowledgement wait).
	Timeout time.Duration
	// PrimaryFailures counts primary calls that failed or timed out.
	PrimaryFailures uint64
	// Degraded counts decisions made by a policy instead of the primary.
	Degraded uint64
	// FailedRefunds counts the primary's compensating refunds that failed
	// (units left taken until they expire), when the primary counts them
	// (a backend.RefundCounter, as both Redis stores are).
	FailedRefunds uint64
	// Nodes has the breaker of each Redis Cluster node, sorted by node,
	// once the primary (a backend.NodeLocator) named a node; nil otherwise. The
	// counters above include theirs. Node "" is the breaker of the keys
	// whose node the locator could not tell.
	Nodes []NodeStats
}

// NodeStats is one node's breaker and counters, since its breaker was made.
type NodeStats struct {
	// Node is the node's address, as its backend.NodeLocator names it.
	Node  string
	State backend.BreakerState
	// PrimaryFailures counts the node's calls that failed or timed out.
	PrimaryFailures uint64
	// Degraded counts decisions of the node's keys made by a policy.
	Degraded uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{State: s.State(), Direct: s.direct, Timeout: s.cfg.timeout,
		PrimaryFailures: s.failures.Load(), Degraded: s.degraded.Load()}
	if r, ok := backend.As[backend.RefundCounter](s.primary); ok {
		st.FailedRefunds = r.FailedRefunds()
	}
	if s.cluster.Load() {
		for _, b := range s.breakers() {
			st.Nodes = append(st.Nodes, NodeStats{Node: b.node, State: stateOf(b.cb.State()),
				PrimaryFailures: b.failures.Load(), Degraded: b.degraded.Load()})
		}
		s.deliver()
	}
	return st
}
