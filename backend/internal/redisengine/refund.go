package redisengine

// Leases and refunds: releasing and renewing leases, giving units back,
// and the compensating refunds of TakeAll and replica acknowledgement.

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// Release implements backend.LeaseStore.Release: the script's refund mode,
// which removes the lease when it is still held and reports whether it
// was. It is sent once, as every writing call.
func (r *Runner) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if err := r.checkLease(&req); err != nil {
		return false, err
	}
	_, held, err := r.single(ctx, &req, rediswire.ModeRefund, r.now(&req), lease)
	return held == 1, err
}

// GiveBack implements backend.UnitRefunder: the script's refund mode with
// a negative at, which gives back by time (algorithms.Rule.GiveBack) at
// the script's now (the server's under server time, as its takes are
// stamped), then reports what a Peek does. It is sent once, as every
// writing call.
func (r *Runner) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	if err := req.Rule.CheckGiveBack(); err != nil {
		return backend.Result{}, err
	}
	res, _, err := r.single(ctx, &req, rediswire.ModeRefund, r.now(&req), giveBackByTime)
	return res, err
}

// giveBackByTime is the at of a refund that names no take: the scripts
// give back by time (see prelude.lua).
const giveBackByTime = -1

// Renew implements backend.LeaseStore.Renew: the script's renew mode,
// atomic on the server. With replica acknowledgement configured it waits
// for the replicas as a take does and reports Unconfirmed, but never turns
// a renewal into a denial (the lease was held either way).
func (r *Runner) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if err := r.checkLease(&req); err != nil {
		return backend.Result{}, err
	}
	res, _, err := r.single(ctx, &req, rediswire.ModeRenew, r.now(&req), lease)
	return res, err
}

// checkLease validates a release or renewal.
func (r *Runner) checkLease(req *backend.Request) error {
	if err := backend.ValidateLease(req); err != nil {
		return err
	}
	return r.check(req)
}

// refuse rolls back admissions (reqs, recorded at ats) too few replicas
// acknowledged and turns res into a denial to retry once the replicas may
// have caught up.
func (r *Runner) refuse(ctx context.Context, reqs []backend.Request, ats []int64, res backend.Result) (backend.Result, error) {
	for i := range reqs {
		if _, err := r.refund(ctx, &reqs[i], ats[i]); err != nil {
			return backend.Result{}, fmt.Errorf("%s: rolling back an admission too few replicas acknowledged: %w", r.name, err)
		}
	}
	res.Allowed = false
	res.Remaining = 0
	res.RetryAfter = r.opts.Ack.Timeout
	res.Lease = 0
	return res, nil
}

// RefundTimeout bounds a compensating refund. Refunds run detached from the
// caller's cancellation and deadline: they give back units the caller's
// request took, so a caller that gave up must not leave them taken.
const RefundTimeout = time.Second

// refund gives back what a take of req recorded at at, and returns what a
// peek of req reports afterwards. It runs on ctx's values only, within
// RefundTimeout; a refund that fails is counted (FailedRefunds).
func (r *Runner) refund(ctx context.Context, req *backend.Request, at int64) (backend.Result, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RefundTimeout)
	defer cancel()
	res, _, err := r.single(ctx, req, rediswire.ModeRefund, r.now(req), at)
	if err != nil {
		r.failedRefunds.Add(1)
		return res, fmt.Errorf("refund (its units stay taken until they expire): %w", err)
	}
	return res, nil
}

// AckTimeout returns how long an admission waits for replicas: the Ack's
// timeout, 0 when it does not wait.
func (r *Runner) AckTimeout() time.Duration {
	if r.opts.Ack.Replicas == 0 {
		return 0
	}
	return r.opts.Ack.Timeout
}

// FailedRefunds counts the compensating refunds (of a cross-slot TakeAll,
// or of an admission too few replicas acknowledged) that failed, leaving
// their units taken until they expire.
func (r *Runner) FailedRefunds() uint64 { return r.failedRefunds.Load() }
