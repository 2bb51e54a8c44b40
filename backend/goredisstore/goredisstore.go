// Package goredisstore is a backend.Store in Redis, through
// github.com/redis/go-redis/v9: a single server, Redis Cluster, or a
// sentinel-managed failover set, whichever redis.UniversalClient the caller
// already has.
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
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := goredisstore.New(client)
//
// The store never builds, configures or closes the client.
//
// # Retries
//
// go-redis retries a failed command up to Options.MaxRetries times (3 by
// default), including after a read timeout or a dropped connection, when
// the command may already have run. For a writing script that would count
// one request twice. The store therefore sends its writing scripts as
// commands whose NoRetry method reports true (the Cmder method go-redis
// consults before every retry), which go-redis honours in Client,
// ClusterClient and failover clients: such a command is sent once. It is
// re-sent only when go-redis knows it never reached the server, or after a
// MOVED, ASK or READONLY reply, which prove it wrote nothing (the scripts'
// writes come after their reads, so a refused write means none happened).
// The client's MaxRetries still applies to everything else, including the
// read-only scripts of Peek, so no client setting has to change. The store's own runner re-sends a script only
// after NOSCRIPT, which proves it did not run. A timed-out Take is reported
// as an error; whether it was counted is unknown, and it is never counted
// twice.
//
// # Cluster failover
//
// A *redis.ClusterClient reloads its slot map after MOVED or ASK replies,
// but not after connection errors, so after a master dies it would keep
// dialling it until its periodic reload (ClusterStateReloadInterval, a
// minute by default). The store asks the client to reload after every
// connection error (go-redis coalesces the requests), which brings decisions
// back to the cluster within moments of its failover.
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
package goredisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/internal/redisopt"
	"github.com/limitkit/limitkit/internal/option"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// Store is a backend.Store in Redis. It is safe for concurrent use.
type Store struct {
	runner  *redisengine.Runner
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless a cluster client
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
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("goredisstore: the client is nil")
	}
	var o options
	if err := option.Apply(&o, opts); err != nil {
		return nil, fmt.Errorf("goredisstore: %w", err)
	}
	ropts, err := redisopt.Resolve("goredisstore", o.redis)
	if err != nil {
		return nil, err
	}
	r, err := redisengine.New(conn{client}, "goredisstore", ropts)
	if err != nil {
		return nil, err
	}
	cluster, _ := client.(*redis.ClusterClient)
	return &Store{runner: r, client: client, cluster: cluster}, nil
}

// NodeOf returns the address of the cluster master that owns key's hash
// slot, from the client's slot map, or "" for a single-master client or
// when the client has no slot map (backend.NodeLocator: package fallback
// keeps a breaker per node). It waits on the network only for the client's
// first slot map.
func (s *Store) NodeOf(ctx context.Context, key backend.Key) string {
	if s.cluster == nil {
		return ""
	}
	// The slot depends on the hash tag alone.
	return masterOf(ctx, s.cluster, rediswire.Build("", key.ID, ""))
}

// NodeOfRequest implements backend.RequestLocator: the master of the key
// req writes, an exact key's own (backend.ExactKey) or Key's.
func (s *Store) NodeOfRequest(ctx context.Context, req *backend.Request) string {
	if s.cluster == nil || req.Exact.Base == "" {
		return s.NodeOf(ctx, req.Key)
	}
	return masterOf(ctx, s.cluster, rediswire.StateKey(req))
}

// masterOf returns the address of the master of key's slot, or "".
func masterOf(ctx context.Context, cluster *redis.ClusterClient, key string) string {
	c, err := cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return s.runner.Take(ctx, req)
}

// Peek implements backend.Store. It runs read-only (EVALSHA_RO), so a
// cluster client with ReadOnly set may serve it from a replica.
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

// HonoursContext reports whether calls return once their context's
// deadline passes: when the client has ContextTimeoutEnabled (otherwise
// go-redis reads until its ReadTimeout). fallback.New calls such a store
// directly, without a goroutine per call.
func (s *Store) HonoursContext() bool {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

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
func ServerTime(client redis.UniversalClient) func(context.Context) (time.Time, error) {
	return func(ctx context.Context) (time.Time, error) {
		t, err := client.Time(ctx).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("goredisstore: TIME: %w", err)
		}
		return t, nil
	}
}

// conn adapts a go-redis client to the script runner.
type conn struct {
	c redis.UniversalClient
}

// failed reacts to an error from the client. A cluster client reloads its
// slot map after MOVED or ASK replies but not after connection errors, so
// after a failover it would keep dialling the dead master until its periodic
// reload (a minute by default); a connection error (or a READONLY reply)
// asks it to reload now.
// Reloads are asynchronous and coalesced by go-redis.
func (a conn) failed(ctx context.Context, err error) {
	cluster, ok := a.c.(*redis.ClusterClient)
	if !ok || errors.Is(err, context.Canceled) {
		return
	}
	// READONLY: the node was a master and is a replica now (a failover,
	// as MemoryDB and ElastiCache do them): the map is stale too.
	var reply redis.Error
	if !errors.As(err, &reply) || redis.HasErrorPrefix(err, "READONLY") {
		cluster.ReloadState(ctx)
	}
}

// noRetry is a command go-redis sends at most once: its retry loops skip
// commands whose NoRetry reports true after they may have been written.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// evalCmd builds cmd as a go-redis command, sent at most once unless it is
// read-only.
func evalCmd(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) (*redis.Cmd, redis.Cmder) {
	argv := make([]any, 3, 3+len(keys)+len(args))
	argv[0], argv[1], argv[2] = cmd.String(), script, len(keys)
	for _, k := range keys {
		argv = append(argv, k)
	}
	for _, arg := range args {
		argv = append(argv, arg)
	}
	c := redis.NewCmd(ctx, argv...)
	if cmd.ReadOnly() {
		return c, c
	}
	return c, noRetry{c}
}

func (a conn) Eval(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) ([]int64, error) {
	c, send := evalCmd(ctx, cmd, script, keys, args)
	return a.reply(ctx, c, a.c.Process(ctx, send))
}

func (a conn) EvalBatch(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) ([]int64, []error, error) {
	c, send := evalCmd(ctx, cmd, script, keys, args)
	if err := a.c.Process(ctx, send); err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil, nilError(err)
		}
		a.failed(ctx, err)
		return nil, nil, err
	}
	arr, err := c.Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", rediswire.ErrBadReply, err)
	}
	vals := make([]int64, len(arr))
	var errs []error
	for i, v := range arr {
		switch v := v.(type) {
		case int64:
			vals[i] = v
		case error:
			if errs == nil {
				errs = make([]error, len(arr))
			}
			errs[i] = v
		default:
			return nil, nil, fmt.Errorf("%w: element %d is %T, not an integer", rediswire.ErrBadReply, i, v)
		}
	}
	return vals, errs, nil
}

// EvalWait pipelines the script and WAIT: one round trip on one connection
// (the store refuses cluster clients for this), sent at most once. A WAIT
// that does not come back after the script's reply was read (the caller's
// deadline cut it, or the connection broke) confirms nothing: 0 acknowledgements, so the
// admission is refused and refunded or admitted unconfirmed as the store's
// OnShortAck says, never lost with its units taken.
func (a conn) EvalWait(ctx context.Context, cmd redisengine.Command, script string, keys, args []string, replicas int, timeout time.Duration) ([]int64, int64, error) {
	c, _ := evalCmd(ctx, cmd, script, keys, args)
	wait := redis.NewIntCmd(ctx, "WAIT", replicas, timeout.Milliseconds())
	pipe := a.c.Pipeline()
	_ = pipe.Process(ctx, keptReply{noRetry{c}})
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // errors are read per command below
	vals, err := a.reply(ctx, c, c.Err())
	if err != nil {
		return nil, 0, err
	}
	n, err := wait.Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		return nil, 0, fmt.Errorf("WAIT: %w", err) // the server refuses it (ACL): a setup to fix
	}
	if err != nil {
		return vals, 0, nil
	}
	return vals, n, nil
}

// keptReply is a command whose reply, once read, a later failure of its
// pipeline does not erase (go-redis stamps a pipeline's error on every
// command in it, the ones already answered too).
type keptReply struct{ noRetry }

func (k keptReply) SetErr(err error) {
	if err != nil && k.Err() == nil && k.Val() != nil {
		return
	}
	k.Cmd.SetErr(err)
}

// reply converts a script's reply, reporting errors to failed.
func (a conn) reply(ctx context.Context, c *redis.Cmd, err error) ([]int64, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nilError(err)
	}
	if err != nil {
		a.failed(ctx, err)
		return nil, err
	}
	vals, err := c.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", rediswire.ErrBadReply, err)
	}
	return vals, nil
}

func (a conn) Cluster() bool {
	_, ok := a.c.(*redis.ClusterClient)
	return ok
}

// NodeOf returns the master of key's slot, for batching per node
// (redisengine.NodeLocator); "" for a single-master client. It waits on
// the network only for the client's first slot map.
func (a conn) NodeOf(key string) string {
	cluster, ok := a.c.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	return masterOf(context.Background(), cluster, key)
}

func (a conn) Del(ctx context.Context, key string) error {
	err := a.c.Del(ctx, key).Err()
	if errors.Is(err, redis.Nil) {
		return nilError(err)
	}
	if err != nil {
		a.failed(ctx, err)
	}
	return err
}

// nilError explains go-redis' redis.Nil. As the reply itself it is a
// malformed script reply (the scripts never return nil). Wrapped, it comes
// from dialling: a failover client's sentinels answered nil to
// GET-MASTER-ADDR-BY-NAME, for they monitor no master by that name.
func nilError(err error) error {
	if err == redis.Nil { //nolint:errorlint // the reply itself, not a wrapped dial error
		return fmt.Errorf("%w: nil", rediswire.ErrBadReply)
	}
	return fmt.Errorf("the sentinels know no master by that name; check master_name "+
		"(redis.FailoverOptions.MasterName) against the name the sentinels monitor: %w", err)
}

func (conn) IsNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// IncrExpire implements redisengine.NativeConn: INCRBY and PEXPIRE per key
// in one pipeline (split per node by a cluster client), sent at most once.
// On a cluster one node can fail while the others answer: the INCRBYs that
// answered are reported with the error, so that the runner gives them back.
func (a conn) IncrExpire(ctx context.Context, keys []string, by, expiry []int64) ([]int64, []error, error) {
	incrs := make([]*redis.Cmd, len(keys))
	pipe := a.c.Pipeline()
	for i, k := range keys {
		incrs[i] = redis.NewCmd(ctx, "INCRBY", k, by[i])
		_ = pipe.Process(ctx, noRetry{incrs[i]})
		_ = pipe.Process(ctx, noRetry{redis.NewCmd(ctx, "PEXPIRE", k, expiry[i])})
	}
	_, _ = pipe.Exec(ctx) // each INCRBY tells its own outcome
	counts := make([]int64, len(keys))
	var errs []error
	var failed error
	for i, c := range incrs {
		n, err := c.Int64()
		if v, ok := c.Val().(int64); ok && err != nil && !isReply(err) {
			// The node answered; a cluster client then stamps a later
			// failure (of another node, or its retry's wait) on every
			// command of the pipeline.
			n, err = v, nil
		}
		if err != nil {
			if !isReply(err) && failed == nil {
				a.failed(ctx, err)
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

// isReply reports whether err is the server's error reply to one command
// (a failure of that command alone).
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && !errors.Is(err, redis.Nil)
}
