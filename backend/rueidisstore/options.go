package rueidisstore

import (
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisopt"
)

// The options are defined once, in backend/internal/redisopt, for both Redis
// stores; this file is their typed face, and its doc comments match the
// other store's word for word (a test in backend/internal/redisopt checks).

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set: the shared Redis options, applied in
// order over their defaults by New.
type options struct {
	redis []func(*redisopt.Config)
}

// with makes an Option of a shared Redis option.
func with(f func(*redisopt.Config)) Option {
	return func(o *options) error {
		o.redis = append(o.redis, f)
		return nil
	}
}

// WithServerTime makes every decision at the Redis server's time (the
// scripts call TIME) instead of the request's Now. Use it when the clocks of
// the processes sharing a limit cannot be trusted. Requests' Now is then
// ignored, so a fake clock has no effect.
func WithServerTime() Option { return with(redisopt.ServerTime()) }

// WithReplicaAck makes every admission wait until at least replicas
// replicas acknowledged its writes (WAIT replicas timeout, sent right after
// the script on the same connection), for limits that must survive a
// failover. Admissions fewer replicas acknowledged within timeout are
// decided by onShort (backend.DenyUnconfirmed or backend.AdmitUnconfirmed).
// It needs a single-master client (standalone, or a sentinel failover
// client); New refuses cluster clients. Each admission costs up to timeout
// more when replicas lag.
func WithReplicaAck(replicas int, timeout time.Duration, onShort backend.OnShortAck) Option {
	return with(redisopt.ReplicaAck(replicas, timeout, onShort))
}

// DefaultBatch is how many concurrent Takes may travel together in one
// script call unless WithBatching says otherwise.
const DefaultBatch = redisopt.DefaultBatch

// WithBatching sets how many concurrent Takes may travel together in one
// script call (default DefaultBatch); concurrent Peeks (read-only) and
// TakeAlls (each all or nothing; max counts their requests) travel the same
// way, each kind in calls of its own. Redis decides them one after the
// other, exactly as separate calls; a key of the wrong type fails only its
// own request. Under load this cuts the work per decision on the server and
// in the client (one command parsed, sent and read for many decisions); a
// lone caller is sent at once, with nothing to wait for. 1 sends every Take
// alone; New refuses a max below 1. Batching applies without
// WithReplicaAck; on a Redis Cluster, Takes are batched per master (the
// master of each key's slot, from the client's slot map). Reset is always
// sent alone. A batch is sent with the values of the
// Take with the latest deadline and that deadline (at least 50ms), never a
// Take's cancellation, so a Take's error depends only on its own context
// and the server: one with a tight deadline does not fail those batched
// with it. A Take that stops waiting (its context ended) is withdrawn if
// still queued, or else abandoned in flight, and may then still be counted.
func WithBatching(max int) Option { return with(redisopt.Batching(max)) }
