package observe

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// The store calls of reservations (limiter.Reservation).
const (
	// Reserve decides a reservation's estimate, as Take does.
	Reserve Op = "reserve"
	// Unreserve gives back the part of a reservation its settlement did
	// not use (a refund); Allowed is meaningless for it. The excess of a
	// settlement is a Take of a charge (backend.Request.Charge).
	Unreserve Op = "unreserve"
)

var _ backend.Reserver = (*store)(nil)

func reserverOf(st backend.Store) (backend.Reserver, error) {
	r, ok := backend.As[backend.Reserver](st)
	if !ok {
		return nil, fmt.Errorf("observe: the wrapped store %T cannot reserve (it implements no backend.Reserver)", st)
	}
	return r, nil
}

// Reserve forwards to the wrapped store and reports the decision.
func (s *store) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	r, err := reserverOf(s.Store)
	if err != nil {
		return backend.Result{}, 0, err
	}
	if s.obs.OnDecision == nil {
		return r.Reserve(ctx, req)
	}
	start := time.Now()
	res, at, err := r.Reserve(ctx, req)
	s.report(ctx, Reserve, req.Key.Prefix, req.Cost, start, res, err, req.Shadow)
	return res, at, err
}

// Unreserve forwards to the wrapped store and reports the call, with the
// units given back as its cost.
func (s *store) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	r, err := reserverOf(s.Store)
	if err != nil {
		return backend.Result{}, err
	}
	if s.obs.OnDecision == nil {
		return r.Unreserve(ctx, req, at)
	}
	start := time.Now()
	res, err := r.Unreserve(ctx, req, at)
	s.report(ctx, Unreserve, req.Key.Prefix, req.Cost, start, res, err, req.Shadow)
	return res, err
}
