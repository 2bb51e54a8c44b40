// Package redisscript is the one script runner behind both Redis stores
// (backend/goredisstore and backend/rueidisstore). A store only adapts its
// client library to Conn; validation, key names, ARGV, the EVALSHA/EVAL
// policy and reply decoding all live here, once.
//
// The policy:
//
//   - Each algorithm's script (algorithms.LuaScript) is hashed once, when the
//     Runner is made. Calls send EVALSHA and fall back to EVAL only when the
//     server answers NOSCRIPT (after a restart, SCRIPT FLUSH, a failover, or
//     on a cluster node that never saw the script). NOSCRIPT proves the
//     script did not run, so the one re-send cannot count a request twice.
//   - Nothing else is ever re-sent. A writing script that timed out or lost
//     its connection may have run; sending it again could admit one request
//     twice. Conn implementations must keep their client library from
//     retrying it too (see Conn).
//   - Peek runs the same script in its read-only mode with EVALSHA_RO /
//     EVAL_RO, so it can be served by replicas; read-only calls may be
//     retried by the client library.
//   - A reply that is not exactly the four integers the scripts return, each
//     in range, is an error wrapping ErrBadReply, never a panic.
package redisscript

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediskey"
)

// ErrBadReply reports a script reply the runner cannot trust: not an array
// of four integers, or integers out of range. Errors wrap it.
var ErrBadReply = errors.New("limitkit: malformed reply from Redis script")

// Command is one command of the EVAL family.
type Command uint8

// The commands a Conn sends.
const (
	// EvalSHA runs a writing script by its SHA1 digest.
	EvalSHA Command = iota
	// Eval runs a writing script from its source.
	Eval
	// EvalSHARO runs a read-only call by digest; it may go to a replica.
	EvalSHARO
	// EvalRO runs a read-only call from source; it may go to a replica.
	EvalRO
)

var commandNames = [...]string{EvalSHA: "EVALSHA", Eval: "EVAL", EvalSHARO: "EVALSHA_RO", EvalRO: "EVAL_RO"}

// String returns the command's name as Redis spells it.
func (c Command) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	return fmt.Sprintf("Command(%d)", uint8(c))
}

// ReadOnly reports whether the command runs a script in read-only mode; only
// those may be retried after a timeout or a dropped connection.
func (c Command) ReadOnly() bool { return c == EvalSHARO || c == EvalRO }

// BySHA reports whether the command names its script by SHA1 digest rather
// than sending the source.
func (c Command) BySHA() bool { return c == EvalSHA || c == EvalSHARO }

// Conn is a Redis client library as the runner uses it.
type Conn interface {
	// Eval sends cmd with script (the SHA1 digest when cmd.BySHA, else
	// the source), the single key and args, and returns the reply's
	// integers. A reply that is not an array of integers is an error
	// wrapping ErrBadReply. Unless cmd.ReadOnly, the command must be sent
	// at most once: no retry after it may have reached the server.
	Eval(ctx context.Context, cmd Command, script, key string, args []string) ([]int64, error)
	// Del deletes key.
	Del(ctx context.Context, key string) error
	// IsNoScript reports whether err is the server's NOSCRIPT error.
	IsNoScript(err error) bool
}

type script struct {
	src, sha string
}

// Runner decides requests by running the algorithms' scripts through a
// Conn. It is safe for concurrent use when the Conn is.
type Runner struct {
	conn       Conn
	name       string
	serverTime bool
	scripts    map[algorithms.Name]*script
}

// New returns a runner over conn. name starts its error messages (the
// store's package name). With serverTime, the scripts read the Redis
// server's clock and requests' Now is ignored.
func New(conn Conn, name string, serverTime bool) (*Runner, error) {
	if conn == nil {
		return nil, fmt.Errorf("%s: the Redis client is nil", name)
	}
	r := &Runner{conn: conn, name: name, serverTime: serverTime, scripts: map[algorithms.Name]*script{}}
	for _, alg := range algorithms.Names() {
		src, err := algorithms.LuaScript(alg)
		if err != nil {
			return nil, err
		}
		sum := sha1.Sum([]byte(src))
		r.scripts[alg] = &script{src: src, sha: hex.EncodeToString(sum[:])}
	}
	return r, nil
}

// SHA1 returns the SHA1 digest of alg's script as EVALSHA takes it, or ""
// for an unknown algorithm.
func (r *Runner) SHA1(alg algorithms.Name) string {
	if s := r.scripts[alg]; s != nil {
		return s.sha
	}
	return ""
}

// Key returns the Redis key holding key's state under alg.
func Key(key backend.Key, rule algorithms.Rule) string {
	return rediskey.Build(key.Prefix, key.ID, rule.KeySuffix())
}

// Take implements backend.Store.Take.
func (r *Runner) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return r.step(ctx, &req, true)
}

// Peek implements backend.Store.Peek.
func (r *Runner) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return r.step(ctx, &req, false)
}

// Reset implements backend.Store.Reset: it deletes the key.
func (r *Runner) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if r.scripts[rule.Algorithm] == nil {
		return rule.Validate() // names the unknown algorithm
	}
	if err := r.conn.Del(ctx, Key(key, rule)); err != nil {
		return fmt.Errorf("%s: DEL: %w", r.name, err)
	}
	return nil
}

func (r *Runner) step(ctx context.Context, req *backend.Request, take bool) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	now := algorithms.LuaServerTime
	if !r.serverTime {
		now = req.Millis()
		if now > algorithms.MaxLuaTime {
			return backend.Result{}, fmt.Errorf("%w: time %v is after the latest time Redis stores accept (%d ms since the epoch)",
				algorithms.ErrInvalidRequest, req.Now, algorithms.MaxLuaTime)
		}
	}
	s := r.scripts[req.Rule.Algorithm]
	key := Key(req.Key, req.Rule)
	args := req.Rule.LuaArgs(now, req.Cost, take)
	bySHA, bySource := EvalSHA, Eval
	if !take {
		bySHA, bySource = EvalSHARO, EvalRO
	}
	cmd := bySHA
	reply, err := r.conn.Eval(ctx, cmd, s.sha, key, args)
	if err != nil && r.conn.IsNoScript(err) {
		// The script did not run: sending it with its source is safe.
		cmd = bySource
		reply, err = r.conn.Eval(ctx, cmd, s.src, key, args)
	}
	if err != nil {
		return backend.Result{}, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	out, err := Decode(req.Rule, reply)
	if err != nil {
		return backend.Result{}, fmt.Errorf("%s: %s %s: %w", r.name, cmd, req.Rule.Algorithm, err)
	}
	return backend.ResultOf(req.Rule, out), nil
}

// Decode checks a script's reply for rule and converts it: exactly
// algorithms.LuaReplyLen integers, allowed 0 or 1, remaining in 0..limit,
// retry-after and reset-after in 0..2^53, retry-after 0 when allowed.
// Anything else is an error wrapping ErrBadReply.
func Decode(rule algorithms.Rule, reply []int64) (algorithms.Outcome, error) {
	if len(reply) != algorithms.LuaReplyLen {
		return algorithms.Outcome{}, fmt.Errorf("%w: %d integers, want %d", ErrBadReply, len(reply), algorithms.LuaReplyLen)
	}
	allowed, remaining := reply[algorithms.LuaReplyAllowed], reply[algorithms.LuaReplyRemaining]
	retry, reset := reply[algorithms.LuaReplyRetryAfter], reply[algorithms.LuaReplyResetAfter]
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
