package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/internal/boundid"
	"github.com/limitkit/limitkit/internal/option"
)

// Store is a backend.Store that decides on the primary while it is healthy
// and by policy while it is not. It is safe for concurrent use.
type Store struct {
	*shared
	policy backend.FailurePolicy
}

// shared is what every policy view of one Store shares.
type shared struct {
	primary backend.Store
	local   backend.Store
	cfg     options
	// base remembers the primary's last answers (nil: WithBaselines(0)).
	base *baselines

	// one is the breaker of every request when there is no locator.
	one     *breaker
	locator backend.NodeLocator
	// reqLocator names the nodes of exact keys (nil: by Key).
	reqLocator backend.RequestLocator
	// cluster is set once the locator named a node: from then on each node
	// has a breaker.
	cluster atomic.Bool
	// nodes holds a breaker per cluster node, by address.
	nodesMu sync.RWMutex
	nodes   map[string]*breaker
	// swept is when nodes was last swept for breakers to forget (Unix ns).
	swept atomic.Int64

	eventsMu   sync.Mutex
	events     []backend.StateChange
	pending    atomic.Int32
	delivering sync.Mutex

	// queued holds the refunds of reservations settled while the
	// breaker refused calls (reserve.go).
	queued refundQueue

	degraded atomic.Uint64
	failures atomic.Uint64

	// direct: the primary honours contexts, so calls need no goroutine.
	direct bool
	// abandoned counts calls still running after their caller left.
	abandoned atomic.Int32
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
	c := options{
		timeout:     DefaultTimeout,
		threshold:   DefaultFailureThreshold,
		openTimeout: DefaultOpenTimeout,
		probes:      DefaultProbes,
		baselines:   DefaultBaselines,
		policy:      backend.LocalPolicy(1),
		logger:      slog.Default(),
		name:        "limitkit",
	}
	if err := option.Apply(&c, opts); err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
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
	sh := &shared{primary: primary, local: c.local, cfg: c, direct: honoursContext(primary), locator: locatorOf(primary),
		base: newBaselines(c.baselines)}
	sh.reqLocator, _ = backend.As[backend.RequestLocator](primary)
	sh.one = sh.newBreaker("")
	return &Store{shared: sh, policy: c.policy}, nil
}

// fitAck makes the timeout hold the primary's replica acknowledgement
// wait: derived when WithTimeout was not given, refused when it was and is
// too short.
func (c *options) fitAck(primary backend.Store) error {
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

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.step(ctx, req, s.primary.Take, backend.Store.Take, localTake)
}

// Peek implements backend.Store.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.step(ctx, req, s.primary.Peek, backend.Store.Peek, localPeek)
}

// step decides req with call on the primary, else by policy, with local
// on the local store when the policy is local (kind says which call it
// is). The primary's answer becomes the key's baseline. The primary checks
// req (its refusal is the caller's error, not a failure); decide checks it
// where the primary did not answer.
func (s *Store) step(ctx context.Context, req backend.Request, call func(context.Context, backend.Request) (backend.Result, error), local localCall, kind localKind) (backend.Result, error) {
	var held backend.Result
	refused, reserved := false, false
	localPolicy := s.policyOf(&req).Mode() == backend.ModeLocal
	if kind == localTake && localPolicy {
		held, refused, reserved = s.base.reserveHeld(&req) // a key the primary may have lost (hold.go)
	}
	b := s.breakerForRequest(ctx, &req)
	res, err := s.executeProbed(ctx, b, func(ctx context.Context) (backend.Result, error) { return call(ctx, req) },
		func(ctx context.Context) (backend.Result, error) { return s.primary.Peek(ctx, req) })
	if reserved && (err != nil || !res.Allowed) {
		s.base.releaseHeld(&req)
	}
	if err == nil {
		s.base.record(&req, &res)
		switch {
		case refused:
			res = heldDenial(res, held)
		case localPolicy:
			res = s.base.afterHeld(&req, kind, res)
		}
		return res, nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return backend.Result{}, ce.err
	}
	if kind == localTake && errors.Is(err, errMissedDeadline) {
		s.spendMissed(req)
	}
	return s.decide(ctx, b, req, local, kind)
}

// Reset implements backend.Store. It resets the key on the local store too,
// forgets its baseline,
// and reports an error wrapping ErrUnavailable when the primary could not be
// reset. The local store checks key and rule first.
func (s *Store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	if err := s.local.Reset(ctx, key, rule, now); err != nil {
		return err
	}
	s.base.forget(key, rule.Algorithm) // what Redis said and what was counted since
	_, err := s.execute(ctx, s.breakerFor(ctx, key), func(ctx context.Context) (backend.Result, error) {
		return backend.Result{}, s.primary.Reset(ctx, key, rule, now)
	})
	if err == nil {
		return nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return ce.err
	}
	return fmt.Errorf("%w: reset %s: %w", ErrUnavailable, boundid.Quote(key.ID), err)
}

// TakeAll implements backend.Store. While the primary is unavailable each
// request follows its own policy (Request.OnFailure, else the store's): the
// call is denied when any request's policy denies (fail closed), requests
// that fail open drop out, and the rest are decided together on the local
// store with their limits scaled.
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	res, _, err := s.takeAll(ctx, reqs, false)
	return res, err
}

// TakeEach implements backend.EachTaker: TakeAll, with every request's
// own result, the primary's or (Degraded) the policies'.
func (s *Store) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	return s.takeAll(ctx, reqs, true)
}

// takeAll is TakeAll, with each when wantEach.
func (s *Store) takeAll(ctx context.Context, reqs []backend.Request, wantEach bool) (backend.Result, []backend.Result, error) {
	if len(reqs) == 0 {
		return backend.Result{}, nil, backend.ValidateAll(reqs) // no first key to route by
	}
	// Keys on several nodes are not one call's; the first key's node
	// answers for them (see the Redis stores' TakeAll).
	b := s.breakerForRequest(ctx, &reqs[0])
	// Every request's answer is a baseline: ask for each when there are
	// baselines, even when the caller does not.
	askEach := wantEach || (s.base != nil && len(reqs) > 1)
	held, refused, reserved := s.heldAll(reqs) // keys the primary may have lost (hold.go)
	var each []backend.Result                  // written by the call; read only once it returned
	res, err := s.executeProbed(ctx, b, func(ctx context.Context) (backend.Result, error) {
		if !askEach {
			return s.primary.TakeAll(ctx, reqs)
		}
		res, e, err := backend.TakeEach(ctx, s.primary, reqs)
		each = e
		return res, err
	}, func(ctx context.Context) (backend.Result, error) { return s.primary.Peek(ctx, reqs[0]) })
	if err != nil || !res.Allowed {
		s.releaseHeldAll(reqs, &reserved, err == nil)
	}
	if err == nil {
		s.recordAll(reqs, res, each)
		if refused && res.Allowed {
			// The call is refused: the primary's admissions do not
			// describe it, so no per-request results.
			return held, nil, nil
		}
		return res, each, nil
	}
	if ce, ok := errors.AsType[callerError](err); ok {
		return backend.Result{}, nil, ce.err
	}
	if errors.Is(err, errMissedDeadline) {
		for i := range reqs {
			s.spendMissed(reqs[i])
		}
	}
	return s.decideAll(ctx, b, reqs)
}
