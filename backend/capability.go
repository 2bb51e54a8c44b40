package backend

import (
	"context"
	"time"
)

// The optional capabilities of a Store. A store implements those it has; a
// wrapper (a Store around a Store: package fallback's, package
// backend/denycache's, package backend/observe's) implements Wrapper and,
// of the others, only those it must answer itself (each forwards leases, so
// each is a LeaseStore). Callers find a capability with As, never with a
// type assertion on the outermost store, so that wrapping a store never
// hides what the store underneath can do.

// Wrapper is a Store around another Store.
type Wrapper interface {
	Store
	// Unwrap returns the store this one wraps.
	Unwrap() Store
}

// NodeLocator is a store that knows which server owns a key: both Redis
// stores with a cluster client (the master of the key's hash slot, from
// the client's slot map). Package fallback keeps a circuit breaker per
// node it names.
type NodeLocator interface {
	// NodeOf returns the address of the node that owns key, or "" when the
	// store has one node or cannot tell. It must not wait on the network
	// for long: it runs before every call.
	NodeOf(ctx context.Context, key Key) string
}

// RequestLocator is a NodeLocator that can name the node of the key a
// request writes where that is not Key's: an exact key (Request.Exact)
// is a name of its own, often in another slot (a key per window, the
// window's start in the name, so in another slot each window). Package
// fallback routes such requests to the breaker of that node.
type RequestLocator interface {
	// NodeOfRequest returns the address of the node that owns the key
	// req writes, or "" as NodeOf does.
	NodeOfRequest(ctx context.Context, req *Request) string
}

// ContextHonourer is a store that can tell whether its calls return soon
// after their context ends: both Redis stores (rueidis always, go-redis
// when the client has ContextTimeoutEnabled). Package fallback then calls
// it directly, with a deadline on the context, instead of from a goroutine
// per call.
type ContextHonourer interface {
	HonoursContext() bool
}

// RefundCounter is a store that counts its compensating refunds that
// failed (units left taken until they expire): both Redis stores.
type RefundCounter interface {
	FailedRefunds() uint64
}

// EvictionCounter is a store that counts the keys it evicted while they
// were still inside their window, such as *memorystore.Store.
type EvictionCounter interface {
	// ActiveEvictions returns the count since the store was created.
	ActiveEvictions() uint64
}

// AckWaiter is a store whose admissions wait for replicas to acknowledge
// them (the Redis stores' WithReplicaAck). Package fallback checks that the
// wait fits inside its per-call deadline.
type AckWaiter interface {
	// ReplicaAckTimeout returns how long an admission may wait for
	// replicas: 0 when it does not wait.
	ReplicaAckTimeout() time.Duration
}

// maxWrapDepth bounds the walk down a chain of wrappers, so that a wrapper
// that (wrongly) wraps itself cannot loop forever.
const maxWrapDepth = 32

// As finds in s, or in the stores it wraps (through Wrapper.Unwrap, from
// the outside in), the first that is a T: a capability interface of this
// file, LeaseStore, or a concrete store type (As[*fallback.Store](s) finds
// a fallback store under an observer). It reports false when none is.
func As[T any](s Store) (T, bool) {
	for range maxWrapDepth {
		if s == nil {
			break
		}
		if t, ok := s.(T); ok {
			return t, true
		}
		w, ok := s.(Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	var zero T
	return zero, false
}

// UnitRefunder is a store that gives back units earlier Takes consumed,
// named by time alone (Envoy's is_negative_hits): both Redis stores,
// *memorystore.Store, *denycache.Store (which forwards it and ends the
// denials remembered for the key in every process) and *fallback.Store
// (the primary while it answers, else the local store under a local
// policy). Find it with As.
type UnitRefunder interface {
	// GiveBack gives back up to req.Cost of the units req.Key still has
	// counted under req.Rule at req.Now, the newest first, and reports
	// what a Peek of req reports afterwards (algorithms.Rule.GiveBack: the
	// counters give back to the window holding now, the logs and
	// two_level drop their newest units still in the window, gcra pays
	// back debt). Never more than is counted, so a refund never creates
	// allowance that was not taken. An algorithm that cannot give units
	// back by time (concurrency: release its leases) is refused with an
	// error wrapping algorithms.ErrInvalidRequest
	// (algorithms.Rule.CheckGiveBack).
	GiveBack(ctx context.Context, req Request) (Result, error)
}
