package httplimit

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
)

// reserveServer serves handler behind NewCost on a fixed window of 100
// per minute on store, on a fake clock, keyed by X-Key, estimated by
// X-Estimate, on a loopback server.
func reserveServer(t *testing.T, store backend.Store, prefix string, handler http.Handler) *httptest.Server {
	t.Helper()
	lim, err := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute, Prefix: prefix},
		limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	m, err := NewCost(lim, Cost{Estimate: func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("X-Estimate"), 10, 64)
	}}, WithKey(Header("X-Key")), WithPolicyName("tokens"), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler(handler))
	t.Cleanup(srv.Close)
	return srv
}

// reportHandler reports the X-Actual header as the cost, when there is one.
var reportHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if a := r.Header.Get("X-Actual"); a != "" {
		n, _ := strconv.ParseInt(a, 10, 64)
		ReportCost(r.Context(), n)
	}
})

func post(t *testing.T, srv *httptest.Server, estimate, actual string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/", nil)
	require.NoError(t, err)
	req.Header.Set("X-Key", "k")
	req.Header.Set("X-Estimate", estimate)
	if actual != "" {
		req.Header.Set("X-Actual", actual)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestCostRefunds: reserving 40 and settling 10 gives 30 back, so 7
// requests fit in 100 (the 8th finds 30 left); the control, a handler that
// reports nothing, is charged its estimates: 2 fit.
func TestCostRefunds(t *testing.T) {
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		for _, tc := range []struct {
			actual string
			want   int
		}{{"10", 7}, {"", 2}} {
			srv := reserveServer(t, store, "refund"+tc.actual+":", reportHandler)
			admitted := 0
			for range 10 {
				if post(t, srv, "40", tc.actual) == http.StatusOK {
					admitted++
				}
			}
			assert.Equal(t, tc.want, admitted, "actual %q", tc.actual)
		}
		// A settled excess is debt: 90 over an estimate of 10 spends the
		// window.
		srv := reserveServer(t, store, "debt:", reportHandler)
		require.Equal(t, http.StatusOK, post(t, srv, "10", "100"))
		assert.Equal(t, http.StatusTooManyRequests, post(t, srv, "1", ""))
	})
}

// TestCostBound: 16 concurrent requests with estimates at least their
// actual costs never cost more than the limit in all; the control, with
// estimates of 1 below actual costs of 30, holds the admitted handlers
// until all 16 are in and overshoots.
func TestCostBound(t *testing.T) {
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		for _, control := range []bool{false, true} {
			var spent atomic.Int64
			var in sync.WaitGroup
			in.Add(16)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if control {
					in.Done()
					in.Wait()
				}
				spent.Add(30)
				ReportCost(r.Context(), 30)
			})
			srv := reserveServer(t, store, "bound"+strconv.FormatBool(control)+":", h)
			estimate := "30"
			if control {
				estimate = "1"
			}
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					if code := post(t, srv, estimate, ""); code != http.StatusOK && !control {
						in.Done() // refused: not coming in
					}
				})
			}
			wg.Wait()
			if control {
				assert.Greater(t, spent.Load(), int64(100), "the control overshoots")
			} else {
				assert.LessOrEqual(t, spent.Load(), int64(100))
				assert.Equal(t, int64(90), spent.Load(), "3 of 30 fit")
			}
		}
	})
}

// TestCostPanicSettles: with a real limiter on every store, a handler that
// panics before reporting (http.ErrAbortHandler or another value) has its
// reservation cancelled, all 40 back; one that reported 30 first is
// settled at 30. The control returns without reporting and is charged its
// estimate, so a panic that settled the estimate would be seen.
func TestCostPanicSettles(t *testing.T) {
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("X-Key") {
			case "abort":
				panic(http.ErrAbortHandler)
			case "boom":
				panic("boom")
			case "report-abort":
				ReportCost(r.Context(), 30)
				panic(http.ErrAbortHandler)
			}
		})
		cfg := limiter.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute, Prefix: "panic:"}
		lim, err := limiter.New(store, cfg, limiter.WithClock(clock.NewFake(start)))
		require.NoError(t, err)
		m, err := NewCost(lim, Cost{Estimate: func(*http.Request) (int64, error) { return 40, nil }},
			WithKey(Header("X-Key")), WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(m.Handler(handler))
		srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) // the panics' stacks
		srv.Start()
		want := map[string]int64{"abort": 100, "boom": 100, "report-abort": 70, "control": 60}
		for key := range want {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/", nil)
			require.NoError(t, err)
			req.Header.Set("X-Key", key)
			if resp, err := srv.Client().Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
		srv.Close() // waits for the handlers, and so the settlements
		for key, left := range want {
			d, err := lim.Peek(t.Context(), key)
			require.NoError(t, err)
			assert.Equal(t, left, d.Remaining, "%s", key)
		}
	})
}
