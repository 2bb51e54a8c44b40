package fallback

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/backend"
)

// StateChange describes one transition of the breaker; it is
// backend.StateChange (see State).
type StateChange = backend.StateChange

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
