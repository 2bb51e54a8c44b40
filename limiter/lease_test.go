package limiter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// leaseConfig is a concurrency limit of n held at once, with a 10 s lease
// timeout.
func leaseConfig(n int64) limiter.Config {
	return limiter.Config{Algorithm: algorithms.Concurrency, Limit: n, Window: 10 * time.Second, Prefix: "cc:"}
}

func newLeaseLimiter(t *testing.T, store backend.Store, cfg limiter.Config, fake *clock.Fake) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
	require.NoError(t, err)
	return lim
}

// acquired takes a lease that must be granted.
func acquired(t *testing.T, lim *limiter.Limiter, key string) (*limiter.Lease, limiter.Decision) {
	t.Helper()
	lease, d, err := lim.Acquire(t.Context(), key)
	require.NoError(t, err)
	require.True(t, d.Allowed, "denied: %+v", d)
	require.NotNil(t, lease)
	return lease, d
}

// denied asks for a lease that must be refused.
func denied(t *testing.T, lim *limiter.Limiter, key string) limiter.Decision {
	t.Helper()
	lease, d, err := lim.Acquire(t.Context(), key)
	require.NoError(t, err)
	require.False(t, d.Allowed, "admitted: %+v", d)
	require.Nil(t, lease)
	return d
}

// TestLeaseAcquireRelease: at most Limit leases held on a key; a release
// frees a slot at once; releasing twice is reported and changes nothing.
func TestLeaseAcquireRelease(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		lim := newLeaseLimiter(t, store, leaseConfig(2), fake)
		a, d := acquired(t, lim, "u")
		require.Equal(t, int64(1), d.Remaining)
		require.Equal(t, "u", a.Key())
		require.Equal(t, liveStart.Add(10*time.Second), a.Expires())
		fake.Advance(time.Second)
		b, d := acquired(t, lim, "u")
		require.Equal(t, int64(0), d.Remaining)
		d = denied(t, lim, "u")
		require.Equal(t, 9*time.Second, d.RetryAfter, "the first lease expires 10 s after it was granted")
		acquired(t, lim, "other") // keys are apart

		require.NoError(t, a.Release(ctx))
		require.ErrorIs(t, a.Release(ctx), limiter.ErrLeaseReleased)
		c, _ := acquired(t, lim, "u")
		denied(t, lim, "u") // a second release of a freed nothing
		require.NoError(t, b.Release(ctx))
		require.NoError(t, c.Release(ctx))
		p, err := lim.Peek(ctx, "u")
		require.NoError(t, err)
		require.Equal(t, int64(2), p.Remaining)
	})
}

// TestLeaseExpiry: a lease not released within the window expires (the
// holder crashed): its slot is granted again, and its late Release is
// reported (ErrLeaseNotHeld) without freeing the new holder's slot.
func TestLeaseExpiry(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		lim := newLeaseLimiter(t, store, leaseConfig(1), fake)
		old, _ := acquired(t, lim, "u")
		fake.Advance(10*time.Second - time.Millisecond)
		denied(t, lim, "u") // still held a millisecond before its timeout
		fake.Advance(time.Millisecond)
		fresh, _ := acquired(t, lim, "u")
		require.ErrorIs(t, old.Release(ctx), limiter.ErrLeaseNotHeld)
		require.ErrorIs(t, old.Release(ctx), limiter.ErrLeaseReleased)
		denied(t, lim, "u") // the late release left the new lease alone
		require.NoError(t, fresh.Release(ctx))
		acquired(t, lim, "u")
	})
}

// TestLeaseRenew: a renewed lease is held a window from its renewal, with
// a new id; a lapsed lease cannot be renewed (it is then released).
func TestLeaseRenew(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		lim := newLeaseLimiter(t, store, leaseConfig(1), fake)
		lease, _ := acquired(t, lim, "u")
		id := lease.ID()
		fake.Advance(8 * time.Second)
		require.NoError(t, lease.Renew(ctx))
		require.NotEqual(t, id, lease.ID(), "a renewal changes the id")
		require.Equal(t, fake.Now().Add(10*time.Second), lease.Expires())
		fake.Advance(8 * time.Second) // 16 s after the grant, 8 after the renewal
		denied(t, lim, "u")
		require.ErrorIs(t, lim.Release(ctx, "u", id), limiter.ErrLeaseNotHeld, "the id before the renewal holds nothing")
		denied(t, lim, "u")
		fake.Advance(2 * time.Second)
		next, _ := acquired(t, lim, "u")
		require.ErrorIs(t, lease.Renew(ctx), limiter.ErrLeaseNotHeld)
		require.ErrorIs(t, lease.Release(ctx), limiter.ErrLeaseReleased)
		denied(t, lim, "u") // the failed renewal took nothing
		require.NoError(t, next.Release(ctx))
	})
}

// TestReleaseByID: a lease id released through another limiter on the same
// store (another process) frees the slot; with the wrong key it is refused
// and frees nothing, even where the stores' ids coincide (both leases were
// granted in the same millisecond); a malformed id is a clear, bounded
// error.
func TestReleaseByID(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		lim := newLeaseLimiter(t, store, leaseConfig(1), fake)
		other := newLeaseLimiter(t, store, leaseConfig(1), fake)
		a, _ := acquired(t, lim, "a")
		b, _ := acquired(t, lim, "b")
		require.ErrorIs(t, other.Release(ctx, "b", a.ID()), limiter.ErrLeaseKey)
		denied(t, lim, "b") // b's lease, stamped like a's, is still held
		require.NoError(t, other.Release(ctx, "a", a.ID()))
		acquired(t, lim, "a")
		require.ErrorIs(t, a.Release(ctx), limiter.ErrLeaseNotHeld, "released by id elsewhere")
		require.ErrorIs(t, other.Release(ctx, "b", b.ID()+"0"), limiter.ErrInvalidRequest)
		require.NoError(t, b.Release(ctx))

		huge := strings.Repeat("L1.9.9.", 1<<18)
		for _, id := range []string{"", "x", "L1.1.1", "L1.1.0.00000000", "L1.a.1.00000000", "L1.1.1.0000000g", huge} {
			err := lim.Release(ctx, "a", id)
			require.ErrorIs(t, err, limiter.ErrInvalidRequest, "id %.30q", id)
			require.Less(t, len(err.Error()), 300, "the error of a %d-byte id is %d bytes", len(id), len(err.Error()))
		}
		require.ErrorIs(t, lim.Release(ctx, "", a.ID()), limiter.ErrInvalidRequest)
	})
}

// TestAllowOnConcurrencyRefused: Allow, AllowN and Wait on a concurrency
// limit would hold a slot nobody releases: refused, saying to use Acquire;
// Acquire on a rate limit is refused too. Peek and Reset work.
func TestAllowOnConcurrencyRefused(t *testing.T) {
	ctx := t.Context()
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(liveStart)
	lim := newLeaseLimiter(t, store, leaseConfig(1), fake)
	_, err = lim.Allow(ctx, "u")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	require.Contains(t, err.Error(), "use Acquire")
	_, err = lim.AllowN(ctx, "u", 1)
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	_, err = lim.Wait(ctx, "u")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)

	acquired(t, lim, "u")
	p, err := lim.Peek(ctx, "u")
	require.NoError(t, err)
	require.False(t, p.Allowed)
	require.NoError(t, lim.Reset(ctx, "u"))
	acquired(t, lim, "u")

	rate := newLeaseLimiter(t, store, limiter.Config{Limit: 1, Window: time.Minute}, fake)
	_, _, err = rate.Acquire(ctx, "u")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
	require.Contains(t, err.Error(), "use Allow")

	_, err = limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute,
		Guard: &limiter.Guard{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Minute}})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	_, _, err = lim.AcquireN(ctx, "u", 2)
	require.ErrorIs(t, err, limiter.ErrInvalidRequest, "a cost above the limit")
}

// TestLeaseSetConfig: a live change keeps the held leases: a lowered limit
// admits nothing until enough are released, a raised one the difference;
// a release uses the window in force (a lease older than the old window
// but within the new one is still held).
func TestLeaseSetConfig(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		cfg := leaseConfig(2)
		lim := newLeaseLimiter(t, store, cfg, fake)
		a, _ := acquired(t, lim, "u")
		b, _ := acquired(t, lim, "u")
		cfg.Limit = 1
		require.NoError(t, lim.SetConfig(cfg))
		denied(t, lim, "u")
		require.NoError(t, a.Release(ctx))
		denied(t, lim, "u") // one held, limit 1
		cfg.Limit = 3
		require.NoError(t, lim.SetConfig(cfg))
		c, _ := acquired(t, lim, "u")
		d, _ := acquired(t, lim, "u")
		denied(t, lim, "u")

		cfg.Window = 20 * time.Second
		require.NoError(t, lim.SetConfig(cfg))
		fake.Advance(15 * time.Second)
		denied(t, lim, "u") // the three are held under the new window
		require.NoError(t, b.Release(ctx), "held under the window in force")
		require.NoError(t, c.Release(ctx))
		require.NoError(t, d.Release(ctx))

		cfg = leaseConfig(3)
		require.NoError(t, lim.SetConfig(cfg))
		big, _, err := lim.AcquireN(ctx, "w", 3)
		require.NoError(t, err)
		require.NotNil(t, big)
		cfg.Limit = 1
		require.NoError(t, lim.SetConfig(cfg))
		require.NoError(t, big.Release(ctx), "a limit lowered below a lease's cost still lets it go")
		acquired(t, lim, "w")
	})
}

// TestLeaseShadow: a concurrency limit in shadow mode grants a lease
// always: a real one while it admits, one that holds nothing when it would
// have denied (ShadowDenied).
func TestLeaseShadow(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		cfg := leaseConfig(1)
		cfg.Mode = limiter.Shadow
		lim := newLeaseLimiter(t, store, cfg, fake)
		real, d := acquired(t, lim, "u")
		require.False(t, d.ShadowDenied)
		over, d := acquired(t, lim, "u")
		require.True(t, d.ShadowDenied)
		require.NoError(t, over.Release(ctx))
		_, d = acquired(t, lim, "u")
		require.True(t, d.ShadowDenied, "the no-op release freed nothing")
		require.NoError(t, real.Release(ctx))
		_, d = acquired(t, lim, "u")
		require.False(t, d.ShadowDenied, "the real lease's release freed its slot")

		// Enforced, the same counts deny.
		cfg.Mode = limiter.Enforce
		require.NoError(t, lim.SetConfig(cfg))
		denied(t, lim, "u")
	})
}

// TestLeaseLists: an exempt key gets a lease that holds nothing; a
// deny-listed key none.
func TestLeaseLists(t *testing.T) {
	ctx := t.Context()
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(liveStart)
	cfg := leaseConfig(1)
	cfg.Exempt, cfg.Deny = []string{"vip", "10.0.0.0/8"}, []string{"bad"}
	lim := newLeaseLimiter(t, store, cfg, fake)
	for range 3 {
		lease, d := acquired(t, lim, "vip")
		require.True(t, d.Exempt)
		require.NoError(t, lease.Release(ctx))
		require.ErrorIs(t, lease.Release(ctx), limiter.ErrLeaseReleased)
		_, d = acquired(t, lim, "10.1.2.3")
		require.True(t, d.Exempt)
	}
	p, err := lim.Peek(ctx, "vip")
	require.NoError(t, err)
	require.True(t, p.Exempt)
	d := denied(t, lim, "bad")
	require.True(t, d.DenyListed)
	acquired(t, lim, "plain")
	denied(t, lim, "plain")
}

// TestCompositeAcquire: a lease and rate units taken together, all or
// nothing: a denied lease takes no rate unit, a rate denial takes no
// lease.
func TestCompositeAcquire(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		fake := clock.NewFake(liveStart)
		c, err := limiter.NewComposite(store, []limiter.Config{
			{Limit: 3, Window: time.Hour, Prefix: "rate:"},
			leaseConfig(1),
		}, limiter.WithClock(fake))
		require.NoError(t, err)
		lease, d, err := c.Acquire(ctx, "u", "u")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, "u", lease.Key())
		for range 3 {
			none, d, err := c.Acquire(ctx, "u", "u")
			require.NoError(t, err)
			require.Nil(t, none)
			require.False(t, d.Allowed)
			require.Equal(t, 1, d.Rule, "the concurrency limit denies")
		}
		rate, err := limiter.New(store, limiter.Config{Limit: 3, Window: time.Hour, Prefix: "rate:"}, limiter.WithClock(fake))
		require.NoError(t, err)
		p, err := rate.Peek(ctx, "u")
		require.NoError(t, err)
		require.Equal(t, int64(2), p.Remaining, "denied leases took no rate unit")

		require.NoError(t, lease.Release(ctx))
		for range 2 {
			l, d, err := c.Acquire(ctx, "u", "u")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.NoError(t, l.Release(ctx))
		}
		none, d, err := c.Acquire(ctx, "u", "u")
		require.NoError(t, err)
		require.Nil(t, none)
		require.Equal(t, 0, d.Rule, "the rate limit denies")
		cc := newLeaseLimiter(t, store, leaseConfig(1), fake)
		p, err = cc.Peek(ctx, "u")
		require.NoError(t, err)
		require.True(t, p.Allowed, "the rate denial took no lease")

		_, err = c.Allow(ctx, "u", "u")
		require.ErrorIs(t, err, limiter.ErrInvalidRequest)
		l, _, err := c.Acquire(ctx, "v", "v")
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, "v", l.ID()))
		require.ErrorIs(t, l.Release(ctx), limiter.ErrLeaseNotHeld)
	})
	_, err := limiter.NewComposite(memorystoreOrFail(t), []limiter.Config{leaseConfig(1), {Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Second, Prefix: "cc2:"}})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	rateOnly, err := limiter.NewComposite(memorystoreOrFail(t), []limiter.Config{{Limit: 1, Window: time.Second}})
	require.NoError(t, err)
	_, _, err = rateOnly.Acquire(t.Context(), "u")
	require.ErrorIs(t, err, limiter.ErrInvalidRequest)
}

func memorystoreOrFail(t *testing.T) backend.Store {
	s, err := memorystore.New()
	require.NoError(t, err)
	return s
}

// TestLeaseWithGuard: a concurrency limit guarded by a rate limit: the
// guard's denial takes no lease, whether the guard lives in the limiter's
// store (one TakeAll), in a store of its own, or in one whose peek admitted
// and whose take then denied (another caller took the guard's last unit
// between them): the lease taken meanwhile is given back.
func TestLeaseWithGuard(t *testing.T) {
	for _, guardStore := range []string{"same", "own", "racing"} {
		t.Run(guardStore, func(t *testing.T) {
			ctx := t.Context()
			fake := clock.NewFake(liveStart)
			main := memorystoreOrFail(t)
			cfg := leaseConfig(5)
			cfg.Guard = &limiter.Guard{Limit: 2, Window: time.Hour}
			switch guardStore {
			case "own":
				cfg.Guard.Store = memorystoreOrFail(t)
			case "racing":
				cfg.Guard.Store = peekAdmits{memorystoreOrFail(t)}
			}
			lim := newLeaseLimiter(t, main, cfg, fake)
			for range 2 {
				acquired(t, lim, "u")
			}
			d := denied(t, lim, "u")
			require.Equal(t, limiter.GuardRule, d.Rule)
			held := newLeaseLimiter(t, main, leaseConfig(5), fake) // the main limit alone
			p, err := held.Peek(ctx, "u")
			require.NoError(t, err)
			require.Equal(t, int64(3), p.Remaining, "two leases held: the guard's denial took none")
		})
	}
}

// peekAdmits is a guard store whose Peek always admits: its Take can then
// deny after the main limit took its lease.
type peekAdmits struct{ backend.Store }

func (p peekAdmits) Peek(_ context.Context, req backend.Request) (backend.Result, error) {
	return backend.Result{Allowed: true, Limit: req.Rule.Limit, Remaining: req.Rule.Limit}, nil
}

// TestPlansAcquire: a plan's concurrency limit, chosen per request.
func TestPlansAcquire(t *testing.T) {
	store := memorystoreOrFail(t)
	fake := clock.NewFake(liveStart)
	free := leaseConfig(1)
	free.Prefix = "cc:free:"
	pro := leaseConfig(3)
	pro.Prefix = "cc:pro:"
	plans, err := limiter.NewPlans(map[string]*limiter.Limiter{
		"free": newLeaseLimiter(t, store, free, fake), "pro": newLeaseLimiter(t, store, pro, fake),
	}, func(_ context.Context, key string) (string, error) {
		if strings.HasPrefix(key, "p") {
			return "pro", nil
		}
		return "free", nil
	})
	require.NoError(t, err)
	granted := map[string]int{}
	for _, key := range []string{"f1", "p1"} {
		for range 4 {
			lease, _, plan, err := plans.Acquire(t.Context(), key)
			require.NoError(t, err)
			if lease != nil {
				granted[plan]++
			}
		}
	}
	require.Equal(t, map[string]int{"free": 1, "pro": 3}, granted)
}

// TestLeaseConcurrentRelease: one Lease released by many goroutines at
// once is released once.
func TestLeaseConcurrentRelease(t *testing.T) {
	store := memorystoreOrFail(t)
	lim := newLeaseLimiter(t, store, leaseConfig(1), clock.NewFake(liveStart))
	lease, _ := acquired(t, lim, "u")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { errs[i] = lease.Release(context.Background()) })
	}
	wg.Wait()
	ok, twice := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, limiter.ErrLeaseReleased):
			twice++
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, len(errs)-1, twice)
}
