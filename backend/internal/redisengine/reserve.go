package redisengine

import (
	"context"

	"github.com/limitkit/limitkit/backend"
)

// Reserve implements backend.Reserver: the take script alone (not batched,
// not the native path: their replies do not say where units went), whose
// reply names where the admission recorded its units.
func (r *Runner) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, 0, err
	}
	if err := r.check(&req); err != nil {
		return backend.Result{}, 0, err
	}
	res, at, err := r.take(ctx, &req)
	if err != nil || !res.Allowed {
		return res, 0, err
	}
	return res, at, nil
}

// Unreserve implements backend.Reserver: the script's refund mode at at,
// sent once, detached from ctx's end as every refund (see refund).
func (r *Runner) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, err
	}
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	return r.refund(ctx, &req, at)
}
