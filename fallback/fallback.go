// Package fallback keeps limiting while the primary store (Redis) is down.
//
// fallback.New wraps a primary backend.Store with a circuit breaker
// (github.com/sony/gobreaker/v2) and returns a Store. Every primary call gets
// a deadline (DefaultTimeout unless set), enforced here whatever the client
// library does, so a hung Redis costs a request at most that long. Backend
// failures (connection errors, timeouts, BUSY, LOADING, READONLY, OOM,
// NOREPLICAS, CLUSTERDOWN, TRYAGAIN and any other error the primary returns)
// count toward opening the breaker; the caller cancelling its own context and
// invalid requests do not. A request whose primary call fails, and every
// request while the breaker is open, is decided by the policy instead:
//
//   - Local(n): decide on an in-process store with the limit scaled to this
//     instance's share, ceil(limit/n) and at least 1 (the default is
//     Local(1): the whole limit per instance).
//   - FailOpen: admit.
//   - FailClosed: deny, with RetryAfter until the breaker next probes.
//
// For a concurrency lease (algorithms.Concurrency) the policies mean:
// FailOpen admits with no lease kept (Result.Lease 0: nothing to release);
// FailClosed denies; Local(n) grants a local lease from the in-process
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
// bounded number of probe requests through (half-open); when they succeed,
// decisions return to the primary.
//
// Policies are chosen per limit: Store.Policy returns a view of the same
// store (same breaker, same local store) with another policy, so that a login
// limit can fail open while a payment guard fails closed.
//
// State changes are logged with log/slog and passed to an optional hook.
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
// Take that reached Redis after its deadline is counted there as well as by
// the policy. A primary that cannot tell which Redis Cluster node owns a key
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
// idle); if it was not closed, the hook sees it change to Closed, and the
// next request to that node starts with a closed breaker, as a probe
// would. State, Stats and the hook report each node (StateChange.Node,
// Stats.Nodes). On a single node (NodeOf returns "") there is one breaker,
// as without a locator.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/internal/boundid"
	"github.com/sony/gobreaker/v2"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds each primary call.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultFailureThreshold is the number of consecutive failures that
	// opens the breaker.
	DefaultFailureThreshold = 5
	// DefaultOpenTimeout is how long the breaker stays open before probing.
	DefaultOpenTimeout = 2 * time.Second
	// DefaultProbes is the number of requests let through while half-open;
	// that many consecutive successes close the breaker.
	DefaultProbes = 3
)

// ErrUnavailable is wrapped by the errors of calls that have no local
// answer (Reset) when the primary could not be reached.
var ErrUnavailable = errors.New("fallback: primary store unavailable")

// State is the breaker's state. It is backend.BreakerState, so that
// observers (limiter/observe) name it without linking this package.
type State = backend.BreakerState

// The breaker's states.
const (
	// Closed: decisions come from the primary.
	Closed = backend.BreakerClosed
	// Open: the primary is skipped; decisions follow the policy.
	Open = backend.BreakerOpen
	// HalfOpen: a bounded number of probes go to the primary.
	HalfOpen = backend.BreakerHalfOpen
)

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	default:
		return Closed
	}
}

// StateChange describes one transition of the breaker; it is
// backend.StateChange (see State).
type StateChange = backend.StateChange

// forgetAfter is how long a node's breaker is kept after the last request
// routed to it: two open timeouts, so that a breaker that opened lives
// through one probe period (see the package doc).
func (c *config) forgetAfter() int64 { return int64(2 * c.openTimeout) }

// Policy decides requests the primary cannot. It is backend.FailurePolicy,
// so a request can carry its own (backend.Request.OnFailure); requests that
// carry none use the store's.
type Policy = backend.FailurePolicy

// Local decides on the in-process store with the limit divided among
// instances: ceil(limit/instances), at least 1. Instances below 1 count as 1.
func Local(instances int) Policy { return backend.LocalPolicy(instances) }

// The policies that need no local state.
var (
	// FailOpen admits every request the primary cannot decide.
	FailOpen = backend.FailOpen
	// FailClosed denies every request the primary cannot decide.
	FailClosed = backend.FailClosed
)

// Option configures a Store.
type Option func(*config) error

type config struct {
	timeout     time.Duration
	timeoutSet  bool
	threshold   uint32
	openTimeout time.Duration
	probes      uint32
	policy      Policy
	local       backend.Store
	hook        func(StateChange)
	logger      *slog.Logger
	name        string
}

// WithTimeout bounds each primary call (default DefaultTimeout; over a
// primary that waits for replica acknowledgement, its wait plus
// DefaultTimeout). New refuses a timeout that leaves less than AckHeadroom
// after such a wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fallback: timeout is %v; it must be positive", d)
		}
		c.timeout, c.timeoutSet = d, true
		return nil
	}
}

// WithFailureThreshold sets how many consecutive primary failures open the
// breaker (default DefaultFailureThreshold).
func WithFailureThreshold(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("fallback: failure threshold is %d; it must be at least 1", n)
		}
		c.threshold = uint32(n)
		return nil
	}
}

// WithOpenTimeout sets how long the breaker stays open before it probes the
// primary again (default DefaultOpenTimeout).
func WithOpenTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fallback: open timeout is %v; it must be positive", d)
		}
		c.openTimeout = d
		return nil
	}
}

// WithProbes sets how many requests go to the primary while half-open, and
// how many consecutive successes close the breaker (default DefaultProbes).
func WithProbes(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("fallback: probes is %d; it must be at least 1", n)
		}
		c.probes = uint32(n)
		return nil
	}
}

// WithPolicy sets the policy of the returned Store (default Local(1)).
// Store.Policy gives views with other policies.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if p.Mode() == backend.ModeUnset {
			p = Local(1)
		}
		c.policy = p
		return nil
	}
}

// WithLocalStore sets the store that Local policies decide on (default: a
// new memorystore with its defaults).
func WithLocalStore(s backend.Store) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("fallback: local store is nil")
		}
		c.local = s
		return nil
	}
}

// WithStateHook calls fn on every breaker state change, in order, outside
// the breaker's lock.
func WithStateHook(fn func(StateChange)) Option {
	return func(c *config) error {
		c.hook = fn
		return nil
	}
}

// WithLogger logs state changes to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("fallback: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// WithName names the breaker in logs (default "limitkit").
func WithName(name string) Option {
	return func(c *config) error {
		c.name = name
		return nil
	}
}

// Store is a backend.Store that decides on the primary while it is healthy
// and by policy while it is not. It is safe for concurrent use.
type Store struct {
	*shared
	policy Policy
}

// shared is what every policy view of one Store shares.
type shared struct {
	primary backend.Store
	local   backend.Store
	cfg     config

	// one is the breaker of every request when there is no locator.
	one     *breaker
	locator backend.NodeLocator
	// cluster is set once the locator named a node: from then on each node
	// has a breaker.
	cluster atomic.Bool
	// nodes holds a breaker per cluster node, by address.
	nodesMu sync.RWMutex
	nodes   map[string]*breaker
	// swept is when nodes was last swept for breakers to forget (Unix ns).
	swept atomic.Int64

	eventsMu   sync.Mutex
	events     []StateChange
	pending    atomic.Int32
	delivering sync.Mutex

	degraded atomic.Uint64
	failures atomic.Uint64

	// direct: the primary honours contexts, so calls need no goroutine.
	direct bool
	// abandoned counts calls still running after their caller left.
	abandoned atomic.Int32
}

// breaker is the circuit breaker of one node (or of the whole primary).
type breaker struct {
	node string
	cb   *gobreaker.CircuitBreaker[backend.Result]
	// openedAt is the Unix nanosecond time the breaker last opened.
	openedAt atomic.Int64
	// used is when a request was last routed to it (Unix ns).
	used     atomic.Int64
	degraded atomic.Uint64
	failures atomic.Uint64
	// lastErr is the node's last failure, the cause of an opening.
	lastErr atomic.Pointer[error]
}

var (
	_ backend.LeaseStore = (*Store)(nil)
	_ backend.Wrapper    = (*Store)(nil)
)

// AckHeadroom is the least time a primary call's deadline must leave after
// the primary's replica acknowledgement wait (backend.AckWaiter): the
// script's round trip and, when too few replicas acknowledged, the refund's.
// A deadline that passed during the wait would turn the admission it was
// confirming into the failure policy's decision.
const AckHeadroom = DefaultTimeout / 2

// New wraps primary. It returns an error only for invalid options, or a
// timeout that cannot hold the primary's replica acknowledgement wait.
func New(primary backend.Store, opts ...Option) (*Store, error) {
	if primary == nil {
		return nil, errors.New("fallback: primary store is nil")
	}
	c := config{
		timeout:     DefaultTimeout,
		threshold:   DefaultFailureThreshold,
		openTimeout: DefaultOpenTimeout,
		probes:      DefaultProbes,
		policy:      Local(1),
		logger:      slog.Default(),
		name:        "limitkit",
	}
	for _, opt := range opts {
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	if err := c.fitAck(primary); err != nil {
		return nil, err
	}
	if c.local == nil {
		m, err := memorystore.New()
		if err != nil {
			return nil, err
		}
		c.local = m
	}
	sh := &shared{primary: primary, local: c.local, cfg: c, direct: honoursContext(primary), locator: locatorOf(primary)}
	sh.one = sh.newBreaker("")
	return &Store{shared: sh, policy: c.policy}, nil
}

// fitAck makes the timeout hold the primary's replica acknowledgement
// wait: derived when WithTimeout was not given, refused when it was and is
// too short.
func (c *config) fitAck(primary backend.Store) error {
	w, ok := backend.As[backend.AckWaiter](primary)
	if !ok || w.ReplicaAckTimeout() <= 0 {
		return nil
	}
	wait := w.ReplicaAckTimeout()
	if !c.timeoutSet {
		c.timeout = wait + DefaultTimeout
		return nil
	}
	if c.timeout < wait+AckHeadroom {
		return fmt.Errorf("fallback: timeout %v does not hold the primary's replica acknowledgement wait of %v: "+
			"a call would end before the acknowledgement and be decided by the failure policy; "+
			"give WithTimeout at least %v (the wait plus AckHeadroom), leave it unset, or shorten WithReplicaAck's timeout",
			c.timeout, wait, wait+AckHeadroom)
	}
	return nil
}

// Unwrap returns the primary store (backend.Wrapper).
func (s *Store) Unwrap() backend.Store { return s.primary }

// newBreaker returns a closed breaker for node ("" for the only one).
func (s *shared) newBreaker(node string) *breaker {
	b := &breaker{node: node}
	name := s.cfg.name
	if node != "" {
		name += "/" + node
	}
	b.cb = gobreaker.NewCircuitBreaker[backend.Result](gobreaker.Settings{
		Name:        name,
		MaxRequests: s.cfg.probes,
		Timeout:     s.cfg.openTimeout,
		ReadyToTrip: func(counts gobreaker.Counts) bool {
			return counts.ConsecutiveFailures >= s.cfg.threshold
		},
		IsExcluded: func(err error) bool { return errors.As(err, new(callerError)) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.queue(b, stateOf(from), stateOf(to))
		},
	})
	return b
}

// locatorOf returns the backend.NodeLocator of s or of a store it wraps.
func locatorOf(s backend.Store) backend.NodeLocator {
	l, _ := backend.As[backend.NodeLocator](s)
	return l
}

// breakerFor returns the breaker of the node that owns key.
func (s *shared) breakerFor(ctx context.Context, key backend.Key) *breaker {
	if s.locator == nil {
		return s.one
	}
	node := s.locator.NodeOf(ctx, key)
	if !s.cluster.Load() {
		if node == "" {
			return s.one // a single node, or a cluster whose map is not known yet
		}
		s.becomeCluster()
	}
	// From here on, keys whose node the locator cannot tell ("") get a
	// breaker of their own, forgotten like the others when unused.
	now := time.Now().UnixNano()
	s.nodesMu.RLock()
	b := s.nodes[node]
	s.nodesMu.RUnlock()
	if b == nil {
		s.nodesMu.Lock()
		if b = s.nodes[node]; b == nil {
			if s.nodes == nil {
				s.nodes = make(map[string]*breaker)
			}
			b = s.newBreaker(node)
			b.used.Store(now) // before a sweep can see it
			s.nodes[node] = b
		}
		s.nodesMu.Unlock()
	}
	if b.used.Load() < now-int64(time.Millisecond) {
		b.used.Store(now) // at most one store a millisecond: less contention
	}
	if last := s.swept.Load(); now-last > s.cfg.forgetAfter()/4 && s.swept.CompareAndSwap(last, now) {
		s.sweep(now)
	}
	return b
}

// sweep forgets the node breakers unused for forgetAfter; those not closed
// are reported as changing to Closed.
func (s *shared) sweep(now int64) {
	var gone []*breaker
	s.nodesMu.Lock()
	for node, b := range s.nodes {
		if now-b.used.Load() > s.cfg.forgetAfter() {
			delete(s.nodes, node)
			gone = append(gone, b)
		}
	}
	s.nodesMu.Unlock()
	for _, b := range gone {
		if st := stateOf(b.cb.State()); st != Closed {
			s.queue(b, st, Closed)
		}
	}
}

// becomeCluster switches to a breaker per node, when the locator first
// names a node. The only breaker is no longer used: if it is not closed,
// the hook sees it close.
func (s *shared) becomeCluster() {
	s.nodesMu.Lock()
	first := !s.cluster.Swap(true)
	s.nodesMu.Unlock()
	if st := stateOf(s.one.cb.State()); first && st != Closed {
		s.queue(s.one, st, Closed)
	}
}

// breakers returns the only breaker, or on a cluster the node breakers,
// sorted by node.
func (s *shared) breakers() []*breaker {
	if !s.cluster.Load() {
		return []*breaker{s.one}
	}
	s.nodesMu.RLock()
	bs := make([]*breaker, 0, len(s.nodes))
	for _, b := range s.nodes {
		bs = append(bs, b)
	}
	s.nodesMu.RUnlock()
	slices.SortFunc(bs, func(a, b *breaker) int { return strings.Compare(a.node, b.node) })
	return bs
}

// Policy returns a view of s that decides by p while the primary is
// unavailable (requests that carry their own policy still follow it). Views
// share the breaker, the local store and the statistics. The unset policy
// means Local(1).
func (s *Store) Policy(p Policy) *Store {
	if p.Mode() == backend.ModeUnset {
		p = Local(1)
	}
	return &Store{shared: s.shared, policy: p}
}

// State returns the breaker's current state. With a breaker per node it is
// the worst of them: Open when any is open, else HalfOpen when any is
// half-open, else Closed. Stats.Nodes tells them apart.
func (s *Store) State() State {
	if s.cluster.Load() {
		s.sweep(time.Now().UnixNano())
	}
	st := Closed
	for _, b := range s.breakers() {
		st = worse(st, stateOf(b.cb.State()))
	}
	s.deliver()
	return st
}

// worse returns the worse of two states.
func worse(a, b State) State {
	rank := func(s State) int {
		switch s {
		case Open:
			return 2
		case HalfOpen:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// Stats counts what the store did since it was created.
type Stats struct {
	// State is the breaker's current state.
	State State
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
	State State
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

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.step(ctx, req, true)
}

// Peek implements backend.Store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.step(ctx, req, false)
}

func (s *Store) step(ctx context.Context, req backend.Request, take bool) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	call := s.primary.Peek
	if take {
		call = s.primary.Take
	}
	b := s.breakerFor(ctx, req.Key)
	res, err := s.execute(ctx, b, func(ctx context.Context) (backend.Result, error) { return call(ctx, req) })
	if err == nil {
		return res, nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return backend.Result{}, ce.err
	}
	return s.decide(ctx, b, req, take)
}

// Reset implements backend.Store. It resets the key on the local store too,
// and reports an error wrapping ErrUnavailable when the primary could not be
// reset.
func (s *Store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := rule.Validate(); err != nil {
		return err
	}
	if err := s.local.Reset(ctx, key, rule); err != nil {
		return err
	}
	_, err := s.execute(ctx, s.breakerFor(ctx, key), func(ctx context.Context) (backend.Result, error) {
		return backend.Result{}, s.primary.Reset(ctx, key, rule)
	})
	if err == nil {
		return nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return ce.err
	}
	return fmt.Errorf("%w: reset %s: %w", ErrUnavailable, boundid.Quote(key.ID), err)
}

// callerError marks an error caused by the caller (its context ended, or its
// request was invalid): it does not count against the primary.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }
func (e callerError) Unwrap() error { return e.err }

// execute runs fn on the primary through breaker b, within the deadline.
func (s *shared) execute(ctx context.Context, b *breaker, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	res, err := b.cb.Execute(func() (backend.Result, error) {
		res, err := s.withDeadline(ctx, fn)
		if err != nil && !errors.As(err, new(callerError)) {
			s.failures.Add(1)
			b.failures.Add(1)
			b.lastErr.Store(&err)
		}
		return res, err
	})
	s.deliver()
	return res, err
}

// withDeadline runs fn within the timeout. When the primary honours its
// context (see backend.ContextHonourer) fn runs in the caller's goroutine on a
// context with the timeout: no goroutine, channel or timer of its own.
// Otherwise fn runs in a goroutine the caller stops waiting for after the
// timeout; once maxAbandoned such calls are still running past their
// deadline, calls fail at once (as primary failures) until some return, so
// a hung client cannot pile goroutines up (at most maxAbandoned, plus one
// per caller that started as the last slot went).
func (s *shared) withDeadline(ctx context.Context, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var res backend.Result
	var err error
	if s.direct {
		res, err = fn(callCtx)
	} else {
		res, err = s.bounded(callCtx, fn)
	}
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, callerError{ctx.Err()}
	case errors.Is(err, algorithms.ErrInvalidRequest), errors.Is(err, algorithms.ErrInvalidRule):
		return res, callerError{err}
	case callCtx.Err() != nil:
		return backend.Result{}, fmt.Errorf("fallback: primary did not answer within %v: %w", s.cfg.timeout, err)
	}
	return res, err
}

// maxAbandoned bounds the calls to a primary that does not honour its
// context still running after their caller stopped waiting.
const maxAbandoned = 256

// errTooManyAbandoned fails calls while maxAbandoned calls still run.
var errTooManyAbandoned = fmt.Errorf("fallback: %d primary calls are still running past their deadline; "+
	"give the client a timeout it enforces (go-redis: ContextTimeoutEnabled)", maxAbandoned)

// The states of a call run by bounded.
const (
	callRunning int32 = iota
	callDone
	callAbandoned
)

// bounded runs fn in a goroutine and waits for it until ctx ends.
func (s *shared) bounded(ctx context.Context, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	if s.abandoned.Load() >= maxAbandoned {
		return backend.Result{}, errTooManyAbandoned
	}
	type outcome struct {
		res backend.Result
		err error
	}
	done := make(chan outcome, 1)
	state := new(atomic.Int32)
	go func() {
		res, err := fn(ctx)
		done <- outcome{res, err}
		if !state.CompareAndSwap(callRunning, callDone) {
			s.abandoned.Add(-1) // its caller left: no longer running
		}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		if state.CompareAndSwap(callRunning, callAbandoned) {
			s.abandoned.Add(1)
			return backend.Result{}, ctx.Err()
		}
		o := <-done // it finished meanwhile
		return o.res, o.err
	}
}

// honoursContext reports whether s, or a store it wraps, honours contexts
// (backend.ContextHonourer).
func honoursContext(s backend.Store) bool {
	h, ok := backend.As[backend.ContextHonourer](s)
	return ok && h.HonoursContext()
}

// policyOf returns the policy that decides req: its own, else the store's.
func (s *Store) policyOf(req *backend.Request) Policy {
	if req.OnFailure.Mode() != backend.ModeUnset {
		return req.OnFailure
	}
	return s.policy
}

// byPolicy answers req without the primary when its policy needs no local
// store (fail open, fail closed, or a cost beyond this instance's share),
// and otherwise scales req's limit to the share and reports local.
func (s *Store) byPolicy(b *breaker, req *backend.Request) (res backend.Result, local bool) {
	p := s.policyOf(req)
	switch p.Mode() {
	case backend.ModeOpen:
		return backend.Result{Allowed: true, Limit: req.Rule.Limit, Degraded: true}, false
	case backend.ModeClosed:
		return backend.Result{Limit: req.Rule.Limit, RetryAfter: b.untilProbe(s.cfg.openTimeout), Degraded: true}, false
	}
	share := (req.Rule.Limit + p.Instances() - 1) / p.Instances()
	if req.Cost > share {
		// This instance's share can never admit it: deny until the
		// primary is back.
		return backend.Result{Limit: share, RetryAfter: b.untilProbe(s.cfg.openTimeout), Degraded: true}, false
	}
	req.Rule.Limit = share
	return backend.Result{}, true
}

// decide answers by policy, with Degraded set.
func (s *Store) decide(ctx context.Context, b *breaker, req backend.Request, take bool) (backend.Result, error) {
	s.degraded.Add(1)
	b.degraded.Add(1)
	res, local := s.byPolicy(b, &req)
	if !local {
		return res, nil
	}
	var err error
	if take {
		res, err = s.local.Take(ctx, req)
	} else {
		res, err = s.local.Peek(ctx, req)
	}
	if err != nil {
		return backend.Result{}, fmt.Errorf("fallback: local store: %w", err)
	}
	res.Degraded = true
	res.Lease = s.localLease(res.Lease) // a local lease: released to the local store
	return res, nil
}

// TakeAll implements backend.Store. While the primary is unavailable each
// request follows its own policy (Request.OnFailure, else the store's): the
// call is denied when any request's policy denies (fail closed), requests
// that fail open drop out, and the rest are decided together on the local
// store with their limits scaled.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, err
	}
	// Keys on several nodes are not one call's; the first key's node
	// answers for them (see the Redis stores' TakeAll).
	b := s.breakerFor(ctx, reqs[0].Key)
	res, err := s.execute(ctx, b, func(ctx context.Context) (backend.Result, error) { return s.primary.TakeAll(ctx, reqs) })
	if err == nil {
		return res, nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return backend.Result{}, ce.err
	}
	s.degraded.Add(1)
	b.degraded.Add(1)
	results := make([]backend.Result, len(reqs))
	local := make([]backend.Request, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i := range reqs {
		req := reqs[i]
		r, isLocal := s.byPolicy(b, &req)
		results[i] = r
		if isLocal {
			// Decided below; it does not deny on its own.
			results[i] = backend.Result{Allowed: true, Limit: req.Rule.Limit, Remaining: req.Rule.Limit, Degraded: true}
			local = append(local, req)
			index = append(index, i)
		}
	}
	if combined := backend.Combine(results); !combined.Allowed || len(local) == 0 {
		return combined, nil
	}
	res, err = s.local.TakeAll(ctx, local)
	if err != nil {
		return backend.Result{}, fmt.Errorf("fallback: local store: %w", err)
	}
	res.Rule = index[res.Rule]
	res.Degraded = true
	res.Lease = s.localLease(res.Lease) // a local lease: released to the local store
	return res, nil
}

// untilProbe estimates how long until the breaker lets a probe through.
func (b *breaker) untilProbe(openTimeout time.Duration) time.Duration {
	opened := b.openedAt.Load()
	if opened == 0 {
		return openTimeout
	}
	return max(time.Until(time.Unix(0, opened).Add(openTimeout)), time.Millisecond)
}

// queue records a state change of b. gobreaker calls it with its lock
// held, so it only appends; deliver runs the hook and the log later,
// lock-free.
func (s *shared) queue(b *breaker, from, to State) {
	now := time.Now()
	var cause error
	if to == Open {
		b.openedAt.Store(now.UnixNano())
		if p := b.lastErr.Load(); p != nil {
			cause = *p
		}
	}
	s.eventsMu.Lock()
	s.events = append(s.events, StateChange{From: from, To: to, At: now, Cause: cause, Node: b.node})
	s.eventsMu.Unlock()
	s.pending.Add(1)
}

// deliver passes queued state changes to the log and the hook, in order, one
// deliverer at a time.
func (s *shared) deliver() {
	for s.pending.Load() > 0 {
		if !s.delivering.TryLock() {
			return // another goroutine is delivering; it will see ours
		}
		s.eventsMu.Lock()
		events := s.events
		s.events = nil
		s.pending.Add(-int32(len(events)))
		s.eventsMu.Unlock()
		for _, e := range events {
			level := slog.LevelInfo
			if e.To == Open {
				level = slog.LevelWarn
			}
			attrs := []any{"breaker", s.cfg.name, "from", string(e.From), "to", string(e.To)}
			if e.Cause != nil {
				attrs = append(attrs, "cause", e.Cause.Error())
			}
			if e.Node != "" {
				attrs = append(attrs, "node", e.Node)
			}
			s.cfg.logger.Log(context.Background(), level, "limitkit: circuit breaker state changed", attrs...)
			if s.cfg.hook != nil {
				s.cfg.hook(e)
			}
		}
		s.delivering.Unlock()
	}
}
