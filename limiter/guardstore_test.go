package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// guardStores returns a go-redis store on one redis-server (the main
// store) and a rueidis store on another (the guard's), with the servers.
func guardStores(t *testing.T) (main, guard backend.Store, mainSrv, guardSrv *redistest.Server) {
	t.Helper()
	mainSrv, guardSrv = redistest.Start(t), redistest.Start(t)
	gc := redis.NewClient(&redis.Options{Addr: mainSrv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	main, err := goredisstore.New(gc)
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{guardSrv.Addr()}})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	guard, err = rueidisstore.New(rc)
	require.NoError(t, err)
	return main, guard, mainSrv, guardSrv
}

// TestGuardOnItsOwnStore: a guard on a second redis-server keeps its
// counts when the main server loses its data, and still denies. The
// control, the default guard in the main store, admits again after the
// same loss: the test can tell the two apart.
func TestGuardOnItsOwnStore(t *testing.T) {
	main, guardStore, mainSrv, _ := guardStores(t)
	ctx := context.Background()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprint("own store=", own), func(t *testing.T) {
			g := &limiter.Guard{Limit: 3, Window: 24 * time.Hour}
			if own {
				g.Store = guardStore
			}
			lim, err := limiter.New(main, limiter.Config{Limit: 10, Window: time.Hour, Prefix: fmt.Sprintf("pay:%v:", own), Guard: g},
				limiter.WithClock(fake))
			require.NoError(t, err)
			for i := range 3 {
				d, err := lim.Allow(ctx, "acct")
				require.NoError(t, err)
				require.True(t, d.Allowed, "request %d", i)
			}
			d, err := lim.Allow(ctx, "acct")
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, limiter.GuardRule, d.Rule)

			_, err = mainSrv.Do("FLUSHALL")
			require.NoError(t, err)
			d, err = lim.Allow(ctx, "acct")
			require.NoError(t, err)
			if !own {
				require.True(t, d.Allowed, "control: the default guard shared the main server's fate")
				return
			}
			require.False(t, d.Allowed, "the guard's counts survive the main server's loss")
			require.Equal(t, limiter.GuardRule, d.Rule)
			p, err := lim.Peek(ctx, "acct")
			require.NoError(t, err)
			require.False(t, p.Allowed)
			require.Equal(t, limiter.GuardRule, p.Rule)

			// Reset reaches the guard on its store.
			require.NoError(t, lim.Reset(ctx, "acct"))
			d, err = lim.Allow(ctx, "acct")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		})
	}
}

// TestGuardOnItsOwnStoreAllOrNothing: a denial by the main limit takes
// nothing from the guard, and a denial by the guard nothing from the main
// limit, across the two servers.
func TestGuardOnItsOwnStoreAllOrNothing(t *testing.T) {
	main, guardStore, _, _ := guardStores(t)
	ctx := context.Background()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	lim, err := limiter.New(main, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "p:",
		Guard: &limiter.Guard{Limit: 5, Window: 24 * time.Hour, Store: guardStore}}, limiter.WithClock(fake))
	require.NoError(t, err)
	// What each rule has counted, read straight from its own store.
	guardLeft := func() int64 {
		d, err := guardStore.Peek(ctx, backend.Request{Key: backend.Key{Prefix: "p:guard:", ID: "acct"},
			Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 24 * time.Hour}, Now: fake.Now(), Cost: 1})
		require.NoError(t, err)
		return d.Remaining
	}
	mainLeft := func() int64 {
		d, err := main.Peek(ctx, backend.Request{Key: backend.Key{Prefix: "p:", ID: "acct"},
			Rule: algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Minute}, Now: fake.Now(), Cost: 1})
		require.NoError(t, err)
		return d.Remaining
	}
	admitted := 0
	for range 3 { // 3 minutes of 4 requests: the main limit admits 2 a minute, the guard 5 in all
		for range 4 {
			d, err := lim.Allow(ctx, "acct")
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			} else if admitted < 5 {
				require.Equal(t, 0, d.Rule, "the main limit denies while the guard has room")
				require.EqualValues(t, 5-admitted, guardLeft(), "a main denial takes nothing from the guard")
			}
		}
		fake.Advance(time.Minute)
	}
	require.Equal(t, 5, admitted)
	require.EqualValues(t, 0, guardLeft())
	d, err := lim.Allow(ctx, "acct")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, limiter.GuardRule, d.Rule)
	require.EqualValues(t, 2, mainLeft(), "a guard denial takes nothing from the main limit")
}
