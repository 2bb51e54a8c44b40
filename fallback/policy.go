package fallback

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/backend"
)

// Policy returns a view of s that decides by p while the primary is
// unavailable (requests that carry their own policy still follow it). Views
// share the breaker, the local store and the statistics. The unset policy
// means backend.LocalPolicy(1).
func (s *Store) Policy(p backend.FailurePolicy) *Store {
	if p.Mode() == backend.ModeUnset {
		p = backend.LocalPolicy(1)
	}
	return &Store{shared: s.shared, policy: p}
}

// policyOf returns the policy that decides req: its own, else the store's.
func (s *Store) policyOf(req *backend.Request) backend.FailurePolicy {
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
	if req.Cost > share && !req.Charge {
		// This instance's share can never admit it: deny until the
		// primary is back.
		return backend.Result{Limit: share, RetryAfter: b.untilProbe(s.cfg.openTimeout), Degraded: true}, false
	}
	req.Rule.Limit = share
	return backend.Result{}, true
}

// localCall is what the local store does with a request whose policy is
// local: backend.Store.Take, backend.Store.Peek or giveBackLocally (method
// expressions, so the store comes first and no closure is made per call).
type localCall func(local backend.Store, ctx context.Context, req backend.Request) (backend.Result, error)

// localKind says what a localCall does to the key's baseline.
type localKind uint8

const (
	// localTake consumes: checked against the baseline, counted in it.
	localTake localKind = iota
	// localPeek consumes nothing: checked against the baseline.
	localPeek
	// localGiveBack gives units back: taken off what the baseline counted.
	localGiveBack
)

// decide answers req by policy, with Degraded set. It checks req first:
// the primary, which checks what it decides, did not answer, a policy
// admits or denies on its own, and a bad limit scaled to a share would turn
// a refusal into a denial. A local decision is also bound by the key's
// baseline (see baseline.go).
func (s *Store) decide(ctx context.Context, b *breaker, req backend.Request, local localCall, kind localKind) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	s.degraded.Add(1)
	b.degraded.Add(1)
	rule := req.Rule
	res, isLocal := s.byPolicy(b, &req)
	if !isLocal {
		return res, nil
	}
	var bd bound
	if s.base != nil {
		defer s.base.lock(&req)()
		bd = s.base.boundOf(&req, rule, s.policyOf(&req).Instances())
	}
	now := req.Millis()
	// A charge is recorded whatever is left (backend.Request.Charge).
	if kind != localGiveBack && !req.Charge && !bd.allows(now, req.Cost) {
		return bd.denial(now, req.Cost, req.Rule.Limit), nil
	}
	res, err := local(s.local, ctx, req)
	if err != nil {
		return backend.Result{}, fmt.Errorf("fallback: local store: %w", err)
	}
	if bd.e != nil {
		switch {
		case kind == localGiveBack:
			bd.credit(req.Cost)
		case kind == localTake && res.Allowed:
			bd.spend(now, req.Cost)
		}
		res.Remaining = min(res.Remaining, bd.left(now))
	}
	res.Degraded = true
	res.Lease = s.localLease(res.Lease) // a local lease: released to the local store
	return res, nil
}

// decideAll answers a TakeAll by each request's policy, with Degraded set.
func (s *Store) decideAll(ctx context.Context, b *breaker, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, nil, err
	}
	s.degraded.Add(1)
	b.degraded.Add(1)
	results := make([]backend.Result, len(reqs))
	local := make([]backend.Request, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	bounds := make([]bound, 0, len(reqs))
	if s.base != nil {
		defer s.base.lockAll(reqs)()
	}
	now := reqs[0].Millis()
	for i := range reqs {
		req := reqs[i]
		r, isLocal := s.byPolicy(b, &req)
		results[i] = r
		if isLocal {
			bd := s.base.boundOf(&req, reqs[i].Rule, s.policyOf(&req).Instances())
			if !req.Charge && !bd.allows(now, req.Cost) {
				results[i] = bd.denial(now, req.Cost, req.Rule.Limit)
				continue
			}
			// Decided below; it does not deny on its own.
			results[i] = backend.Result{Allowed: true, Limit: req.Rule.Limit, Remaining: req.Rule.Limit, Degraded: true}
			local = append(local, req)
			index = append(index, i)
			bounds = append(bounds, bd)
		}
	}
	if combined := backend.Combine(results); !combined.Allowed || len(local) == 0 {
		return combined, nil, nil
	}
	res, localEach, err := backend.TakeEach(ctx, s.local, local)
	if err != nil {
		return backend.Result{}, nil, fmt.Errorf("fallback: local store: %w", err)
	}
	if res.Allowed {
		for j, bd := range bounds {
			if bd.e != nil {
				bd.spend(now, local[j].Cost)
			}
		}
	}
	each := s.eachOf(results, index, res, localEach)
	if bd := bounds[res.Rule]; bd.e != nil {
		res.Remaining = min(res.Remaining, bd.left(now))
	}
	res.Rule = index[res.Rule]
	res.Degraded = true
	res.Lease = s.localLease(res.Lease) // a local lease: released to the local store
	return res, each, nil
}

// spendMissed counts req's cost in its key's baseline: a Take that missed
// its deadline may still reach the primary and be counted there, after
// the answer the baseline holds.
func (s *Store) spendMissed(req backend.Request) {
	if s.base == nil {
		return
	}
	defer s.base.lock(&req)()
	if bd := s.base.boundOf(&req, req.Rule, 1); bd.e != nil { // spend does not depend on the share
		bd.spend(req.Millis(), req.Cost)
	}
}

// recordAll records a TakeAll's answers as baselines: every request's
// from each when the primary gave it, else the one res describes.
func (s *Store) recordAll(reqs []backend.Request, res backend.Result, each []backend.Result) {
	if s.base == nil {
		return
	}
	if len(each) == len(reqs) {
		for i := range reqs {
			s.base.record(&reqs[i], &each[i])
		}
		return
	}
	if res.Rule >= 0 && res.Rule < len(reqs) {
		s.base.record(&reqs[res.Rule], &res)
	}
}

// eachOf is a degraded TakeAll's each in request order: the policies'
// answers, with the local store's (from its TakeEach's res and local) in
// their places (index). It is nil when the local store did not describe
// every request it decided.
func (s *Store) eachOf(results []backend.Result, index []int, res backend.Result, local []backend.Result) []backend.Result {
	if len(index) == 1 && local == nil {
		res.Rule = 0
		local = []backend.Result{res} // a TakeAll of one describes it in res
	}
	if len(results) < 2 || len(local) != len(index) {
		return nil
	}
	for j, i := range index {
		r := local[j]
		r.Degraded = true
		r.Lease = s.localLease(r.Lease)
		results[i] = r
	}
	return results
}
