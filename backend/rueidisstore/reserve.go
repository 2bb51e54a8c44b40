package rueidisstore

import (
	"context"

	"github.com/limitkit/limitkit/backend"
)

var _ backend.Reserver = (*Store)(nil)

// Reserve implements backend.Reserver: one script call, as Take without
// batching, whose reply says where the admission recorded its units.
func (s *Store) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	return s.runner.Reserve(ctx, req)
}

// Unreserve implements backend.Reserver: one script call in refund mode,
// sent once and detached from ctx's end (as every refund, within
// redisengine's RefundTimeout); one that fails is counted by FailedRefunds.
func (s *Store) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	return s.runner.Unreserve(ctx, req, at)
}
