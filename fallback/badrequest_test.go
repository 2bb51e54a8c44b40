package fallback_test

import (
	"context"
	"errors"
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

// badCall is one call fallback must refuse with an invalid-input error.
type badCall struct {
	name string
	call func(ctx context.Context, s *fallback.Store) error
}

// badCalls covers every entry point with a request the store underneath
// would refuse.
func badCalls() []badCall {
	good := func() backend.Request {
		return backend.Request{Key: backend.Key{Prefix: "bad:", ID: "u"}, Rule: rule, Now: time.Now(), Cost: 1}
	}
	with := func(edit func(*backend.Request)) backend.Request { r := good(); edit(&r); return r }
	take := func(r backend.Request) func(context.Context, *fallback.Store) error {
		return func(ctx context.Context, s *fallback.Store) error { _, err := s.Take(ctx, r); return err }
	}
	lease := algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute}
	return []badCall{
		{"empty key", take(with(func(r *backend.Request) { r.Key.ID = "" }))},
		{"zero cost", take(with(func(r *backend.Request) { r.Cost = 0 }))},
		{"cost over limit", take(with(func(r *backend.Request) { r.Cost = rule.Limit + 1 }))},
		{"zero limit", take(with(func(r *backend.Request) { r.Rule.Limit = 0 }))},
		{"brace in prefix", take(with(func(r *backend.Request) { r.Key.Prefix = "a{b" }))},
		{"time before epoch", take(with(func(r *backend.Request) { r.Now = time.UnixMilli(-5) }))},
		{"peek empty key", func(ctx context.Context, s *fallback.Store) error {
			_, err := s.Peek(ctx, with(func(r *backend.Request) { r.Key.ID = "" }))
			return err
		}},
		{"takeall none", func(ctx context.Context, s *fallback.Store) error { _, err := s.TakeAll(ctx, nil); return err }},
		{"takeall same key twice", func(ctx context.Context, s *fallback.Store) error {
			_, err := s.TakeAll(ctx, []backend.Request{good(), good()})
			return err
		}},
		{"reset empty key", func(ctx context.Context, s *fallback.Store) error {
			return s.Reset(ctx, backend.Key{Prefix: "bad:"}, rule, time.Now())
		}},
		{"release of a rate limit", func(ctx context.Context, s *fallback.Store) error {
			_, err := s.Release(ctx, good(), 7)
			return err
		}},
		{"renew of a rate limit, local id", func(ctx context.Context, s *fallback.Store) error {
			_, err := s.Renew(ctx, good(), -7)
			return err
		}},
		{"release cost over limit, local id", func(ctx context.Context, s *fallback.Store) error {
			_, err := s.Release(ctx, with(func(r *backend.Request) { r.Rule, r.Cost = lease, 3 }), -7)
			return err
		}},
	}
}

// TestBadRequestsAreRefusedUpAndDown: fallback passes requests on unchecked
// while the primary answers (the store checks them), and checks them itself
// only where it answers alone. Either way every bad call, on every entry
// point, over real Redis with both clients, fails with an invalid-input
// error, never a panic, a failure count or a degraded decision: first with
// Redis up, then with Redis killed and the breaker open under each policy.
// The control: with the breaker open, a good request is admitted under
// FailOpen with no store asked, so only fallback's own check can refuse the
// bad ones there.
func TestBadRequestsAreRefusedUpAndDown(t *testing.T) {
	for _, client := range []string{"goredis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			srv := redistest.Start(t)
			var primary backend.Store
			if client == "goredis" {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
				t.Cleanup(func() { _ = c.Close() })
				gs, err := goredisstore.New(c)
				require.NoError(t, err)
				primary = gs
			} else {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true,
					DisableRetry: true, Dialer: net100ms()})
				require.NoError(t, err)
				t.Cleanup(c.Close)
				rs, err := rueidisstore.New(c)
				require.NoError(t, err)
				primary = rs
			}
			s := newStore(t, primary, fallback.WithFailureThreshold(1), fallback.WithOpenTimeout(time.Hour))
			ctx := t.Context()
			refused := func(t *testing.T, st *fallback.Store) {
				t.Helper()
				before := st.Stats()
				for _, bc := range badCalls() {
					var err error
					require.NotPanics(t, func() { err = bc.call(ctx, st) }, bc.name)
					require.Error(t, err, bc.name)
					require.True(t, errors.Is(err, algorithms.ErrInvalidRequest) || errors.Is(err, algorithms.ErrInvalidRule),
						"%s: %v", bc.name, err)
					require.NotErrorIs(t, err, fallback.ErrUnavailable, bc.name)
				}
				after := st.Stats()
				require.Equal(t, before.PrimaryFailures, after.PrimaryFailures, "a bad request counted as a primary failure")
				require.Equal(t, before.Degraded, after.Degraded, "a bad request was decided by policy")
			}

			t.Run("up", func(t *testing.T) {
				refused(t, s)
				require.Equal(t, backend.BreakerClosed, s.State())
			})

			srv.Kill()
			_, err := s.Take(ctx, req("opens"))
			require.NoError(t, err)
			require.Equal(t, backend.BreakerOpen, s.State(), "the dead primary opened the breaker")

			for _, p := range []backend.FailurePolicy{backend.FailOpen, backend.FailClosed, backend.LocalPolicy(1), backend.LocalPolicy(3)} {
				t.Run("open/"+p.String(), func(t *testing.T) { refused(t, s.Policy(p)) })
			}

			t.Run("control", func(t *testing.T) {
				res, err := s.Policy(backend.FailOpen).Take(ctx, req("good"))
				require.NoError(t, err)
				require.True(t, res.Allowed && res.Degraded, "FailOpen admits without asking any store: %+v", res)
			})
		})
	}
}
