// Package redisengine is the one engine behind both Redis stores
// (backend/goredisstore and backend/rueidisstore). A store only adapts its
// client library to Conn; validation, the EVALSHA/EVAL policy, batching,
// the native fixed-window path and refunds all live here, once. What goes
// on the wire (key names, the scripts as sent, their ARGV and the reply
// checks) is internal/rediswire, which tools outside backend/ read too.
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
//   - Fixed windows go on native commands where nothing needs a script
//     (native.go): INCRBY and PEXPIRE, sent once, never retried.
package redisengine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

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

	// native decides fixed windows with native commands (native.go); nil
	// when they go by script.
	native NativeConn

	failedRefunds atomic.Uint64
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// New returns a runner over conn. name starts its error messages (the
// store's package name).
func New(conn Conn, name string, opts Options) (*Runner, error) {
	if err := checkOptions(conn, name, opts); err != nil {
		return nil, err
	}
	r := &Runner{conn: conn, name: name, opts: opts, scripts: map[algorithms.Name]*script{}, multi: newScript(rediswire.MultiScript())}
	for k, src := range [kinds]string{kindTake: rediswire.BatchScript(), kindPeek: rediswire.PeekBatchScript(), kindGroup: rediswire.GroupsScript()} {
		r.batchScripts[0][k] = newScript(src)
		r.batchScripts[1][k] = newScript(rediswire.ClusterBatchScript(src))
	}
	for _, alg := range algorithms.Names() {
		src, err := rediswire.Script(alg)
		if err != nil {
			return nil, err
		}
		s := newScript(src)
		r.scripts[alg] = &s
	}
	r.choosePaths()
	return r, nil
}

// checkOptions refuses a nil conn and options that cannot work together.
func checkOptions(conn Conn, name string, opts Options) error {
	if conn == nil {
		return fmt.Errorf("%s: the Redis client is nil", name)
	}
	if opts.Ack.Replicas < 0 || (opts.Ack.Replicas > 0 && opts.Ack.Timeout < time.Millisecond) {
		return fmt.Errorf("%s: replica acknowledgement needs replicas >= 0 and a timeout of at least 1ms (got %d, %v)",
			name, opts.Ack.Replicas, opts.Ack.Timeout)
	}
	if opts.Batch < 0 {
		return fmt.Errorf("%s: batch size %d is below 1", name, opts.Batch)
	}
	if opts.Ack.Replicas > 0 && conn.Cluster() {
		return fmt.Errorf("%s: replica acknowledgement (WAIT) needs a single-master client (standalone or sentinel); "+
			"a Redis Cluster client cannot send WAIT to the master that ran the script", name)
	}
	return nil
}

// choosePaths turns on what the options and the connection allow:
// batching (per master on a cluster whose Conn locates nodes) and the
// native fixed-window path. Replica acknowledgement turns all three off.
func (r *Runner) choosePaths() {
	if r.opts.Ack.Replicas > 0 {
		return
	}
	batching := r.opts.Batch > 1
	if batching && !r.conn.Cluster() {
		r.local = newBatchers(r, false, batchesInFlight)
		r.batcher = r.local[kindTake]
	}
	if nc, ok := r.conn.(NativeConn); ok && !r.opts.ServerTime {
		r.native = nc
	}
	if loc, ok := r.conn.(NodeLocator); ok && batching && r.conn.Cluster() {
		r.nodes = &nodeBatchers{r: r, loc: loc}
	}
}

// SHA1 returns the SHA1 digest of alg's script as EVALSHA takes it, or ""
// for an unknown algorithm.
func (r *Runner) SHA1(alg algorithms.Name) string {
	if s := r.scripts[alg]; s != nil {
		return s.sha
	}
	return ""
}

// Take implements backend.Store.Take.
func (r *Runner) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := r.check(&req); err != nil {
		return backend.Result{}, err
	}
	return r.takeOne(ctx, &req)
}

// takeOne takes a checked request, in a batch where batching applies.
// Lease takes go alone: the batch replies carry no lease ids. A fixed
// window of one unit goes on the native path where it applies (native.go;
// see nativeTake).
func (r *Runner) takeOne(ctx context.Context, req *backend.Request) (backend.Result, error) {
	if nativeTake(r, req) {
		res, _, err := r.takeNative(ctx, []backend.Request{*req}, false)
		return res, err
	}
	if !req.Rule.HoldsLeases() {
		if b, key := r.batcherOf(kindTake, req); b != nil {
			return b.take(ctx, req, key)
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

// batcherOf is batcherFor for one request, building its key only where the
// batcher depends on it (a cluster's are per node). key is that key, ""
// when it was not needed: the request's key is built once per call.
func (r *Runner) batcherOf(kind batchKind, req *backend.Request) (b *batcher, key string) {
	if r.local != nil {
		return r.local[kind], ""
	}
	if r.nodes != nil {
		key = r.stateKey(req)
		if bs := r.nodes.batchersFor(key); bs != nil {
			return bs[kind], key
		}
	}
	return nil, ""
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
	if b, key := r.batcherOf(kindPeek, &req); b != nil {
		return b.take(ctx, &req, key)
	}
	res, _, err := r.single(ctx, &req, rediswire.ModePeek, r.now(&req), 0)
	return res, err
}

// Reset implements backend.Store.Reset: it deletes the key.
func (r *Runner) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if r.scripts[rule.Algorithm] == nil {
		return rule.Validate() // names the unknown algorithm
	}
	keys := []string{rediswire.Key(key, rule)}
	if rule.PerWindow() {
		at, err := r.resetTime(ctx, keys[0], now)
		if err != nil {
			return err
		}
		keys = append(keys, fixedWindowKeys(at, keys[0], rule)...)
	}
	if err := r.conn.Del(ctx, keys[0]); err != nil {
		return fmt.Errorf("%s: DEL: %w", r.name, err)
	}
	return r.resetWindows(ctx, keys[1:])
}

// resetWindowKeys moves fixed window counts to their next epoch with a
// count of 0 (rediswire.EpochBase) rather than deleting them, so that a
// refund in flight gives back nothing to the requests made after the
// Reset.
var resetWindowKeys = newScript(rediswire.ResetWindowScript)

// resetByDelete makes Reset delete the window keys, as before epochs: a
// control.
var resetByDelete = false

// resetWindows resets the fixed window counts keys (of one key: one slot).
func (r *Runner) resetWindows(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if resetByDelete {
		for _, k := range keys {
			if err := r.conn.Del(ctx, k); err != nil {
				return fmt.Errorf("%s: DEL: %w", r.name, err)
			}
		}
		return nil
	}
	if _, _, _, err := r.eval(ctx, &resetWindowKeys, keys, nil, false, true); err != nil {
		return fmt.Errorf("%s: resetting fixed windows: %w", r.name, err)
	}
	return nil
}

// fixedWindowKeys returns the keys of a fixed window's counts (its key
// then ':' and a window's start) that Reset deletes: the windows before,
// at and after the time of the reset, where the
// requests of a fleet whose clocks differ by less than a window count.
// (The key the script used before the counts had a key per window, key
// itself, is deleted too.)
func fixedWindowKeys(now int64, key string, rule algorithms.Rule) []string {
	w := rule.Window.Milliseconds()
	if w <= 0 || now < 0 {
		return nil // Reset takes any rule of the algorithm: no window, no window keys
	}
	start := now - now%w
	keys := make([]string, 0, 3)
	for _, s := range [...]int64{start - w, start, start + w} {
		if s >= 0 {
			keys = append(keys, key+":"+strconv.FormatInt(s, 10))
		}
	}
	return keys
}

// serverTimeScript reads the server's clock in ms. It names the key whose
// windows a Reset deletes, so that a Cluster runs it on the key's master,
// whose clock its decisions read; it does not touch it.
var serverTimeScript = newScript(`local t = redis.call('TIME')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}`)

// resetTime is the time (ms) around which Reset deletes a fixed window's
// keys: the reset's time (now, the caller's), or under server time the
// server's, which is the time its decisions count at (issue 43: a local
// clock 150 s off deleted none of them).
func (r *Runner) resetTime(ctx context.Context, key string, now time.Time) (int64, error) {
	if !r.opts.ServerTime {
		return now.UnixMilli(), nil
	}
	s := serverTimeScript
	reply, _, _, err := r.eval(ctx, &s, []string{key}, nil, false, false)
	if err != nil {
		return 0, fmt.Errorf("%s: reading the server's time for Reset: %w", r.name, err)
	}
	if len(reply) != 1 {
		return 0, fmt.Errorf("%w: TIME gave %d values", rediswire.ErrBadReply, len(reply))
	}
	return reply[0], nil
}

// check validates a request and the time it can be sent with.
func (r *Runner) check(req *backend.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if r.opts.ServerTime && req.Exact.Base != "" {
		return fmt.Errorf("%w: an exact key (backend.ExactKey) names its window by the request's time; a store with server time cannot use it",
			algorithms.ErrInvalidRequest)
	}
	if !r.opts.ServerTime && req.Millis() > rediswire.MaxTime {
		return fmt.Errorf("%w: time %v is after the latest time Redis stores accept (%d ms since the epoch)",
			algorithms.ErrInvalidRequest, req.Now, rediswire.MaxTime)
	}
	return nil
}

// now is the time argument of req's scripts.
func (r *Runner) now(req *backend.Request) int64 {
	if r.opts.ServerTime {
		return rediswire.ServerTime
	}
	return req.Millis()
}
