package httplimit

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/transport"
)

// tab is a reservation over AllowN that records how it ended, until
// limiter.Limiter.ReserveN is there to test against.
type tab struct {
	mu       sync.Mutex
	settled  []int64
	canceled int
}

type fakeRes struct{ t *tab }

func (f fakeRes) Settle(_ context.Context, actual int64) (limiter.Decision, error) {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	f.t.settled = append(f.t.settled, actual)
	return limiter.Decision{Allowed: true}, nil
}

func (f fakeRes) Cancel(context.Context) error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	f.t.canceled++
	return nil
}

// costServer serves handler behind cost middleware on a limit of 100 a
// minute, on a loopback server, keyed by the X-Key header; the estimate is
// the X-Estimate header.
func costServer(t *testing.T, c Cost, handler http.Handler) (*httptest.Server, *tab) {
	t.Helper()
	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "tok:"})
	require.NoError(t, err)
	tb := &tab{}
	reserve := func(ctx context.Context, key string, n int64) (transport.Settler, limiter.Decision, error) {
		d, err := lim.AllowN(ctx, key, n)
		if err != nil || !d.Allowed {
			return nil, d, err
		}
		return fakeRes{tb}, d, nil
	}
	if c.Estimate == nil {
		c.Estimate = func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Estimate"), 10, 64) }
	}
	m, err := newCost(lim, reserve, c, WithKey(Header("X-Key")), WithPolicyName("tokens"), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	srv := httptest.NewServer(m.Handler(handler))
	t.Cleanup(srv.Close)
	return srv, tb
}

// costGet sends a POST, which the client does not retry when the server
// aborts it.
func costGet(t *testing.T, srv *httptest.Server, estimate string, accept string, mode ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/", nil)
	require.NoError(t, err)
	req.Header.Set("X-Key", "alice")
	req.Header.Set("X-Estimate", estimate)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header["X-Mode"] = mode
	resp, err := srv.Client().Do(req)
	if err != nil {
		return nil, err.Error()
	}
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(body)
}

// TestCostSettles: the reported cost, else the response's, else the
// estimate, settles the reservation; a panic before a report cancels it,
// after one settles it.
func TestCostSettles(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Mode") {
		case "report":
			assert.True(t, ReportCost(r.Context(), 7))
		case "trailer":
			w.Header().Set("Trailer", "X-Cost")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Cost", "9")
		case "abort":
			panic(http.ErrAbortHandler)
		case "report-abort":
			ReportCost(r.Context(), 3)
			panic(http.ErrAbortHandler)
		}
	})
	actual := func(_ *http.Request, h http.Header) (int64, bool) {
		n, err := strconv.ParseInt(h.Get("X-Cost"), 10, 64)
		return n, err == nil
	}
	srv, tb := costServer(t, Cost{Actual: actual}, handler)
	for _, mode := range []string{"report", "trailer", "none", "abort", "report-abort"} {
		resp, _ := costGet(t, srv, "20", "", mode)
		if resp != nil {
			assert.Equal(t, http.StatusOK, resp.StatusCode, mode)
			assert.Equal(t, `"tokens";q=100;w=60`, resp.Header.Get("RateLimit-Policy"), mode)
		}
	}
	srv.Close() // waits for the handlers, and so the settlements
	assert.Equal(t, []int64{7, 9, 20, 3}, tb.settled)
	assert.Equal(t, 1, tb.canceled)
}

// TestCostRefusal: a reservation refused is answered as Middleware answers
// a denial (the control: the same limit under New), and a bad estimate is
// 400; one above the limit reserves the limit.
func TestCostRefusal(t *testing.T) {
	srv, tb := costServer(t, Cost{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	resp, body := costGet(t, srv, "-1", "")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "below 1")
	resp, _ = costGet(t, srv, "x", "")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = costGet(t, srv, "500", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"tokens";r=0`, resp.Header.Get("RateLimit"), "the limit, 100, was reserved")
	got, body := costGet(t, srv, "1", "application/json")
	require.Equal(t, http.StatusTooManyRequests, got.StatusCode)
	srv.Close()
	assert.Equal(t, []int64{100}, tb.settled)

	// The control: plain middleware on a spent limit answers alike.
	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "tok:"})
	require.NoError(t, err)
	_, err = lim.AllowN(t.Context(), "alice", 100)
	require.NoError(t, err)
	m, err := New(lim, WithKey(Header("X-Key")), WithPolicyName("tokens"))
	require.NoError(t, err)
	plain := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer plain.Close()
	want, wantBody := costGet(t, plain, "1", "application/json")
	require.Equal(t, http.StatusTooManyRequests, want.StatusCode)
	assert.Equal(t, wantBody, body)
	for _, h := range []string{"Content-Type", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		assert.Equal(t, want.Header.Get(h), got.Header.Get(h), h)
	}
	assert.Equal(t, "application/problem+json", got.Header.Get("Content-Type"))
}

// TestReportCostOutside: with no reservation held, ReportCost says so.
func TestReportCostOutside(t *testing.T) {
	assert.False(t, ReportCost(t.Context(), 5))
	_, err := newCost(nil, nil, Cost{})
	assert.ErrorContains(t, err, "Cost.Estimate is nil")
}
