package redisengine

// One script call: the EVALSHA/EVAL policy and the check of its reply.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// take runs req's script in take mode, waits for replicas when configured,
// and applies the short-acknowledgement policy. It returns where the
// admission was recorded, for a refund.
func (r *Runner) take(ctx context.Context, req *backend.Request) (backend.Result, int64, error) {
	res, at, err := r.single(ctx, req, rediswire.ModeTake, r.now(req), 0)
	// A charge is not refused for want of replicas: its cost was incurred.
	if err != nil || !res.Unconfirmed || r.opts.Ack.OnShort == backend.AdmitUnconfirmed || req.Charge {
		return res, at, err
	}
	res, err = r.refuse(ctx, []backend.Request{*req}, []int64{at}, res)
	return res, at, err
}

// single runs req's script once in the given mode at now (at: a refund's
// record). It returns where an admission was recorded.
func (r *Runner) single(ctx context.Context, req *backend.Request, mode rediswire.Mode, now, at int64) (backend.Result, int64, error) {
	s := r.scripts[req.Rule.Algorithm]
	state := r.stateKey(req)
	keys := []string{state}
	var args []string
	switch mode {
	case rediswire.ModeRefund:
		keys[0] = r.refundKey(req, state, at)
		args = rediswire.RefundArgs(req.Rule, now, at, req.Cost)
	case rediswire.ModeRenew:
		args = rediswire.RenewArgs(req.Rule, now, at, req.Cost)
	default:
		var err error
		if args, err = rediswire.Args(req.Rule, now, wireCost(req), mode); err != nil {
			return backend.Result{}, 0, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	grants := mode == rediswire.ModeTake || mode == rediswire.ModeRenew
	reply, acked, cmd, err := r.eval(ctx, s, keys, args, grants, mode != rediswire.ModePeek)
	if err != nil {
		return backend.Result{}, 0, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	out, err := rediswire.Decode(req.Rule, reply)
	if err != nil {
		return backend.Result{}, 0, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	if mode == rediswire.ModeRefund && keys[0] != state && reply[rediswire.ReplyAt] != at && !skipRefundPeek.Load() {
		// The refund went to the key of an earlier window than the one
		// now is in (its reply read that key): report the window of now.
		return r.single(ctx, req, rediswire.ModePeek, now, 0)
	}
	res := backend.ResultOf(req.Rule, out)
	res.Unconfirmed = out.Allowed && grants && acked < int64(r.opts.Ack.Replicas)
	if out.Allowed && grants && req.Rule.HoldsLeases() {
		res.Lease = reply[rediswire.ReplyAt]
	}
	return res, reply[rediswire.ReplyAt], nil
}

// eval sends one script, by digest and, after NOSCRIPT only, by source. A
// writing call waits for replicas when configured (wait).
func (r *Runner) eval(ctx context.Context, s *script, keys, args []string, wait, write bool) ([]int64, int64, Command, error) {
	var reply []int64
	var acked int64
	cmd, err := r.send(s, write, func(cmd Command, sc string) error {
		var err error
		if wait && r.opts.Ack.Replicas > 0 {
			reply, acked, err = r.conn.EvalWait(ctx, cmd, sc, keys, args, r.opts.Ack.Replicas, r.opts.Ack.Timeout)
		} else {
			reply, err = r.conn.Eval(ctx, cmd, sc, keys, args)
		}
		return err
	})
	return reply, acked, cmd, err
}

// send calls do with the script's digest and, when the server answers
// NOSCRIPT (which proves the script did not run), once more with its
// source. It returns the command do was last called with.
func (r *Runner) send(s *script, write bool, do func(cmd Command, script string) error) (Command, error) {
	bySHA, bySource := EvalSHARO, EvalRO
	if write {
		bySHA, bySource = EvalSHA, Eval
	}
	err := do(bySHA, s.sha)
	if err != nil && r.conn.IsNoScript(err) {
		return bySource, do(bySource, s.src)
	}
	return bySHA, err
}

// wireCost is the cost argument of req's scripts: a charge
// (backend.Request.Charge) goes as its cost negated, which every step
// that records charges reads as one.
func wireCost(req *backend.Request) int64 {
	if req.Charge {
		return -req.Cost
	}
	return req.Cost
}

// skipRefundPeek makes a refund of an earlier window report what its
// script read (that window's key): a control.
var skipRefundPeek atomic.Bool

// stateKey is the key req's script is called with (rediswire.StateKey):
// under server time a fixed window's library key (Key), as the window
// holding the server's time is known only to the script.
func (r *Runner) stateKey(req *backend.Request) string {
	if r.opts.ServerTime && req.Exact.Base == "" {
		return rediswire.Key(req.Key, req.Rule)
	}
	return rediswire.StateKey(req)
}

// refundKey is the key of a refund of req recorded at at, for a script
// called with key (stateKey): rediswire.RefundKey, except for a give back
// (at < 0), which counts at the script's now: key.
func (r *Runner) refundKey(req *backend.Request, key string, at int64) string {
	if at < 0 {
		return key
	}
	return rediswire.RefundKey(req, at)
}
