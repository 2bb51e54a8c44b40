package fallback_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestBaselinesLeaveHealthyDecisionsAlone: while Redis answers, a fallback
// store (recording every answer as a baseline) decides exactly as the
// Redis store alone, field by field: the same random Takes, Peeks,
// GiveBacks and TakeAlls on two copies of the same keys, at request times
// (a fake clock) that cross many window roll-overs of a 50-per-hour limit.
func TestBaselinesLeaveHealthyDecisionsAlone(t *testing.T) {
	redistest.Require(t)
	forEachClient(t, func(t *testing.T, cl itClient) {
		srv := redistest.Start(t)
		// The clients' default timeouts (seconds), not the integration
		// tests' short ones: an error here would say nothing of baselines.
		var primary backend.Store
		if cl.name == "goredis" {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			s, err := goredisstore.New(c)
			require.NoError(t, err)
			primary = s
		} else {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			s, err := rueidisstore.New(c)
			require.NoError(t, err)
			primary = s
		}
		conn := struct{ store backend.Store }{primary}
		fb, err := fallback.New(conn.store, fallback.WithTimeout(30*time.Second), fallback.WithLogger(quietLogger()))
		require.NoError(t, err)
		refunder, ok := conn.store.(backend.UnitRefunder)
		require.True(t, ok)
		ctx := context.Background()
		for _, alg := range []algorithms.Name{algorithms.FixedWindow, algorithms.SlidingLog, algorithms.GCRA, algorithms.SlidingCounter} {
			t.Run(string(alg), func(t *testing.T) {
				rule := algorithms.Rule{Algorithm: alg, Limit: 50, Window: time.Hour}
				rng := rand.New(rand.NewPCG(7, uint64(len(alg))))
				run := strconv.FormatInt(time.Now().UnixNano(), 36)
				direct := backend.Key{Prefix: "healthy:" + run + ":direct:"}
				wrapped := backend.Key{Prefix: "healthy:" + run + ":wrapped:"}
				now := time.Now().Truncate(time.Hour)
				var rolls int
				for step := range 600 {
					// Mostly bursts within a window, sometimes a jump across one.
					gap := time.Duration(rng.IntN(40)) * time.Second
					if rng.IntN(20) == 0 {
						gap = time.Duration(rng.IntN(90)) * time.Minute
					}
					if now.Add(gap).Truncate(time.Hour) != now.Truncate(time.Hour) {
						rolls++
					}
					now = now.Add(gap)
					id := "k" + strconv.Itoa(rng.IntN(3))
					cost := int64(1 + rng.IntN(3))
					dk, wk := direct, wrapped
					dk.ID, wk.ID = id, id
					dreq := backend.Request{Key: dk, Rule: rule, Now: now, Cost: cost}
					wreq := dreq
					wreq.Key = wk
					var want, got backend.Result
					var werr, gerr error
					switch op := rng.IntN(10); {
					case op < 6:
						want, werr = conn.store.Take(ctx, dreq)
						got, gerr = fb.Take(ctx, wreq)
					case op < 8:
						want, werr = conn.store.Peek(ctx, dreq)
						got, gerr = fb.Peek(ctx, wreq)
					case op < 9:
						want, werr = refunder.GiveBack(ctx, dreq)
						got, gerr = fb.GiveBack(ctx, wreq)
					default:
						other := "k" + strconv.Itoa((rng.IntN(2)+1+int(id[1]-'0'))%3)
						d2, w2 := dreq, wreq
						d2.Key.ID, w2.Key.ID = other, other
						want, werr = conn.store.TakeAll(ctx, []backend.Request{dreq, d2})
						got, gerr = fb.TakeAll(ctx, []backend.Request{wreq, w2})
					}
					require.NoError(t, werr)
					require.NoError(t, gerr)
					require.Equal(t, want, got, "step %d at %v on %s", step, now, id)
				}
				require.Greater(t, rolls, 10, "too few window roll-overs to tell")
			})
		}
	})
}
