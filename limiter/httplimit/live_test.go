package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/internal/transporttest"
)

// TestPolicyFollowsSetConfig: after SetConfig, a real HTTP server's
// responses carry the new policy (limit, window, guard) and the t of the
// new algorithm, and the counts made before the change still count. On
// the memory store and on a real redis-server through both clients.
func TestPolicyFollowsSetConfig(t *testing.T) {
	check := func(t *testing.T, store backend.Store) {
		fake := clock.NewFake(start)
		cfg := limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Minute, Prefix: "live:"}
		lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
		require.NoError(t, err)
		mw, err := New(lim, WithHeaders(DraftHeaders|XRateLimitHeaders))
		require.NoError(t, err)
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
		defer srv.Close()
		get := func() *http.Response {
			resp, err := srv.Client().Get(srv.URL)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			return resp
		}
		resp := get()
		require.Equal(t, `"default";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
		require.Equal(t, `"default";r=2`, resp.Header.Get("RateLimit"))
		require.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))

		cfg.Algorithm, cfg.Limit, cfg.Window = algorithms.SlidingLog, 10, 30*time.Second
		cfg.Guard = &limiter.Guard{Limit: 100, Window: time.Hour}
		require.NoError(t, lim.SetConfig(cfg))
		resp = get()
		require.Equal(t, `"default";q=10;w=30, "default-guard";q=100;w=3600`, resp.Header.Get("RateLimit-Policy"))
		require.Equal(t, `"default";r=8`, resp.Header.Get("RateLimit"), "the request before the change counts")
		require.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))

		// A fixed window tells t; the policy follows the algorithm too.
		cfg.Algorithm, cfg.Guard = algorithms.FixedWindow, nil
		require.NoError(t, lim.SetConfig(cfg))
		resp = get()
		require.Equal(t, `"default";q=10;w=30`, resp.Header.Get("RateLimit-Policy"))
		require.Equal(t, `"default";r=9;t=30`, resp.Header.Get("RateLimit"), "a new algorithm counts from zero")
	}
	t.Run("memory", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		check(t, s)
	})
	redis := redistest.Start(t)
	for _, client := range []string{storeurl.GoRedis, storeurl.Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := redis.Do("FLUSHALL")
			require.NoError(t, err)
			op, err := storeurl.Open(t.Context(), "redis://"+redis.Addr()+"/0", storeurl.WithClient(client))
			require.NoError(t, err)
			defer func() { _ = op.Close() }()
			check(t, op.Store)
		})
	}
}

// TestReloadToAndFromConcurrency (issue 22, defect 7): while the limit
// switches between "concurrency" and "fixed_window" as fast as it can, no
// request in flight is answered 400 (the middleware chose Acquire or Allow
// from one configuration, the limiter decided by another).
func TestReloadToAndFromConcurrency(t *testing.T) {
	lim, _ := transporttest.NewLimiter(t, nil, transporttest.LeaseConfig)
	mw, err := New(lim)
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	transporttest.ReloadLoop(t, lim, func() bool {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code == http.StatusOK
	})
}
