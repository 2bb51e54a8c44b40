// Package fallback keeps limiting while the primary store (Redis) is down.
//
// fallback.New wraps a primary backend.Store with a circuit breaker
// (github.com/sony/gobreaker/v2) and returns a Store. Every primary call gets
// a deadline (DefaultTimeout unless set), enforced here whatever the client
// library does, so a hung Redis costs a request at most that long. Backend
// failures (connection errors, timeouts, BUSY, LOADING, READONLY, OOM,
// NOREPLICAS, CLUSTERDOWN, TRYAGAIN and any other error the primary returns)
// count toward opening the breaker; the caller cancelling its own context and
// invalid requests do not. But a call its caller abandoned starts a Peek of
// the same key in the background, with the store's deadline (one at a
// time per breaker), whose outcome counts: so a stalled Redis opens the
// breaker even when every caller's deadline is shorter than the store's,
// while a cancellation Redis would have answered counts nothing. A request whose primary call fails, and every
// request while the breaker is open, is decided by the policy instead (a
// backend.FailurePolicy: the request's own, Request.OnFailure, else the
// store's):
//
//   - backend.LocalPolicy(n): decide on an in-process store with the limit
//     scaled to this instance's share, ceil(limit/n) and at least 1 (the
//     default is LocalPolicy(1): the whole limit per instance).
//   - backend.FailOpen: admit.
//   - backend.FailClosed: deny, with RetryAfter until the breaker next probes.
//
// For a concurrency lease (algorithms.Concurrency) the policies mean:
// FailOpen admits with no lease kept (Result.Lease 0: nothing to release);
// FailClosed denies; LocalPolicy(n) grants a local lease from the in-process
// store, at most ceil(limit/n) units held per key in this instance, with
// its id negated (Result.Lease < 0). A negative id is released and renewed
// on the local store, also after the primary recovered (so only the
// process that granted it can release it); a positive one on
// the primary, and when the primary cannot be reached the error is
// returned (wrapping ErrUnavailable) and the lease expires there by its
// timeout. A Redis that restarts without persistence forgets the leases it
// held: run it with appendonly (appendfsync always) to keep them.
//
// Such decisions have Degraded set. After OpenTimeout the breaker lets a
// bounded number of probe requests through (half-open), each with twice
// the deadline; when they succeed, decisions return to the primary.
//
// # Degraded decisions continue from the primary's last answer
//
// While the primary answers, the store remembers, per key and algorithm,
// its last answer (the units left, when the key is full again, the time),
// for up to DefaultBaselines keys (WithBaselines; the least recently used
// is forgotten first). When the primary does not answer, a local policy
// decides on the local store as above and within that answer: a key the
// primary last reported spent stays refused until its reset (for gcra,
// until the refill covers the request), and one with r left admits at most
// floor(r/n) under LocalPolicy(n) (floor: n instances that saw the same
// answer admit at most r between them), less what this process already
// admitted by policy, or sent in Takes that missed their deadline (they
// may still be counted by the primary), since. A key the primary never
// answered for, or past its reset, starts at the policy's share,
// ceil(limit/n). An answer recorded before the breaker opened keeps
// binding after the primary answers again, until its reset: the primary
// does not know of what the policy admitted, and may have come back empty
// (a Redis restarted without persistence). Such a held key admits at most
// what that answer said was left, less what this process admitted since,
// locally or on the primary (docs/outages.md gives the bounds). Recording
// an answer is a hash and one of 64 locks: decisions on a healthy primary
// that never failed are unchanged.
//
// # Failures are counted by event
//
// The breaker opens after WithFailureThreshold consecutive failure events
// (default 3). A failure is one event with every failure of a call that
// was in flight with it: the callers caught in one slow batch count once,
// not once each, and a primary that stays down counts once per round of
// calls. A success starts the count again. So one slow batch on a loaded
// machine does not open the breaker, and a stall opens it after about
// three deadlines. The open timeout is short (DefaultOpenTimeout, 250 ms):
// a primary back from a blip is used again within about that, and probing
// one that is still down costs a few probes.
//
// Policies are chosen per limit: Store.Policy returns a view of the same
// store (same breaker, same local store) with another policy, so that a login
// limit can fail open while a payment guard fails closed.
//
// State changes (backend.StateChange, between the backend.BreakerState
// values) are logged with log/slog and passed to an optional hook.
// Unlike gobreaker's OnStateChange, the hook runs outside the breaker's lock,
// so it may call back into the store (State, Stats) without deadlocking; it
// runs in the goroutine of the request that observed the change, so keep it
// quick.
//
// The deadline is a context deadline when the primary honours its context
// (backend.ContextHonourer: rueidis always, go-redis with ContextTimeoutEnabled, as
// limiter/config builds clients); then the call runs in the caller's
// goroutine. Otherwise each call runs in a goroutine the caller stops
// waiting for at the deadline; once 256 abandoned calls still run, calls
// fail at once, as primary failures, until some return.
//
// Limits of the design: a call that missed its deadline is abandoned, not
// stopped. The client keeps it (and a connection) until its own timeout, so
// give go-redis clients ContextTimeoutEnabled or a short ReadTimeout; and a
// Take that reached Redis after its deadline is counted there as well as
// decided by the policy (its cost is counted against the key's baseline,
// so the policy admits that much less). Redis does not learn of the
// policy's admissions: a window holding a blip can admit the limit plus
// what Redis last said was left. A primary that cannot tell which Redis Cluster node owns a key
// gets one breaker: when one master is down, the failures it causes open it
// for keys on the healthy masters too. Use one fallback store per
// independent Redis.
//
// # Redis Cluster: a breaker per node
//
// When the primary (or a store it wraps, found with backend.As) is a
// backend.NodeLocator, as both Redis stores are, and names a node, each master gets
// a breaker of its own: a dead master sends only its own keys to the
// policy, and keys on the healthy masters keep being decided by Redis. A
// key's node is the master its client's slot map names for it; after a
// failover or a reshard the slot moves to another node, whose breaker is
// closed unless that node fails too. A node breaker no request reached for
// two open timeouts is dropped (its node lost its slots, or its keys are
// idle); if it was not closed, the hook sees it change to backend.BreakerClosed, and the
// next request to that node starts with a closed breaker, as a probe
// would. State, Stats and the hook report each node (StateChange.Node,
// Stats.Nodes). On a single node (NodeOf returns "") there is one breaker,
// as without a locator.
package fallback
