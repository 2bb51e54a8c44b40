package redisengine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// refundConn admits every take and peek but the denyTake-th take (0:
// none); onTake runs before each take's reply (to end the caller's
// context), and every refund records whether its context had ended and
// answers refundErr.
type refundConn struct {
	fakeConn
	onTake    func(n int) error
	denyTake  int
	refundErr error

	mu         sync.Mutex
	takes      int
	refundCtxs []error // ctx.Err() of each refund as it was sent
}

func (c *refundConn) Eval(ctx context.Context, _ Command, _ string, _, args []string) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch args[4] {
	case "1":
		c.takes++
		if c.onTake != nil {
			if err := c.onTake(c.takes); err != nil {
				return nil, err
			}
		}
		if c.takes == c.denyTake {
			return []int64{0, 0, 1000, 1000, 0}, nil
		}
		return []int64{1, 0, 0, 1000, 1}, nil
	case "2":
		c.refundCtxs = append(c.refundCtxs, ctx.Err())
		if c.refundErr != nil {
			return nil, c.refundErr
		}
	}
	return []int64{1, 1, 0, 0, 0}, nil
}

func (c *refundConn) EvalWait(ctx context.Context, cmd Command, script string, keys, args []string, _ int, _ time.Duration) ([]int64, int64, error) {
	vals, err := c.Eval(ctx, cmd, script, keys, args)
	return vals, 0, err // no replica ever acknowledges
}

// TestCrossSlotRefundOutlivesTheCallersContext: a cross-slot TakeAll whose
// second take fails because the caller's context ended still refunds the
// first, on a context that has not ended. Before refunds were detached,
// the refund was sent on the spent context and failed.
func TestCrossSlotRefundOutlivesTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	conn := &refundConn{fakeConn: fakeConn{cluster: true}, onTake: func(n int) error {
		if n == 2 {
			cancel()
			return ctx.Err()
		}
		return nil
	}}
	r := newRunner(t, conn, false)
	reqs := []backend.Request{requestFor("a"), requestFor("b")}
	reqs[1].Key.Prefix = "q:"
	require.False(t, sameSlotForTest(reqs), "the test needs keys in two slots")
	_, err := r.TakeAll(ctx, reqs)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []error{nil}, conn.refundCtxs, "the refund was sent on the caller's spent context")
	require.Zero(t, r.FailedRefunds())
}

// TestCrossSlotFailedRefundKeepsTheDenial: a cross-slot TakeAll whose
// second take is denied (a concurrent caller took the room) answers the
// denial even when the first take's refund times out: the decision was
// made, the refund's units stay taken (never over the limit) and are
// counted. The refund's error once became the TakeAll's, a Redis fault
// reaching a caller that had its answer (seen on a Cluster reshard).
func TestCrossSlotFailedRefundKeepsTheDenial(t *testing.T) {
	conn := &refundConn{fakeConn: fakeConn{cluster: true}, denyTake: 2, refundErr: context.DeadlineExceeded}
	r := newRunner(t, conn, false)
	reqs := []backend.Request{requestFor("a"), requestFor("b")}
	reqs[1].Key.Prefix = "q:"
	require.False(t, sameSlotForTest(reqs), "the test needs keys in two slots")
	res, each, err := r.TakeEach(t.Context(), reqs)
	require.NoError(t, err, "a failed refund became the denied TakeAll's error")
	require.False(t, res.Allowed)
	require.Len(t, conn.refundCtxs, 1, "the first take was not refunded")
	require.Equal(t, uint64(1), r.FailedRefunds())
	require.Len(t, each, 2)
	require.Zero(t, each[0].Remaining, "the first take's units stay taken")
	require.False(t, each[1].Allowed)

	// Control: a take that fails (not denied) is still the call's error,
	// with its refund's.
	conn.denyTake, conn.takes = 0, 0
	conn.onTake = func(n int) error {
		if n == 2 {
			return errors.New("connection refused")
		}
		return nil
	}
	_, err = r.TakeAll(t.Context(), reqs)
	require.ErrorContains(t, err, "connection refused")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, uint64(2), r.FailedRefunds())
}

// TestShortAckRollbackOutlivesTheCallersContext: an admission no replica
// acknowledged is rolled back even when the caller's context ended while
// WAIT blocked; a rollback that fails is counted.
func TestShortAckRollbackOutlivesTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	conn := &refundConn{onTake: func(int) error { cancel(); return nil }}
	r, err := New(conn, "test", Options{Ack: Ack{Replicas: 1, Timeout: time.Millisecond, OnShort: backend.DenyUnconfirmed}})
	require.NoError(t, err)
	res, err := r.Take(ctx, request(1))
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, []error{nil}, conn.refundCtxs, "the rollback was sent on the caller's spent context")
	require.Zero(t, r.FailedRefunds())

	conn.refundErr = errors.New("connection refused")
	_, err = r.Take(t.Context(), request(1))
	require.ErrorContains(t, err, "connection refused")
	require.Equal(t, uint64(1), r.FailedRefunds())
}

func sameSlotForTest(reqs []backend.Request) bool {
	keys := []string{rediswire.Key(reqs[0].Key, reqs[0].Rule), rediswire.Key(reqs[1].Key, reqs[1].Rule)}
	return rediswire.SameSlot(keys)
}
