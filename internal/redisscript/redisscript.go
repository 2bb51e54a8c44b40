// Package redisscript is the one script runner behind both Redis stores
// (backend/goredisstore and backend/rueidisstore). A store only adapts its
// client library to Conn; validation, key names, the EVALSHA/EVAL policy
// and the Redis wire format (the scripts as sent, their ARGV and their
// replies: wire.go) all live here, once.
//
// The policy:
//
//   - Each algorithm's script (Script) is hashed once, when the
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
	"strconv"
	"sync/atomic"
	"time"

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
	// the source), keys and args, and returns the reply's integers. A
	// reply that is not an array of integers is an error wrapping
	// ErrBadReply. Unless cmd.ReadOnly, the command must be sent at most
	// once: no retry after it may have reached the server.
	Eval(ctx context.Context, cmd Command, script string, keys, args []string) ([]int64, error)
	// EvalWait is Eval followed, on the same connection and in the same
	// round trip, by WAIT replicas timeout. It returns the script's reply
	// and the number of replicas that acknowledged its writes.
	EvalWait(ctx context.Context, cmd Command, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error)
	// EvalBatch is Eval for the batch script (BatchScript),
	// whose reply may hold errors among its integers: errs is nil when it
	// holds none, else errs[i] is the error in place of vals[i] (and
	// vals[i] is 0). It is sent at most once, as a writing Eval is.
	EvalBatch(ctx context.Context, cmd Command, script string, keys, args []string) (vals []int64, errs []error, err error)
	// Del deletes key.
	Del(ctx context.Context, key string) error
	// IsNoScript reports whether err is the server's NOSCRIPT error.
	IsNoScript(err error) bool
	// Cluster reports whether the client talks to a Redis Cluster, where
	// the keys of one script must share a hash slot.
	Cluster() bool
}

// Ack configures replica-acknowledged admission. The zero value is off.
type Ack struct {
	// Replicas is how many replicas must acknowledge an admission; 0 is
	// off.
	Replicas int
	// Timeout bounds the wait for them (WAIT's timeout).
	Timeout time.Duration
	// OnShort decides admissions fewer replicas acknowledged.
	OnShort backend.OnShortAck
}

// Options configures a Runner.
type Options struct {
	// ServerTime makes the scripts read the Redis server's clock; requests'
	// Now is then ignored.
	ServerTime bool
	// Ack turns on replica-acknowledged admission.
	Ack Ack
	// Batch, when above 1, lets Take, Peek and TakeAll send up to Batch
	// concurrent requests in one script call (see batcher), per master on
	// a cluster whose Conn is a NodeLocator (see nodebatch.go). It applies
	// without Ack; Reset and everything of a lease (Takes and TakeAlls
	// holding a lease, Release, Renew) are always sent alone.
	Batch int
}

// DefaultBatch is the stores' default Options.Batch: 16 sliding-log steps
// hold Redis for about 0.1 ms (7 µs each).
const DefaultBatch = 16

// batchesInFlight is how many batches one runner keeps in flight: one being
// decided by Redis while the next is written, and more to cover the round
// trip.
const batchesInFlight = 4

type script struct {
	src, sha string
}

// Runner decides requests by running the algorithms' scripts through a
// Conn. It is safe for concurrent use when the Conn is.
type Runner struct {
	conn    Conn
	name    string
	opts    Options
	scripts map[algorithms.Name]*script
	multi   script
	// batchScripts are the batch scripts by kind, as sent to one Redis
	// ([0]) and to a cluster node ([1], nodebatch.go).
	batchScripts [2][kinds]script
	// local batches calls to a single-master Redis; batcher is its Takes'.
	// Both are nil when each call is sent alone.
	local   *batchers
	batcher *batcher
	// nodes batches calls per node on a Redis Cluster (nodebatch.go); nil
	// elsewhere.
	nodes *nodeBatchers

	failedRefunds atomic.Uint64
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// New returns a runner over conn. name starts its error messages (the
// store's package name).
func New(conn Conn, name string, opts Options) (*Runner, error) {
	if conn == nil {
		return nil, fmt.Errorf("%s: the Redis client is nil", name)
	}
	if opts.Ack.Replicas < 0 || (opts.Ack.Replicas > 0 && opts.Ack.Timeout < time.Millisecond) {
		return nil, fmt.Errorf("%s: replica acknowledgement needs replicas >= 0 and a timeout of at least 1ms (got %d, %v)",
			name, opts.Ack.Replicas, opts.Ack.Timeout)
	}
	if opts.Batch < 0 {
		return nil, fmt.Errorf("%s: batch size %d is below 1", name, opts.Batch)
	}
	if opts.Ack.Replicas > 0 && conn.Cluster() {
		return nil, fmt.Errorf("%s: replica acknowledgement (WAIT) needs a single-master client (standalone or sentinel); "+
			"a Redis Cluster client cannot send WAIT to the master that ran the script", name)
	}
	r := &Runner{conn: conn, name: name, opts: opts, scripts: map[algorithms.Name]*script{}, multi: newScript(MultiScript())}
	for k, src := range [kinds]string{kindTake: BatchScript(), kindPeek: PeekBatchScript(), kindGroup: GroupsScript()} {
		r.batchScripts[0][k] = newScript(src)
		r.batchScripts[1][k] = newScript(clusterBatchScript(src))
	}
	if opts.Batch > 1 && opts.Ack.Replicas == 0 && !conn.Cluster() {
		r.local = newBatchers(r, false, batchesInFlight)
		r.batcher = r.local[kindTake]
	}
	if loc, ok := conn.(NodeLocator); ok && opts.Batch > 1 && opts.Ack.Replicas == 0 && conn.Cluster() {
		r.nodes = &nodeBatchers{r: r, loc: loc}
	}
	for _, alg := range algorithms.Names() {
		src, err := Script(alg)
		if err != nil {
			return nil, err
		}
		s := newScript(src)
		r.scripts[alg] = &s
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
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	return r.takeOne(ctx, &req)
}

// takeOne takes a checked request, in a batch where batching applies.
// Lease takes go alone: the batch replies carry no lease ids.
func (r *Runner) takeOne(ctx context.Context, req *backend.Request) (backend.Result, error) {
	if !req.Rule.HoldsLeases() {
		if b := r.batcherFor(kindTake, Key(req.Key, req.Rule)); b != nil {
			return b.take(ctx, req)
		}
	}
	res, _, err := r.take(ctx, req)
	return res, err
}

// batcherFor returns the batcher of kind for calls on key (a TakeAll's
// first key; see takeAll for the others), or nil when the call goes alone.
func (r *Runner) batcherFor(kind batchKind, key string) *batcher {
	if r.local != nil {
		return r.local[kind]
	}
	if r.nodes != nil {
		if bs := r.nodes.batchersFor(key); bs != nil {
			return bs[kind]
		}
	}
	return nil
}

// batchScript returns the batch script of kind, in its cluster form when
// cluster.
func (r *Runner) batchScript(cluster bool, kind batchKind) *script {
	if cluster {
		return &r.batchScripts[1][kind]
	}
	return &r.batchScripts[0][kind]
}

// Peek implements backend.Store.Peek.
func (r *Runner) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	if b := r.batcherFor(kindPeek, Key(req.Key, req.Rule)); b != nil {
		return b.take(ctx, &req)
	}
	res, _, err := r.single(ctx, &req, ModePeek, r.now(&req), 0)
	return res, err
}

// Release implements backend.LeaseStore.Release: the script's refund mode,
// which removes the lease when it is still held and reports whether it
// was. It is sent once, as every writing call.
func (r *Runner) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if err := r.checkLease(&req); err != nil {
		return false, err
	}
	_, held, err := r.single(ctx, &req, ModeRefund, r.now(&req), lease)
	return held == 1, err
}

// GiveBack implements backend.UnitRefunder: the script's refund mode, at
// the window holding req.Now (backend.GiveBackWindow; with server time
// too, as the request names the window), then what a Peek reports. It is
// sent once, as every writing call.
func (r *Runner) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	at, err := backend.GiveBackWindow(req.Rule, req.Millis())
	if err != nil {
		return backend.Result{}, err
	}
	res, _, err := r.single(ctx, &req, ModeRefund, r.now(&req), at)
	return res, err
}

// Renew implements backend.LeaseStore.Renew: the script's renew mode,
// atomic on the server. With replica acknowledgement configured it waits
// for the replicas as a take does and reports Unconfirmed, but never turns
// a renewal into a denial (the lease was held either way).
func (r *Runner) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if err := r.checkLease(&req); err != nil {
		return backend.Result{}, err
	}
	res, _, err := r.single(ctx, &req, ModeRenew, r.now(&req), lease)
	return res, err
}

// checkLease validates a release or renewal.
func (r *Runner) checkLease(req *backend.Request) error {
	if err := backend.ValidateLease(req); err != nil {
		return err
	}
	return r.check(req)
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

// TakeAll implements backend.Store.TakeAll. When the keys can go in one
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
func (r *Runner) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, err
	}
	if err := r.check(&reqs[0]); err != nil {
		return backend.Result{}, err
	}
	if len(reqs) == 1 {
		return r.takeOne(ctx, &reqs[0])
	}
	keys := make([]string, len(reqs))
	for i := range reqs {
		keys[i] = Key(reqs[i].Key, reqs[i].Rule)
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
func (r *Runner) takeAllAlone(ctx context.Context, reqs []backend.Request, keys []string) (backend.Result, error) {
	if !r.conn.Cluster() || rediskey.SameSlot(keys) {
		return r.takeTogether(ctx, reqs, keys)
	}
	return r.takeInOrder(ctx, reqs)
}

// check validates a request and the time it can be sent with.
func (r *Runner) check(req *backend.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if !r.opts.ServerTime && req.Millis() > MaxTime {
		return fmt.Errorf("%w: time %v is after the latest time Redis stores accept (%d ms since the epoch)",
			algorithms.ErrInvalidRequest, req.Now, MaxTime)
	}
	return nil
}

// now is the time argument of req's scripts.
func (r *Runner) now(req *backend.Request) int64 {
	if r.opts.ServerTime {
		return ServerTime
	}
	return req.Millis()
}

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
	res.Each = nil // the admissions described there were rolled back
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
	res, _, err := r.single(ctx, req, ModeRefund, r.now(req), at)
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

// single runs req's script once in the given mode at now (at: a refund's
// record). It returns where an admission was recorded.
func (r *Runner) single(ctx context.Context, req *backend.Request, mode Mode, now, at int64) (backend.Result, int64, error) {
	s := r.scripts[req.Rule.Algorithm]
	keys := []string{Key(req.Key, req.Rule)}
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

// takeTogether decides reqs with the multi script.
func (r *Runner) takeTogether(ctx context.Context, reqs []backend.Request, keys []string) (backend.Result, error) {
	args := make([]string, 1, 1+4*len(reqs))
	args[0] = strconv.FormatInt(r.now(&reqs[0]), 10)
	for i := range reqs {
		args = MultiArgs(args, reqs[i].Rule, reqs[i].Cost)
	}
	reply, acked, cmd, err := r.eval(ctx, &r.multi, keys, args, true, true)
	if err != nil {
		return backend.Result{}, fmt.Errorf("%s: %s multi: %w", r.name, cmd, err)
	}
	if want := 1 + ReplyLen*len(reqs); len(reply) != want || reply[0] < 0 || reply[0] > 1 {
		return backend.Result{}, fmt.Errorf("%s: %s multi: %w: %d integers, want %d", r.name, cmd, ErrBadReply, len(reply), want)
	}
	results := make([]backend.Result, len(reqs))
	ats := make([]int64, len(reqs))
	for i := range reqs {
		vals := reply[1+ReplyLen*i : 1+ReplyLen*(i+1)]
		out, err := Decode(reqs[i].Rule, vals)
		if err != nil {
			return backend.Result{}, fmt.Errorf("%s: %s multi: request %d: %w", r.name, cmd, i, err)
		}
		if reply[0] == 1 && !out.Allowed {
			return backend.Result{}, fmt.Errorf("%s: %s multi: %w: request %d denied in an admitted reply", r.name, cmd, ErrBadReply, i)
		}
		results[i] = backend.ResultOf(reqs[i].Rule, out)
		ats[i] = vals[ReplyAt]
		if out.Allowed && reply[0] == 1 && reqs[i].Rule.HoldsLeases() {
			results[i].Lease = ats[i]
		}
	}
	res := backend.CombineEach(results)
	if res.Allowed && acked < int64(r.opts.Ack.Replicas) {
		res.Unconfirmed = true
		if r.opts.Ack.OnShort == backend.DenyUnconfirmed {
			return r.refuse(ctx, reqs, ats, res)
		}
	}
	return res, nil
}

// takeInOrder checks every request first (read-only) and returns the
// denial when one would be denied; otherwise it takes them one by one, and
// when one is denied after all (another caller got there first), it refunds
// the ones before it and peeks the ones after it.
func (r *Runner) takeInOrder(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	results := make([]backend.Result, len(reqs))
	all := true
	for i := range reqs {
		var err error
		if results[i], _, err = r.single(ctx, &reqs[i], ModePeek, r.now(&reqs[i]), 0); err != nil {
			return backend.Result{}, err
		}
		all = all && results[i].Allowed
	}
	if !all {
		return backend.CombineEach(results), nil
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
		// taken (safe, and they expire).
		errs := []error{takeErr}
		for j := range i {
			var err error
			if results[j], err = r.refund(ctx, &reqs[j], ats[j]); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return backend.Result{}, err
		}
		results[i] = res
		for j := i + 1; j < len(reqs); j++ {
			var err error
			if results[j], _, err = r.single(ctx, &reqs[j], ModePeek, r.now(&reqs[j]), 0); err != nil {
				return backend.Result{}, err
			}
		}
		return backend.CombineEach(results), nil
	}
	return backend.CombineEach(results), nil
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
