package limiter_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// fleetLimit is the budget of the fleet test: 200 units an hour, one
// window for the whole run.
const fleetLimit = 200

// fleet runs two processes (each its own client and limiter: go-redis and
// rueidis) × 64 callers reserving 1..8 units on one key of one Redis and
// settling below, at or above the estimate, cancelling, or abandoning
// the reservation; at most 20 reservations a caller and 10 s. It returns
// the units the window counts besides the settled excesses: the
// abandoned estimates plus min(actual, estimate) of those settled.
func fleet(t *testing.T, wrap func(backend.Store) backend.Store) int64 {
	srv := redistest.Start(t)
	var lims []*limiter.Limiter
	for _, client := range []string{config.GoRedis, config.Rueidis} {
		s, closeFn, err := config.Backend{URL: "redis://" + srv.Addr() + "/0", Client: client}.Open(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = closeFn() })
		l, err := limiter.New(wrap(s), limiter.Config{Algorithm: algorithms.SlidingLog, Limit: fleetLimit, Window: time.Hour, Prefix: "fleet:"})
		require.NoError(t, err)
		lims = append(lims, l)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var counted atomic.Int64
	var wg sync.WaitGroup
	for p, l := range lims {
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(p), uint64(c)))
				for range 20 {
					if ctx.Err() != nil {
						return
					}
					est := 1 + rng.Int64N(8)
					res, _, err := l.ReserveN(ctx, "k", est)
					if err != nil || res == nil {
						continue
					}
					switch x := rng.IntN(10); {
					case x == 0: // abandoned: counts its estimate
						counted.Add(est)
					case x == 1:
						if res.Cancel(ctx) != nil {
							counted.Add(est)
						}
					default:
						actual := rng.Int64N(est + 5)
						if _, err := res.Settle(ctx, actual); err != nil {
							counted.Add(est)
							continue
						}
						counted.Add(min(actual, est))
					}
				}
			}()
		}
	}
	wg.Wait()
	return counted.Load()
}

// TestReserveFleet: two processes × 64 callers on one Redis never count
// more than the limit in the window besides the settled excesses. Its
// control refunds five times what it should (the excess from the newest
// units) and is
// caught over the limit.
func TestReserveFleet(t *testing.T) {
	got := fleet(t, func(s backend.Store) backend.Store { return s })
	require.LessOrEqual(t, got, int64(fleetLimit), "units counted besides the settled excesses")
	require.Positive(t, got)
	t.Logf("counted %d of %d besides the excesses", got, fleetLimit)
	control := fleet(t, func(s backend.Store) backend.Store { return doubleRefunder{s} })
	require.Greater(t, control, int64(fleetLimit), "the control (refunds twice) must be caught over the limit")
	t.Logf("control: counted %d", control)
}

// doubleRefunder gives back a refund's units, and four times as many
// more of the newest.
type doubleRefunder struct{ backend.Store }

func (d doubleRefunder) Reserve(ctx context.Context, req backend.Request) (backend.Result, int64, error) {
	r, _ := backend.As[backend.Reserver](d.Store)
	return r.Reserve(ctx, req)
}

func (d doubleRefunder) Unreserve(ctx context.Context, req backend.Request, at int64) (backend.Result, error) {
	r, _ := backend.As[backend.Reserver](d.Store)
	if _, err := r.Unreserve(ctx, req, at); err != nil {
		return backend.Result{}, err
	}
	u, _ := backend.As[backend.UnitRefunder](d.Store)
	req.Cost = min(4*req.Cost, req.Rule.Limit)
	return u.GiveBack(ctx, req)
}
