// Package rueidisstore is a backend.Store in Redis, through
// github.com/redis/rueidis: a single server, Redis Cluster or a sentinel
// set, whichever rueidis.Client the caller already has.
//
// Each decision is one Lua script (the algorithm's Lua twin, see package
// algorithms) run atomically by Redis on one key, so concurrent callers in
// any number of processes never admit more than the limit. Fixed windows
// are counted with native commands instead (a Take of one unit, and a
// TakeAll of fixed windows only): INCRBY and PEXPIRE on a key per window,
// pipelined, admitted when every count after its increment is within its
// limit, a refused request's increments given back (a script that finds them) before
// it returns; never over the limit, though a concurrent request can be
// refused while a refund is in flight. Server time and replica
// acknowledgement keep them on the script (docs/redis.md). Keys are
// prefix + "{" + id + "}" + suffix; ids that are huge, contain braces or
// start with '#' are replaced by their SHA-256 digest, so every id works,
// stays in one cluster slot and keeps a bounded key size.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	store, err := rueidisstore.New(client)
//
// The store never builds, configures or closes the client. Calls from many
// goroutines share the client's connections through rueidis'
// auto-pipelining; leave it on (do not set DisableAutoPipelining), it is
// what makes this store fast under concurrency.
//
// # Retries
//
// rueidis retries only commands it marks read-only; EVALSHA and EVAL are
// not, so a writing script that timed out or lost its connection is never
// re-sent by rueidis (it is re-sent after a cluster MOVED/ASK redirection,
// which proves it did not run). The store's own runner re-sends a script
// only after NOSCRIPT, which proves it did not run. Peek's EVALSHA_RO is
// read-only and may be retried. One exception in rueidis: with
// ClientOption.ConnLifetime set, a connection that expires and then breaks
// while a script is in flight reports it as expired and rueidis re-sends
// it, which could count that request twice; leave ConnLifetime unset for
// clients given to this store.
//
// # Batching
//
// Concurrent Takes on one store travel together: up to DefaultBatch of them
// in one call of a batch script, which decides them one after the other,
// each as atomically as a call of its own (see WithBatching). Nothing waits
// for a batch to fill: a Take that finds a free slot sends at once, and
// those arriving meanwhile go in the next call. WithReplicaAck sends each
// Take alone.
//
// On a Redis Cluster, Takes are batched per master: a batch holds keys of
// several slots of one master, declares only its first key (a script's
// declared keys must share a slot; one without flags, as limitkit's are,
// may touch other keys its node serves) and passes the others as
// arguments. A request whose slot has moved meanwhile is refused by the
// node before it writes anything ("non local key") and is sent again
// alone, following MOVED/ASK.
//
// # Time
//
// By default the script decides at the request's Now, the limiter's clock.
// WithServerTime makes the scripts read the Redis server's clock instead,
// for fleets whose clocks cannot be trusted; that time cannot be faked in
// tests. For a clock that follows the server's while staying local, see
// clock.NewOffset with ServerTime as its probe.
package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/internal/redisopt"
	"github.com/limitkit/limitkit/internal/option"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// Store is a backend.Store in Redis. It is safe for concurrent use.
type Store struct {
	runner *redisengine.Runner
	slots  *slotMap // nil unless a cluster client
}

var (
	_ backend.LeaseStore      = (*Store)(nil)
	_ backend.NodeLocator     = (*Store)(nil)
	_ backend.ContextHonourer = (*Store)(nil)
	_ backend.RefundCounter   = (*Store)(nil)
	_ backend.UnitRefunder    = (*Store)(nil)
	_ backend.AckWaiter       = (*Store)(nil)
)

// New returns a store that keeps its state in Redis through client, which
// the caller keeps owning (New does not contact the server).
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("rueidisstore: the client is nil")
	}
	var o options
	if err := option.Apply(&o, opts); err != nil {
		return nil, fmt.Errorf("rueidisstore: %w", err)
	}
	ropts, err := redisopt.Resolve("rueidisstore", o.redis)
	if err != nil {
		return nil, err
	}
	var slots *slotMap
	if client.Mode() == rueidis.ClientModeCluster {
		slots = &slotMap{client: client}
	}
	r, err := redisengine.New(conn{client, slots}, "rueidisstore", ropts)
	if err != nil {
		return nil, err
	}
	return &Store{runner: r, slots: slots}, nil
}

// NodeOf returns the address of the cluster master that owns key's hash
// slot, or "" for a single-master client (backend.NodeLocator: package
// fallback keeps a breaker per node). rueidis does not share its slot map,
// so the store keeps a copy from CLUSTER SLOTS, refreshed in the background
// every second while used and soon after an error; NodeOf never waits for
// it, and returns "" until the first copy arrives.
func (s *Store) NodeOf(_ context.Context, key backend.Key) string {
	if s.slots == nil {
		return ""
	}
	// The slot depends on the hash tag alone.
	return s.slots.nodeOf(rediswire.Build("", key.ID, ""))
}

// NodeOfRequest implements backend.RequestLocator: the master of the key
// req writes, an exact key's own (backend.ExactKey) or Key's.
func (s *Store) NodeOfRequest(ctx context.Context, req *backend.Request) string {
	if s.slots == nil || req.Exact.Base == "" {
		return s.NodeOf(ctx, req.Key)
	}
	return s.slots.nodeOf(rediswire.StateKey(req))
}

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.runner.Take(ctx, req)
}

// Peek implements backend.Store. It runs read-only (EVALSHA_RO), so a client
// that sends read-only commands to replicas may serve it from one.
func (s *Store) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.runner.Peek(ctx, req)
}

// TakeAll implements backend.Store. Keys in one hash slot (or any keys on a
// single-master client) are decided by one atomic script. Keys of a cluster
// in different slots are checked, then taken in the order given, and the
// earlier ones refunded if a later one is denied after all: never over a
// limit, but while a refund is pending other callers can be denied.
// Refunds run even when ctx has ended; one that fails leaves its units
// taken until they expire (see FailedRefunds).
func (s *Store) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	return s.runner.TakeAll(ctx, reqs)
}

// TakeEach implements backend.EachTaker: TakeAll, with every request's
// own result from the same call (none after admissions rolled back for
// want of replicas).
func (s *Store) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	return s.runner.TakeEach(ctx, reqs)
}

// Release implements backend.LeaseStore: one script removes the lease if
// it is still held and reports whether it was. It is sent once (never
// retried), as every writing call.
func (s *Store) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	return s.runner.Release(ctx, req, lease)
}

// GiveBack implements backend.UnitRefunder: one script gives back up to
// req.Cost of the newest units counted at req.Now (see
// algorithms.Rule.GiveBack) and reports what a Peek then reports. It is
// sent once (never retried).
func (s *Store) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.runner.GiveBack(ctx, req)
}

// Renew implements backend.LeaseStore: one script checks that the lease is
// held and records it again under a new id, atomically.
func (s *Store) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	return s.runner.Renew(ctx, req, lease)
}

// HonoursContext reports true: rueidis returns once a call's context ends.
// fallback.New calls such a store directly, without a goroutine per call.
func (s *Store) HonoursContext() bool { return true }

// FailedRefunds counts the compensating refunds that failed: of a TakeAll
// over keys in different cluster slots when a later key denied, or of an
// admission too few replicas acknowledged (WithReplicaAck with
// backend.DenyUnconfirmed). Refunds run even after the caller's context has
// ended, within a second of their own; one that fails leaves its units
// taken until they expire. fallback.Store.Stats reports it too.
func (s *Store) FailedRefunds() uint64 { return s.runner.FailedRefunds() }

// ReplicaAckTimeout implements backend.AckWaiter: WithReplicaAck's
// timeout, 0 without it. fallback.New fits its deadline around it.
func (s *Store) ReplicaAckTimeout() time.Duration { return s.runner.AckTimeout() }

// Reset implements backend.Store.
func (s *Store) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	return s.runner.Reset(ctx, key, rule, now)
}

// ServerTime returns a probe that reads the Redis server's clock (TIME), for
// clock.NewOffset.
func ServerTime(client rueidis.Client) func(context.Context) (time.Time, error) {
	return func(ctx context.Context) (time.Time, error) {
		parts, err := client.Do(ctx, client.B().Time().Build()).AsStrSlice()
		if err != nil {
			return time.Time{}, fmt.Errorf("rueidisstore: TIME: %w", err)
		}
		if len(parts) != 2 {
			return time.Time{}, fmt.Errorf("rueidisstore: TIME: %w: %d parts, want 2", rediswire.ErrBadReply, len(parts))
		}
		sec, err1 := strconv.ParseInt(parts[0], 10, 64)
		usec, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return time.Time{}, fmt.Errorf("rueidisstore: TIME: %w: %v", rediswire.ErrBadReply, err)
		}
		return time.Unix(sec, usec*1000), nil
	}
}

// conn adapts a rueidis client to the script runner.
type conn struct {
	c     rueidis.Client
	slots *slotMap // nil unless a cluster client
}

// failed brings the slot map's refresh closer after an error that is not
// the script's own.
func (a conn) failed(err error) {
	if a.slots == nil || err == nil {
		return
	}
	if e, ok := rueidis.IsRedisErr(err); ok {
		_, moved := e.IsMoved()
		_, ask := e.IsAsk()
		// READONLY: a master became a replica (a failover): the map is stale.
		if !moved && !ask && !e.IsClusterDown() && !e.IsTryAgain() && !strings.HasPrefix(e.Error(), "READONLY") {
			return // the script's own error, or NOSCRIPT: the map is fine
		}
	}
	a.slots.failed()
}

// evalCmd builds cmd as a rueidis command. rueidis never retries a
// command that is not read-only, so a writing script is sent at most once.
func (a conn) evalCmd(cmd redisengine.Command, script string, keys, args []string) (rueidis.Completed, error) {
	b := a.c.B()
	n := int64(len(keys))
	switch cmd {
	case redisengine.EvalSHA:
		return b.Evalsha().Sha1(script).Numkeys(n).Key(keys...).Arg(args...).Build(), nil
	case redisengine.Eval:
		return b.Eval().Script(script).Numkeys(n).Key(keys...).Arg(args...).Build(), nil
	case redisengine.EvalSHARO:
		return b.EvalshaRo().Sha1(script).Numkeys(n).Key(keys...).Arg(args...).Build(), nil
	case redisengine.EvalRO:
		return b.EvalRo().Script(script).Numkeys(n).Key(keys...).Arg(args...).Build(), nil
	}
	return rueidis.Completed{}, fmt.Errorf("rueidisstore: unknown command %v", cmd)
}

func (a conn) Eval(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) ([]int64, error) {
	c, err := a.evalCmd(cmd, script, keys, args)
	if err != nil {
		return nil, err
	}
	vals, err := ints(a.c.Do(ctx, c))
	a.failed(err)
	return vals, err
}

func (a conn) EvalBatch(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) ([]int64, []error, error) {
	c, err := a.evalCmd(cmd, script, keys, args)
	if err != nil {
		return nil, nil, err
	}
	resp := a.c.Do(ctx, c)
	if err := resp.Error(); err != nil {
		a.failed(err)
		return nil, nil, err
	}
	arr, err := resp.ToArray()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", rediswire.ErrBadReply, err)
	}
	vals := make([]int64, len(arr))
	var errs []error
	for i := range arr {
		if err := arr[i].Error(); err != nil {
			if errs == nil {
				errs = make([]error, len(arr))
			}
			errs[i] = err
			if a.slots != nil && strings.Contains(err.Error(), "non local key") {
				a.slots.failed() // a slot moved: refresh the copy soon
			}
			continue
		}
		if vals[i], err = arr[i].AsInt64(); err != nil {
			return nil, nil, fmt.Errorf("%w: element %d: %v", rediswire.ErrBadReply, i, err)
		}
	}
	return vals, errs, nil
}

// EvalWait sends the script, then WAIT, on one dedicated connection: two
// round trips rather than one DoMulti, because rueidis fails every command
// of a DoMulti the caller's deadline cuts, the script's reply too. A WAIT
// that fails after the reply came back confirms nothing: 0
// acknowledgements, so the admission is refused and refunded or admitted
// unconfirmed as the store's OnShortAck says, never lost with its units
// taken. (A WAIT the server refuses, for want of the ACL, is an error.)
func (a conn) EvalWait(ctx context.Context, cmd redisengine.Command, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	c, err := a.evalCmd(cmd, script, keys, args)
	if err != nil {
		return nil, 0, err
	}
	dc, release := a.c.Dedicate()
	defer release()
	vals, err := ints(dc.Do(ctx, c))
	if err != nil {
		return nil, 0, err
	}
	wait := dc.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
	n, err := dc.Do(ctx, wait).AsInt64()
	if _, refused := rueidis.IsRedisErr(err); refused {
		return nil, 0, fmt.Errorf("WAIT: %w", err) // the server refuses it (ACL): a setup to fix
	}
	if err != nil {
		return vals, 0, nil
	}
	return vals, n, nil
}

// ints reads a script's reply as integers.
func ints(resp rueidis.RedisResult) ([]int64, error) {
	if err := resp.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("%w: nil", rediswire.ErrBadReply)
		}
		return nil, err
	}
	// Not AsIntSlice: it reads a nested array as its length.
	arr, err := resp.ToArray()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rediswire.ErrBadReply, err)
	}
	vals := make([]int64, len(arr))
	for i := range arr {
		if vals[i], err = arr[i].AsInt64(); err != nil {
			return nil, fmt.Errorf("%w: element %d: %v", rediswire.ErrBadReply, i, err)
		}
	}
	return vals, nil
}

func (a conn) Cluster() bool { return a.c.Mode() == rueidis.ClientModeCluster }

// NodeOf returns the master of key's slot, for batching per node
// (redisengine.NodeLocator); "" for a single-master client.
func (a conn) NodeOf(key string) string {
	if a.slots == nil {
		return ""
	}
	return a.slots.nodeOf(key)
}

func (a conn) Del(ctx context.Context, key string) error {
	return a.c.Do(ctx, a.c.B().Del().Key(key).Build()).Error()
}

func (conn) IsNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

// IncrExpire implements redisengine.NativeConn: INCRBY and PEXPIRE per key
// in one DoMulti (split per node by a cluster client; rueidis never
// retries them). On a cluster one node can fail while the others answer:
// the INCRBYs that answered are reported with the error, so that the
// runner gives them back.
func (a conn) IncrExpire(ctx context.Context, keys []string, by, expiry []int64) ([]int64, []error, error) {
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for i, k := range keys {
		cmds = append(cmds,
			a.c.B().Incrby().Key(k).Increment(by[i]).Build(),
			a.c.B().Pexpire().Key(k).Milliseconds(expiry[i]).Build())
	}
	resps := a.c.DoMulti(ctx, cmds...)
	counts := make([]int64, len(keys))
	var errs []error
	var failed error
	for i := range keys {
		n, err := resps[2*i].AsInt64()
		if err != nil {
			if _, reply := rueidis.IsRedisErr(err); (!reply || rueidis.IsRedisNil(err)) && failed == nil {
				a.failed(err)
				failed = err
			}
			if errs == nil {
				errs = make([]error, len(keys))
			}
			errs[i] = err
		}
		counts[i] = n
	}
	return counts, errs, failed
}
