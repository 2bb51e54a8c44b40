package redisengine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// slowRefundConn refuses every native increment (its count is over any
// limit) and holds every refund until release is closed.
type slowRefundConn struct {
	fakeConn
	release chan struct{}
	refunds chan struct{} // one value per refund that landed
}

func (c *slowRefundConn) IncrExpire(_ context.Context, keys []string, _, _ []int64) ([]int64, []error, error) {
	counts := make([]int64, len(keys))
	for i := range counts {
		counts[i] = 1 << 40
	}
	return counts, nil, nil
}

// Eval holds the refund script's calls (the only scripts sent here).
func (c *slowRefundConn) Eval(ctx context.Context, cmd Command, script string, keys, args []string) ([]int64, error) {
	if script != refundWindows.sha && script != refundWindows.src {
		return c.fakeConn.Eval(ctx, cmd, script, keys, args)
	}
	<-c.release
	c.refunds <- struct{}{}
	return []int64{0}, nil
}

// TestSlowNativeRefundDoesNotHoldTheCaller: a refused native Take whose
// refund hangs returns once its caller's context ends, and the refund
// still lands afterwards. Before, the caller waited for the refund (up to
// RefundTimeout, 1 s, past a 100 ms deadline). The control waits as before:
// the call is still held while the refund is.
func TestSlowNativeRefundDoesNotHoldTheCaller(t *testing.T) {
	req := request(1)
	req.Rule = algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}
	take := func(t *testing.T) (*slowRefundConn, chan struct{}) {
		conn := &slowRefundConn{release: make(chan struct{}), refunds: make(chan struct{}, 1)}
		r := newRunner(t, conn, false)
		require.NotNil(t, r.native)
		ctx, cancel := context.WithCancel(t.Context())
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			res, err := r.Take(ctx, req)
			if err == nil && res.Allowed {
				t.Error("admitted over the limit")
			}
		}()
		cancel() // the caller gives up (or its deadline passes)
		return conn, returned
	}
	t.Run("fixed", func(t *testing.T) {
		conn, returned := take(t)
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("the refused call is held by its refund after its context ended")
		}
		close(conn.release)
		<-conn.refunds // the refund still lands
	})
	t.Run("control_waits", func(t *testing.T) {
		old := waitRefunds.Swap(true)
		defer waitRefunds.Store(old)
		conn, returned := take(t)
		select {
		case <-returned:
			t.Fatal("the control returned before its refund: the test cannot tell")
		case <-time.After(300 * time.Millisecond):
		}
		close(conn.release)
		<-conn.refunds
		<-returned
	})
}

var _ NativeConn = (*slowRefundConn)(nil)
