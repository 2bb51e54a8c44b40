package redisengine

// Fixed windows on native commands: per limit an INCRBY of its cost on the
// key of the window holding the request's time and a PEXPIRE, the limits
// of a request (and of the concurrent requests batched with it) in one
// pipeline; a refused request gives back what it incremented, in a second
// pipeline, which its call waits for until its context ends.
//
// Why not a script: a fixed window is a counter, and a script that wraps
// the counter's two commands costs Redis more than the commands sent
// plainly (internal/dev/benchmarks/rlsbench/README.md: a script of only a GET and a SET per key
// costs 1.5-2x the reference's pipelined INCRBY+EXPIRE). Atomicity is not
// lost: INCRBY is atomic, and a request is admitted only when every count
// after its increment is within its limit, so under any interleaving no
// window admits more than its limit. What it costs: a request refused by
// one limit holds its increments on the others until its refund lands, and
// a concurrent request can be refused by them meanwhile.
//
// The keys are the script's (fixed_window.lua): the library's key, ':'
// and the window's start in ms, or an exact key (backend.ExactKey). So a
// Take on this path and a TakeAll mixing algorithms, a Peek, a give back
// or a Take under server time on the script path count in the same keys.

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// NativeConn is a Conn that can also send the fixed windows' native
// commands. Both stores' Conns implement it; a Conn without it has every
// fixed window decided by its script.
type NativeConn interface {
	// IncrExpire sends, in one pipeline, for every i INCRBY keys[i]
	// by[i] then PEXPIRE keys[i] expiry[i] (ms), and returns each count
	// after its INCRBY. errs is nil when no INCRBY failed, else errs[i]
	// is the error of the one in place of counts[i]. err is a failure of
	// the connection (not a server's reply to one command); counts and
	// errs are then still returned, when known: on a cluster the INCRBYs
	// of the nodes that answered counted, and the runner gives them back.
	// Like a writing script it is sent at most once: never again after
	// it may have reached the server. Keys may be in different cluster
	// slots.
	IncrExpire(ctx context.Context, keys []string, by, expiry []int64) (counts []int64, errs []error, err error)
}

// refundWindows is the refund of a native increment: it gives back only
// within the epoch the increment counted in (rediswire.EpochBase).
var refundWindows = newScript(rediswire.RefundWindowScript)

// refundParked and refundRelease, when set (tests), hold every native
// refund until refundRelease is closed, after a value per key on
// refundParked, and send as many again once it has landed.
var refundParked, refundRelease chan struct{}

// skipNativeRefunds makes the native path forget its refunds: a control
// for the tests that must catch it. This and the other controls are
// atomic: goroutines that outlive their callers (a batch sent near its
// deadline, a refund past it) read them while a test restores them.
var skipNativeRefunds atomic.Bool

// skipPartialRefunds makes a native pipeline that failed on some keys keep
// the increments of the others (as before they were given back): a
// control.
var skipPartialRefunds atomic.Bool

// nativeTake reports whether a Take (not a TakeAll) goes on the native
// path: a fixed window of one unit. A refused Take of one unit found its
// window full before its increment, so the increment it holds until its
// refund makes no other request see a full window that is not. A refused
// Take of more units can: while its refund is in flight, a one-unit
// request is refused with nothing left, which a deny cache
// (backend/denycache) would remember until the window's end, and nothing
// tells it otherwise (a TakeAll's refusal is announced by the deny cache,
// a Take's is not). So those go by script, which decides before it
// writes. A charge (backend.Request.Charge) is never refused, so it goes
// native at any cost: an INCRBY, never given back.
func nativeTake(r *Runner, req *backend.Request) bool {
	return r.native != nil && req.Rule.Algorithm == algorithms.FixedWindow && (req.Cost == 1 || req.Charge)
}

// nativeAll reports whether reqs go on the native path: all fixed windows.
func (r *Runner) nativeAll(reqs []backend.Request) bool {
	if r.native == nil {
		return false
	}
	for i := range reqs {
		if reqs[i].Rule.Algorithm != algorithms.FixedWindow {
			return false
		}
	}
	return true
}

// takeNative decides reqs (checked, all fixed windows) on the native path:
// all or nothing when all (a TakeAll), else the one Take in reqs. It is
// batched with concurrent calls where batching applies.
func (r *Runner) takeNative(ctx context.Context, reqs []backend.Request, all bool) (backend.Result, []backend.Result, error) {
	c := pendingPool.Get().(*pendingTake)
	c.reqs, c.all, c.ctx = append(c.reqs[:0], reqs...), all, ctx
	for i := range c.reqs {
		key, _, _ := rediswire.NativeKey(&c.reqs[i])
		c.keys = append(c.keys, key)
	}
	if b := r.batcherFor(kindNative, c.keys[0]); b != nil {
		return b.submit(ctx, c)
	}
	r.runNative(ctx, []*pendingTake{c})
	<-c.done
	res, each, err := c.res, c.each, c.err
	clear(c.reqs)
	clear(c.keys)
	*c = pendingTake{done: c.done, reqs: c.reqs[:0], keys: c.keys[:0]}
	pendingPool.Put(c)
	return res, each, err
}

// runNative sends the native calls of batch in one pipeline, then the
// refunds of those refused in another, and hands each call its decision.
func (r *Runner) runNative(ctx context.Context, batch []*pendingTake) {
	var incr nativeCalls
	for _, c := range batch {
		for i := range c.reqs {
			_, _, e := rediswire.NativeKey(&c.reqs[i])
			incr.add(c.keys[i], c.reqs[i].Cost, e)
		}
	}
	counts, errs, err := r.native.IncrExpire(ctx, incr.keys, incr.by, incr.exp)
	if err == nil && len(counts) != len(incr.keys) {
		err = fmt.Errorf("%w: %d counts for %d keys", rediswire.ErrBadReply, len(counts), len(incr.keys))
	}
	epochs := make([]int64, len(counts))
	for i, v := range counts {
		counts[i], epochs[i] = rediswire.WindowCount(v)
	}
	var refunds nativeCalls
	if err != nil {
		partialRefunds(&refunds, &incr, epochs, errs)
	}
	at := 0
	for _, c := range batch {
		first := at
		at += len(c.reqs)
		if err != nil {
			c.res, c.err = backend.Result{}, fmt.Errorf("%s: INCRBY: %w", r.name, err)
			continue
		}
		var callErrs []error
		if errs != nil {
			callErrs = errs[first:at]
		}
		admitted, callErr := r.nativeAdmitted(c, counts[first:at], callErrs)
		if callErr != nil || !admitted {
			// Give back every increment the call made: a refused (or
			// failed) call consumes nothing.
			for i := first; i < at; i++ {
				if (errs == nil || errs[i] == nil) && !c.reqs[i-first].Charge {
					refunds.add(incr.keys[i], incr.by[i], epochs[i])
				}
			}
		}
		if callErr != nil {
			c.res, c.err = backend.Result{}, callErr
			continue
		}
		c.res, c.each = nativeResult(c, counts[first:at], admitted)
		c.err = nil
	}
	r.refundNative(ctx, &refunds)
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// partialRefunds adds to refunds the increments of incr that counted in a
// pipeline that failed (the epochs of their counts and errs as IncrExpire
// returned them with its error): a failure of some keys (a cluster node
// down) fails every call, and what counted elsewhere is given back.
func partialRefunds(refunds, incr *nativeCalls, epochs []int64, errs []error) {
	if skipPartialRefunds.Load() || len(epochs) != len(incr.keys) || len(errs) != len(epochs) {
		return
	}
	for i := range epochs {
		if errs[i] == nil {
			refunds.add(incr.keys[i], incr.by[i], epochs[i])
		}
	}
}

// nativeCalls are the keys of a native pipeline, with each key's amount
// and, for increments its expiry (ms), for refunds the epoch it counted in.
type nativeCalls struct {
	keys    []string
	by, exp []int64
}

func (n *nativeCalls) add(key string, by, exp int64) {
	n.keys, n.by, n.exp = append(n.keys, key), append(n.by, by), append(n.exp, exp)
}

// nativeAdmitted reports whether every count of c's increments is within
// its limit, or the error of an increment that failed (errs, when not nil,
// holds one per request).
func (r *Runner) nativeAdmitted(c *pendingTake, counts []int64, errs []error) (bool, error) {
	var callErr error
	admitted := true
	for i := range c.reqs {
		if errs != nil && errs[i] != nil {
			callErr = fmt.Errorf("%s: INCRBY %s: %w", r.name, c.reqs[i].Rule.Algorithm, errs[i])
			continue
		}
		admitted = admitted && (c.reqs[i].Charge || counts[i] <= c.reqs[i].Rule.Limit)
	}
	return admitted, callErr
}

// refundNative gives back the refused increments, on a context of its own
// so that a caller's deadline cannot leave them taken. It waits for them
// until ctx ends, no longer: a slow refund must not hold a caller past its
// deadline (it goes on within RefundTimeout). A caller without a deadline
// waits for it, so that its next request finds the units back.
func (r *Runner) refundNative(ctx context.Context, refunds *nativeCalls) {
	if len(refunds.keys) == 0 || skipNativeRefunds.Load() {
		return
	}
	landed := make(chan struct{})
	parked, release := refundParked, refundRelease
	go func() {
		defer close(landed)
		if parked != nil {
			for range refunds.keys {
				parked <- struct{}{}
			}
			<-release
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RefundTimeout)
		defer cancel()
		if err := r.sendRefunds(rctx, refunds); err != nil {
			// The denials stand; the units stay taken until their
			// keys expire.
			r.failedRefunds.Add(uint64(len(refunds.keys)))
		}
		if parked != nil {
			for range refunds.keys {
				parked <- struct{}{}
			}
		}
	}()
	if waitRefunds.Load() {
		<-landed
		return
	}
	select {
	case <-landed:
	case <-ctx.Done():
	}
}

// sendRefunds runs refundWindows over refunds: in one call on one Redis,
// one per key on a cluster (the keys of a TakeAll can be in several
// slots).
func (r *Runner) sendRefunds(ctx context.Context, refunds *nativeCalls) error {
	args := make([]string, 0, 2*len(refunds.keys))
	for i := range refunds.keys {
		args = append(args, strconv.FormatInt(refunds.by[i], 10), strconv.FormatInt(refunds.exp[i], 10))
	}
	if !r.conn.Cluster() {
		_, _, _, err := r.eval(ctx, &refundWindows, refunds.keys, args, false, true)
		return err
	}
	var first error
	for i, k := range refunds.keys {
		if _, _, _, err := r.eval(ctx, &refundWindows, []string{k}, args[2*i:2*i+2], false, true); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// waitRefunds makes a caller wait for its refund whatever its deadline, as
// before refundNative stopped at the deadline: a control.
var waitRefunds atomic.Bool

// nativeResult is c's decision from its counts after the increments:
// admitted, or refused with each request's result as a Peek of its cost
// before the increments would give it.
func nativeResult(c *pendingTake, counts []int64, admitted bool) (backend.Result, []backend.Result) {
	var one [1]backend.Result
	results := one[:]
	if len(c.reqs) > 1 {
		results = make([]backend.Result, len(c.reqs))
	}
	for i := range c.reqs {
		results[i] = backend.ResultOf(c.reqs[i].Rule, nativeOutcome(&c.reqs[i], counts[i], admitted))
	}
	if !c.all {
		return results[0], nil
	}
	return backend.CombineEach(results)
}

// nativeOutcome is the outcome of req, whose window's count after its
// increment is count: when admitted, what it took; when refused, what a
// Peek of its cost would have said before the increment (Allowed when
// this limit alone would have let it pass). A count below zero (give backs
// beyond what was taken) is read as zero, as the script reads it.
func nativeOutcome(req *backend.Request, count int64, admitted bool) algorithms.Outcome {
	now, w, limit, cost := req.Millis(), req.Rule.Window.Milliseconds(), req.Rule.Limit, req.Cost
	finish := (now - now%w) + w - now
	before := max(count-cost, 0)
	if req.Charge {
		// Counted whatever the others decided (nothing gives it back).
		return algorithms.Outcome{Allowed: true, Remaining: max(limit-max(count, before+cost), 0), ResetAfter: finish}
	}
	if admitted {
		return algorithms.Outcome{Allowed: true, Remaining: min(max(limit-count, 0), limit-cost), ResetAfter: finish}
	}
	if cost > limit-before {
		return algorithms.Outcome{Remaining: max(limit-before, 0), RetryAfter: finish, ResetAfter: finish}
	}
	out := algorithms.Outcome{Allowed: true, Remaining: limit - before}
	if before > 0 {
		out.ResetAfter = finish
	}
	return out
}
