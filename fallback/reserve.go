package fallback

// Reservations (backend.Reserver) through the breaker: reserved on the
// primary while it answers, else by policy on the local store; refunds of
// primary reservations settled while the breaker refuses calls are queued
// and sent once it lets calls through again.

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/limitkit/limitkit/backend"
)

var _ backend.Reserver = (*Store)(nil)

// The at of a reservation the fallback answered by policy: localAt(a) for
// one the local store recorded at a, noneAt for one nothing holds (a
// FailOpen or FailClosed answer). Primary reservations keep theirs (>= 0).
const noneAt = math.MinInt64

func localAt(a int64) int64 { return -a - 1 }

// maxQueued bounds the refunds waiting for the primary; past it a refund
// is dropped (its units stay counted until they slide out: never over the
// limit) and counted (QueuedRefunds).
const maxQueued = 4096

// refundQueue is the refunds waiting for the primary.
type refundQueue struct {
	mu      sync.Mutex
	pending []queuedRefund
	dropped uint64
}

type queuedRefund struct {
	req backend.Request
	at  int64
}

func reserverOf(st backend.Store, which string) (backend.Reserver, error) {
	r, ok := backend.As[backend.Reserver](st)
	if !ok {
		return nil, fmt.Errorf("fallback: the %s store %T cannot reserve (it implements no backend.Reserver)", which, st)
	}
	return r, nil
}

// Reserve reserves on the primary while it answers; while it does not,
// the request is decided by its policy as a Take (the local store records
// it under a local policy). The at returned tells Unreserve which.
func (s *Store) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	primary, err := reserverOf(s.primary, "primary")
	if err != nil {
		return backend.Result{}, 0, err
	}
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, 0, err
	}
	at, lat := int64(0), int64(noneAt)
	res, err := s.step(ctx, req, func(ctx context.Context, req backend.Request) (backend.Result, error) {
		r, a, err := primary.Reserve(ctx, req)
		at = a
		return r, err
	}, func(local backend.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
		lr, err := reserverOf(local, "local")
		if err != nil {
			return backend.Result{}, err
		}
		r, a, err := lr.Reserve(ctx, req)
		lat = localAt(a)
		return r, err
	}, localTake)
	if err != nil || !res.Allowed {
		return res, 0, err
	}
	if !res.Degraded {
		s.flushRefunds(ctx, primary)
		return res, at, nil
	}
	return res, lat, nil
}

// Unreserve gives a reservation's units back where it was recorded: a
// local one to the local store (by its policy, as it was taken), a primary
// one to the primary. When the breaker refuses the call (open, or probing
// with its quota spent) the refund is queued, up to maxQueued, and sent
// after the next call the primary answers; the result is then a Peek by
// policy. A refund the primary failed to answer is not queued, since it
// may have run (sent twice, it would give back others' units); its units
// stay counted until they slide out.
func (s *Store) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	primary, err := reserverOf(s.primary, "primary")
	if err != nil {
		return backend.Result{}, err
	}
	if err := backend.ValidateReserve(&req); err != nil {
		return backend.Result{}, err
	}
	switch {
	case at == noneAt:
		return s.Peek(ctx, req)
	case at < 0:
		return s.decide(ctx, s.breakerFor(ctx, req.Key), req, unreserveLocally(-at-1), localGiveBack)
	}
	ran := false
	res, err := s.step(ctx, req, func(ctx context.Context, req backend.Request) (backend.Result, error) {
		ran = true
		return primary.Unreserve(ctx, req, at)
	}, backend.Store.Peek, localPeek)
	switch {
	case err == nil && !res.Degraded:
		s.flushRefunds(ctx, primary)
	case err == nil && !ran:
		s.queued.add(queuedRefund{req: req, at: at})
	}
	return res, err
}

// unreserveLocally is a localCall: the local store's Unreserve at at.
func unreserveLocally(at int64) localCall {
	return func(local backend.Store, ctx context.Context, req backend.Request) (backend.Result, error) {
		lr, err := reserverOf(local, "local")
		if err != nil {
			return backend.Result{}, err
		}
		return lr.Unreserve(ctx, req, at)
	}
}

func (q *refundQueue) add(r queuedRefund) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= maxQueued {
		q.dropped++
		return
	}
	q.pending = append(q.pending, r)
}

// take removes up to n queued refunds.
func (q *refundQueue) take(n int) []queuedRefund {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.pending))
	out := append([]queuedRefund(nil), q.pending[:n]...)
	q.pending = q.pending[n:]
	return out
}

// flushBatch bounds the queued refunds one call sends.
const flushBatch = 64

// flushRefunds sends queued refunds to the primary, which just answered,
// through the breaker; one the breaker refuses goes back in the queue.
func (s *Store) flushRefunds(ctx context.Context, primary backend.Reserver) {
	for _, q := range s.queued.take(flushBatch) {
		ran := false
		_, err := s.execute(ctx, s.breakerFor(ctx, q.req.Key), func(ctx context.Context) (backend.Result, error) {
			ran = true
			return primary.Unreserve(ctx, q.req, q.at)
		})
		if err != nil && !ran {
			s.queued.add(q)
		}
	}
}

// QueuedRefunds returns the refunds of reservations settled while the
// breaker refused calls that wait for the primary, and those dropped
// because maxQueued were already waiting.
func (s *Store) QueuedRefunds() (waiting int, dropped uint64) {
	s.queued.mu.Lock()
	defer s.queued.mu.Unlock()
	return len(s.queued.pending), s.queued.dropped
}
