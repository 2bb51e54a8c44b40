package redisengine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestResetDuringNativeRefunds (issue 43, item 2): a Reset while the
// refunds of refused requests are in flight, then requests after it, then
// the refunds landing. Before epochs the refunds (SET NX, DECRBY) gave
// back units the requests after the Reset had taken, so the window
// admitted its limit after the Reset plus the refunds in flight; a
// refund now gives back only within the epoch its increment counted in,
// and the window admits its limit after the Reset, no more. The control
// resets by deleting the keys, as before: caught.
func TestResetDuringNativeRefunds(t *testing.T) {
	srv := redistest.Start(t)
	const limit, refused, before = 10, 5, 3
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: limit, Window: time.Hour}
	now := time.Now()
	// afterReset returns how many units the window admitted after the Reset.
	afterReset := func(t *testing.T, s backend.Store, id string) int {
		req := backend.Request{Key: backend.Key{Prefix: "resetrefund:", ID: id}, Rule: rule, Now: now, Cost: 1}
		for range limit {
			res, err := s.Take(t.Context(), req)
			require.NoError(t, err)
			require.True(t, res.Allowed)
		}
		parked, release := make(chan struct{}), make(chan struct{})
		restore := redisengine.SetRefundGate(parked, release)
		var wg sync.WaitGroup
		for range refused {
			// One at a time, each returning once its refund is in flight
			// (its context ends).
			ctx, cancel := context.WithCancel(t.Context())
			wg.Go(func() {
				res, err := s.Take(ctx, req)
				if err != nil || res.Allowed {
					t.Errorf("a Take over the limit: allowed=%v err=%v", res.Allowed, err)
				}
			})
			<-parked
			cancel()
		}
		wg.Wait()
		restore()
		require.NoError(t, s.Reset(t.Context(), req.Key, rule, now))
		admitted := 0
		for range before {
			res, err := s.Take(t.Context(), req)
			require.NoError(t, err)
			require.True(t, res.Allowed, "a Take after the Reset was refused")
			admitted++
		}
		close(release)
		for range refused {
			<-parked // every refund has landed
		}
		for range 4 * limit { // bounded: the window admits at most its limit plus the refunds
			res, err := s.Take(t.Context(), req)
			require.NoError(t, err)
			if !res.Allowed {
				break
			}
			admitted++
		}
		return admitted
	}
	// Each Take alone (WithBatching(1)): a batch waits for the refunds of
	// the one before, which the test holds.
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	gs, err := goredisstore.New(gc, goredisstore.WithBatching(1))
	require.NoError(t, err)
	rs, err := rueidisstore.New(rc, rueidisstore.WithBatching(1))
	require.NoError(t, err)
	for name, s := range map[string]backend.Store{"goredis": gs, "rueidis": rs} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, limit, afterReset(t, s, name), "units admitted after the Reset")
			restore := redisengine.SetResetByDelete(true)
			defer restore()
			got := afterReset(t, s, name+":control")
			require.Greater(t, got, limit, "the control (Reset deletes) kept to the limit: the test cannot see refunds across a Reset")
			t.Logf("control: %d admitted after the Reset at a limit of %d", got, limit)
		})
	}
}
