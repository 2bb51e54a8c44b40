package observe

import (
	"context"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// TakeAll reports one Decision for the whole call: its policy is the prefix
// of the request that decided (backend.Result.Rule), its cost the number of
// requests, its LeasePolicy the prefix of its concurrency request if any.
func (s *store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if s.obs.OnDecision == nil {
		return s.Store.TakeAll(ctx, reqs)
	}
	start := time.Now()
	res, err := s.Store.TakeAll(ctx, reqs)
	s.reportAll(ctx, reqs, res, err, start)
	return res, err
}

// TakeEach implements backend.EachTaker: TakeAll, with the store's
// results for every request, reported as TakeAll is.
func (s *store) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if s.obs.OnDecision == nil {
		return backend.TakeEach(ctx, s.Store, reqs)
	}
	start := time.Now()
	res, each, err := backend.TakeEach(ctx, s.Store, reqs)
	s.reportAll(ctx, reqs, res, err, start)
	return res, each, err
}

// reportAll reports the Decision of a TakeAll of reqs started at start.
func (s *store) reportAll(ctx context.Context, reqs []backend.Request, res backend.Result, err error, start time.Time) {
	policy := ""
	if i := res.Rule; err == nil && i >= 0 && i < len(reqs) {
		policy = reqs[i].Key.Prefix
	} else if len(reqs) > 0 {
		policy = reqs[0].Key.Prefix
	}
	leases, leasePolicy := false, ""
	for i := range reqs {
		if reqs[i].Rule.HoldsLeases() {
			leases, leasePolicy = true, reqs[i].Key.Prefix
		}
	}
	// The limiter sends its shadow rules in a call of their own.
	s.obs.OnDecision(ctx, Decision{
		Op:          TakeAll,
		Policy:      policy,
		Allowed:     err == nil && res.Allowed,
		Degraded:    err == nil && res.Degraded,
		Shadow:      len(reqs) > 0 && reqs[0].Shadow,
		Cached:      err == nil && res.Cached,
		Cost:        int64(len(reqs)),
		Lease:       takeEvent(leases, res, err),
		LeasePolicy: leasePolicy,
		Latency:     time.Since(start),
		Err:         err,
	})
}
