package grpclimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// TestReloadToAndFromConcurrency (issue 22, defect 7): calls through the
// unary interceptor while the limit switches between "concurrency" and
// "fixed_window" never fail (neither limit denies here). Bounded: 4
// workers x 4,000 calls, or 20 s.
func TestReloadToAndFromConcurrency(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	lease := limiter.Config{Algorithm: "concurrency", Limit: 1000, Window: time.Minute, Prefix: "rl:"}
	rate := limiter.Config{Algorithm: "fixed_window", Limit: 1 << 40, Window: time.Hour, Prefix: "rl:"}
	lim, err := limiter.New(store, lease)
	require.NoError(t, err)
	ic, err := grpclimit.New(lim, grpclimit.WithKey(grpclimit.FullMethod()))
	require.NoError(t, err)
	unary := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}
	handler := func(context.Context, any) (any, error) { return nil, nil }

	done := make(chan struct{})
	var flips atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			cfg := rate
			if i%2 == 1 {
				cfg = lease
			}
			if err := lim.SetConfig(cfg); err != nil {
				panic(err)
			}
			flips.Add(1)
		}
	}()
	const workers, each = 4, 4000
	deadline := time.Now().Add(20 * time.Second)
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; i < each && time.Now().Before(deadline); i++ {
				if _, err := unary(t.Context(), nil, info, handler); err != nil {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	t.Logf("%d configuration changes", flips.Load())
	require.Positive(t, flips.Load(), "the configuration never changed: the test proved nothing")
	require.Zero(t, bad.Load(), "calls failed by a reload to or from concurrency")
}
