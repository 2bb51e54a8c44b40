package redisscript

// One script call: the EVALSHA/EVAL policy and the check of its reply.

import (
	"context"
	"fmt"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// take runs req's script in take mode, waits for replicas when configured,
// and applies the short-acknowledgement policy. It returns where the
// admission was recorded, for a refund.
func (r *Runner) take(ctx context.Context, req *backend.Request) (backend.Result, int64, error) {
	res, at, err := r.single(ctx, req, ModeTake, r.now(req), 0)
	if err != nil || !res.Unconfirmed || r.opts.Ack.OnShort == backend.AdmitUnconfirmed {
		return res, at, err
	}
	res, err = r.refuse(ctx, []backend.Request{*req}, []int64{at}, res)
	return res, at, err
}

// single runs req's script once in the given mode at now (at: a refund's
// record). It returns where an admission was recorded.
func (r *Runner) single(ctx context.Context, req *backend.Request, mode Mode, now, at int64) (backend.Result, int64, error) {
	s := r.scripts[req.Rule.Algorithm]
	keys := []string{StateKey(req)}
	var args []string
	switch mode {
	case ModeRefund:
		args = RefundArgs(req.Rule, now, at, req.Cost)
	case ModeRenew:
		args = RenewArgs(req.Rule, now, at, req.Cost)
	default:
		var err error
		if args, err = Args(req.Rule, now, req.Cost, mode); err != nil {
			return backend.Result{}, 0, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	grants := mode == ModeTake || mode == ModeRenew
	reply, acked, cmd, err := r.eval(ctx, s, keys, args, grants, mode != ModePeek)
	if err != nil {
		return backend.Result{}, 0, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	out, err := Decode(req.Rule, reply)
	if err != nil {
		return backend.Result{}, 0, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	res := backend.ResultOf(req.Rule, out)
	res.Unconfirmed = out.Allowed && grants && acked < int64(r.opts.Ack.Replicas)
	if out.Allowed && grants && req.Rule.HoldsLeases() {
		res.Lease = reply[ReplyAt]
	}
	return res, reply[ReplyAt], nil
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

// Decode checks a script's reply for one request of rule and converts it:
// exactly ReplyLen integers, allowed 0 or 1, remaining in
// 0..limit, retry-after and reset-after in 0..2^53, retry-after 0 when
// allowed, the record point >= 0. Anything else is an error wrapping
// ErrBadReply.
func Decode(rule algorithms.Rule, reply []int64) (algorithms.Outcome, error) {
	if len(reply) != ReplyLen {
		return algorithms.Outcome{}, fmt.Errorf("%w: %d integers, want %d", ErrBadReply, len(reply), ReplyLen)
	}
	if at := reply[ReplyAt]; at < 0 || at > algorithms.MaxLimit {
		return algorithms.Outcome{}, fmt.Errorf("%w: record point %d is out of range", ErrBadReply, at)
	}
	return decodeOutcome(rule, reply)
}

// decodeOutcome checks and converts the four integers of one outcome.
func decodeOutcome(rule algorithms.Rule, reply []int64) (algorithms.Outcome, error) {
	allowed, remaining := reply[ReplyAllowed], reply[ReplyRemaining]
	retry, reset := reply[ReplyRetryAfter], reply[ReplyResetAfter]
	switch {
	case allowed != 0 && allowed != 1:
		return algorithms.Outcome{}, fmt.Errorf("%w: allowed is %d, want 0 or 1", ErrBadReply, allowed)
	case remaining < 0 || remaining > rule.Limit:
		return algorithms.Outcome{}, fmt.Errorf("%w: remaining %d is outside 0..%d", ErrBadReply, remaining, rule.Limit)
	case retry < 0 || retry > algorithms.MaxLimit || (allowed == 1 && retry != 0):
		return algorithms.Outcome{}, fmt.Errorf("%w: retry-after %d ms is out of range (allowed %d)", ErrBadReply, retry, allowed)
	case reset < 0 || reset > algorithms.MaxLimit:
		return algorithms.Outcome{}, fmt.Errorf("%w: reset-after %d ms is out of range", ErrBadReply, reset)
	}
	return algorithms.Outcome{Allowed: allowed == 1, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}, nil
}
