package observe

import (
	"context"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// TakeAll reports one Decision for the whole call: its policy is the prefix
// of the request that decided (backend.Result.Rule), its cost the number of
// requests.
func (s *store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if s.obs.OnDecision == nil {
		return s.Store.TakeAll(ctx, reqs)
	}
	start := time.Now()
	res, err := s.Store.TakeAll(ctx, reqs)
	policy := ""
	if i := res.Rule; err == nil && i >= 0 && i < len(reqs) {
		policy = reqs[i].Key.Prefix
	} else if len(reqs) > 0 {
		policy = reqs[0].Key.Prefix
	}
	// The limiter sends its shadow rules in a call of their own.
	s.report(ctx, TakeAll, policy, int64(len(reqs)), start, res, err, len(reqs) > 0 && reqs[0].Shadow)
	return res, err
}
