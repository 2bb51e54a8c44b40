package redisengine

// TakeAll: several requests decided all or nothing, by one script where
// the keys allow it, else checked, taken in order and refunded.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TakeAll implements backend.Store.TakeAll: TakeEach without each.
func (r *Runner) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	res, _, err := r.TakeEach(ctx, reqs)
	return res, err
}

// TakeEach implements backend.EachTaker.TakeEach. When the keys can go in one
// script (any single-master Redis; a cluster when they share a hash slot,
// same id, as a limiter's guard does, or with batching on when the slot
// map puts them on one master) the requests are decided atomically by one
// script, batched with concurrent TakeAlls where batching applies.
// Otherwise (Redis Cluster, keys on different masters) they are checked
// one by one (read-only; a denial ends the call),
// then taken one by one in the order given; when one is denied after all
// (a concurrent caller took the room in between), the admissions of those
// before it are refunded (see algorithms.Rule.Refund). The limits are never
// exceeded, but while a refund is pending other callers can be denied by
// units that end up given back. Refunds run even when ctx has ended
// (detached from it, within RefundTimeout); one that fails (the server
// became unreachable) leaves its units taken until they expire, and is
// counted by FailedRefunds. This path costs
// two round trips per request; put the rule most likely to deny first.
func (r *Runner) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, nil, err
	}
	for i := range reqs {
		if err := r.check(&reqs[i]); err != nil {
			return backend.Result{}, nil, err
		}
	}
	if len(reqs) == 1 {
		res, err := r.takeOne(ctx, &reqs[0])
		return res, nil, err
	}
	if r.nativeAll(reqs) {
		return r.takeNative(ctx, reqs, true)
	}
	keys := make([]string, len(reqs))
	for i := range reqs {
		keys[i] = r.stateKey(&reqs[i])
	}
	// A TakeAll holding a lease goes alone: the batch replies carry no
	// lease ids.
	if b := r.batcherFor(kindGroup, keys[0]); b != nil && !holdsLease(reqs) && (!b.cluster || r.nodes.sameNode(keys)) {
		return b.takeAll(ctx, reqs, keys)
	}
	return r.takeAllAlone(ctx, reqs, keys)
}

// holdsLease reports whether one of reqs holds a lease.
func holdsLease(reqs []backend.Request) bool {
	for i := range reqs {
		if reqs[i].Rule.HoldsLeases() {
			return true
		}
	}
	return false
}

// takeAllAlone decides a TakeAll with its own script call(s).
func (r *Runner) takeAllAlone(ctx context.Context, reqs []backend.Request, keys []string) (backend.Result, []backend.Result, error) {
	if !r.conn.Cluster() || rediswire.SameSlot(keys) {
		return r.takeTogether(ctx, reqs, keys)
	}
	return r.takeInOrder(ctx, reqs)
}

// takeTogether decides reqs with the multi script.
func (r *Runner) takeTogether(ctx context.Context, reqs []backend.Request, keys []string) (backend.Result, []backend.Result, error) {
	args := make([]string, 1, 1+4*len(reqs))
	args[0] = strconv.FormatInt(r.now(&reqs[0]), 10)
	for i := range reqs {
		args = rediswire.MultiArgs(args, reqs[i].Rule, wireCost(&reqs[i]))
	}
	reply, acked, cmd, err := r.eval(ctx, &r.multi, keys, args, true, true)
	if err != nil {
		return backend.Result{}, nil, fmt.Errorf("%s: %s multi: %w", r.name, cmd, err)
	}
	if want := 1 + rediswire.ReplyLen*len(reqs); len(reply) != want || reply[0] < 0 || reply[0] > 1 {
		return backend.Result{}, nil, fmt.Errorf("%s: %s multi: %w: %d integers, want %d", r.name, cmd, rediswire.ErrBadReply, len(reply), want)
	}
	results := make([]backend.Result, len(reqs))
	ats := make([]int64, len(reqs))
	for i := range reqs {
		vals := reply[1+rediswire.ReplyLen*i : 1+rediswire.ReplyLen*(i+1)]
		out, err := rediswire.Decode(reqs[i].Rule, vals)
		if err != nil {
			return backend.Result{}, nil, fmt.Errorf("%s: %s multi: request %d: %w", r.name, cmd, i, err)
		}
		if reply[0] == 1 && !out.Allowed {
			return backend.Result{}, nil, fmt.Errorf("%s: %s multi: %w: request %d denied in an admitted reply", r.name, cmd, rediswire.ErrBadReply, i)
		}
		results[i] = backend.ResultOf(reqs[i].Rule, out)
		ats[i] = vals[rediswire.ReplyAt]
		if out.Allowed && reply[0] == 1 && reqs[i].Rule.HoldsLeases() {
			results[i].Lease = ats[i]
		}
	}
	res, each := backend.CombineEach(results)
	if res.Allowed && acked < int64(r.opts.Ack.Replicas) {
		res.Unconfirmed = true
		if r.opts.Ack.OnShort == backend.DenyUnconfirmed {
			// The admissions each describes are rolled back.
			res, err := r.refuse(ctx, reqs, ats, res)
			return res, nil, err
		}
	}
	return res, each, nil
}

// combined is a TakeEach's answer of results.
func combined(results []backend.Result) (backend.Result, []backend.Result, error) {
	res, each := backend.CombineEach(results)
	return res, each, nil
}

// takeInOrder checks every request first (read-only) and returns the
// denial when one would be denied; otherwise it takes them one by one, and
// when one is denied after all (another caller got there first), it refunds
// the ones before it and peeks the ones after it.
func (r *Runner) takeInOrder(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if slices.ContainsFunc(reqs, func(q backend.Request) bool { return q.Charge }) {
		return r.chargesFirst(ctx, reqs)
	}
	results := make([]backend.Result, len(reqs))
	all := true
	for i := range reqs {
		var err error
		if results[i], _, err = r.single(ctx, &reqs[i], rediswire.ModePeek, r.now(&reqs[i]), 0); err != nil {
			return backend.Result{}, nil, err
		}
		all = all && results[i].Allowed
	}
	if !all {
		return combined(results)
	}
	ats := make([]int64, len(reqs))
	for i := range reqs {
		res, at, takeErr := r.take(ctx, &reqs[i])
		if takeErr == nil && res.Allowed {
			results[i], ats[i] = res, at
			continue
		}
		// Denied or failed: give back what the earlier ones took, even when
		// ctx has ended (refund detaches). A failed refund leaves its units
		// taken (safe, and they expire; counted) and its take's result
		// standing: a denial is still the answer, not the refund's error.
		errs := []error{takeErr}
		for j := range i {
			if refunded, err := r.refund(ctx, &reqs[j], ats[j]); err != nil {
				errs = append(errs, err)
			} else {
				results[j] = refunded
			}
		}
		if takeErr != nil {
			return backend.Result{}, nil, errors.Join(errs...)
		}
		results[i] = res
		for j := i + 1; j < len(reqs); j++ {
			var err error
			if results[j], _, err = r.single(ctx, &reqs[j], rediswire.ModePeek, r.now(&reqs[j]), 0); err != nil {
				return backend.Result{}, nil, err
			}
		}
		return combined(results)
	}
	return combined(results)
}

// chargesFirst is takeInOrder for requests some of which are charges
// (backend.Request.Charge): the charges are recorded first, one by one
// (never refused, never given back), then the others are decided all or
// nothing among themselves.
func (r *Runner) chargesFirst(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	results := make([]backend.Result, len(reqs))
	var rest []backend.Request
	var of []int
	for i := range reqs {
		if !reqs[i].Charge {
			rest, of = append(rest, reqs[i]), append(of, i)
			continue
		}
		res, _, err := r.take(ctx, &reqs[i])
		if err != nil {
			return backend.Result{}, nil, err
		}
		results[i] = res
	}
	if len(rest) > 0 {
		res, each, err := r.takeInOrder(ctx, rest)
		if err != nil {
			return backend.Result{}, nil, err
		}
		if each == nil {
			each = []backend.Result{res}
		}
		for j, i := range of {
			results[i] = each[j]
		}
	}
	return combined(results)
}
