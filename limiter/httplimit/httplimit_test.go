package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/internal/transporttest"
)

var start = transporttest.Start

func newLimiter(t *testing.T, store backend.Store, limit int64, window time.Duration) (*limiter.Limiter, *clock.Fake) {
	return transporttest.NewLimiter(t, store, limiter.Config{Limit: limit, Window: window, Prefix: "test:"})
}

func newHandler(t *testing.T, lim *limiter.Limiter, served *atomic.Int64, opts ...Option) http.Handler {
	t.Helper()
	mw, err := New(lim, opts...)
	require.NoError(t, err)
	return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if served != nil {
			served.Add(1)
		}
		_, _ = io.WriteString(w, "ok")
	}))
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAdmitsThenDenies(t *testing.T) {
	lim, fake := newLimiter(t, nil, 3, time.Minute)
	var served atomic.Int64
	h := newHandler(t, lim, &served)

	// Sliding log: an admission does not say when the next entry slides out,
	// so its t is left out (draft-11 makes it optional).
	for i, want := range []string{`"default";r=2`, `"default";r=1`, `"default";r=0`} {
		w := do(h, request("192.0.2.1:1000"))
		require.Equal(t, http.StatusOK, w.Code, "request %d", i+1)
		assert.Equal(t, `"default";q=3;w=60`, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, want, w.Header().Get("RateLimit"))
		assert.Empty(t, w.Header().Get("Retry-After"))
		assert.Empty(t, w.Header().Get("X-RateLimit-Limit"), "legacy headers are opt-in")
		fake.Advance(10 * time.Second)
	}
	// t=30s: the first request slides out at t=60s.
	w := do(h, request("192.0.2.1:1000"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "30", w.Header().Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=30`, w.Header().Get("RateLimit"))
	assert.Equal(t, `"default";q=3;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Contains(t, w.Body.String(), "429")
	assert.EqualValues(t, 3, served.Load(), "a denied request never reaches the handler")

	// Another client has its own allowance.
	assert.Equal(t, http.StatusOK, do(h, request("192.0.2.2:1000")).Code)
	// After Retry-After the first client is admitted again.
	fake.Advance(30 * time.Second)
	assert.Equal(t, http.StatusOK, do(h, request("192.0.2.1:1000")).Code)
}

func TestRetryAfterRounding(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Millisecond, 1}, {time.Second, 1},
		{time.Second + time.Millisecond, 2}, {59*time.Second + 999*time.Millisecond, 60},
		{time.Minute, 60}, {time.Duration(1<<63 - 1), (1<<63-1)/int64(time.Second) + 1},
	} {
		assert.Equal(t, tc.want, RetryAfter(tc.d), "%v", tc.d)
	}

	// Through the middleware: a window of 1.5 s gives Retry-After 2 and w=2.
	lim, fake := newLimiter(t, nil, 1, 1500*time.Millisecond)
	h := newHandler(t, lim, nil)
	require.Equal(t, http.StatusOK, do(h, request("192.0.2.1:1")).Code)
	fake.Advance(1499 * time.Millisecond)
	w := do(h, request("192.0.2.1:1"))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"), "1 ms left rounds up to 1 s")
	assert.Equal(t, `"default";q=1;w=2`, w.Header().Get("RateLimit-Policy"))
	fake.Set(start.Add(100 * time.Millisecond))
	assert.Equal(t, "2", do(h, request("192.0.2.1:1")).Header().Get("Retry-After"), "1.4 s left rounds up to 2 s")
}

func TestHeaderSets(t *testing.T) {
	lim, _ := newLimiter(t, nil, 2, time.Minute)

	h := newHandler(t, lim, nil, WithHeaders(XRateLimitHeaders))
	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, "2", w.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", w.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "60", w.Header().Get("X-RateLimit-Reset"))
	assert.Empty(t, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Get("RateLimit-Policy"))

	h = newHandler(t, lim, nil, WithHeaders(DraftHeaders|XRateLimitHeaders), WithPolicyName(`crawl "per ip"`))
	w = do(h, request("192.0.2.1:1"))
	assert.Equal(t, `"crawl \"per ip\"";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"crawl \"per ip\"";r=0`, w.Header().Get("RateLimit"))
	assert.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
	w = do(h, request("192.0.2.1:1"))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("X-RateLimit-Reset"))
	assert.Equal(t, "60", w.Header().Get("Retry-After"))

	h = newHandler(t, lim, nil, WithHeaders(0))
	w = do(h, request("192.0.2.1:1"))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "Retry-After goes out whatever the header set")
	assert.Empty(t, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Get("X-RateLimit-Limit"))
}

func TestOptionErrors(t *testing.T) {
	lim, _ := newLimiter(t, nil, 1, time.Minute)
	_, err := New(nil)
	require.ErrorContains(t, err, "limiter is nil")
	for _, c := range []struct {
		name string
		opt  Option
	}{
		{"WithKey", WithKey(nil)}, {"WithPolicyName", WithPolicyName("")}, {"WithPolicyName", WithPolicyName("caf\u00e9")},
		{"WithPolicyName", WithPolicyName("a\nb")}, {"WithHeaders", WithHeaders(1 << 5)}, {"WithErrorHandler", WithErrorHandler(nil)},
		{"WithDeniedHandler", WithDeniedHandler(nil)}, {"WithDenyListHandler", WithDenyListHandler(nil)},
		{"WithMissingKey", WithMissingKey(nil)}, {"WithLogger", WithLogger(nil)}, {"WithReleaseTimeout", WithReleaseTimeout(0)},
	} {
		// A valid option first: the error names the one refused.
		_, err := New(lim, WithHeaders(DraftHeaders), c.opt)
		require.ErrorContains(t, err, "httplimit: "+c.name+": ", c.name)
	}
	_, err = New(lim, nil, WithPolicyName("p"), nil)
	require.NoError(t, err, "a nil option is ignored")
}

func TestMissingKey(t *testing.T) {
	lim, _ := newLimiter(t, nil, 5, time.Minute)
	var served atomic.Int64
	h := newHandler(t, lim, &served, WithKey(Header("X-Api-Key")))
	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Empty(t, w.Header().Get("RateLimit"))
	assert.Zero(t, served.Load())

	h = newHandler(t, lim, &served, WithKey(Header("X-Api-Key")), WithMissingKey(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})))
	assert.Equal(t, http.StatusUnauthorized, do(h, request("192.0.2.1:1")).Code)
	assert.Equal(t, http.StatusOK, do(h, request("192.0.2.1:1", "X-Api-Key", "k1")).Code)
	assert.EqualValues(t, 1, served.Load())
}

func TestDeniedHandler(t *testing.T) {
	lim, _ := newLimiter(t, nil, 1, time.Minute)
	h := newHandler(t, lim, nil, WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"}`)
	})))
	do(h, request("192.0.2.1:1"))
	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "set before the handler runs")
	assert.Contains(t, w.Body.String(), "quota-exceeded")
}

// failingStore fails every call, like a Redis store with Redis down, and
// counts the takes.
type failingStore struct {
	storetest.Down
	calls atomic.Int64
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func newFailingStore() *failingStore { return &failingStore{Down: storetest.Down{Err: errDown}} }

func (s *failingStore) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Down.Take(ctx, req)
}

func (s *failingStore) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Down.TakeAll(ctx, reqs)
}

func TestFailingStoreLetsRequestsThrough(t *testing.T) {
	store := newFailingStore()
	lim, _ := newLimiter(t, store, 1, time.Minute)
	var logs bytes.Buffer
	var served atomic.Int64
	h := newHandler(t, lim, &served, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 3 {
		w := do(h, request("192.0.2.1:1"))
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"default";q=1;w=60`, w.Header().Get("RateLimit-Policy"), "the policy is known without a decision")
		assert.Empty(t, w.Header().Get("RateLimit"), "no decision, no current limit")
	}
	assert.EqualValues(t, 3, served.Load())
	assert.EqualValues(t, 3, store.calls.Load())
	assert.Equal(t, 3, strings.Count(logs.String(), "level=ERROR"))
	assert.Contains(t, logs.String(), "connection refused")
	assert.Contains(t, logs.String(), "limit=test:")
}

func TestFailingStoreErrorHandler(t *testing.T) {
	lim, _ := newLimiter(t, newFailingStore(), 1, time.Minute)
	var got error
	h := newHandler(t, lim, nil, WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) bool {
		got = err
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		return false
	}))
	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, got, errDown)
}

// TestDegradedDecisions: with a fallback store over a failing primary the
// limit still holds, and the headers still go out.
func TestDegradedDecisions(t *testing.T) {
	guard, err := fallback.New(newFailingStore(), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	lim, _ := newLimiter(t, guard, 2, time.Minute)
	h := newHandler(t, lim, nil)
	assert.Equal(t, `"default";r=1`, do(h, request("192.0.2.1:1")).Header().Get("RateLimit"))
	assert.Equal(t, http.StatusOK, do(h, request("192.0.2.1:1")).Code)
	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=60`, w.Header().Get("RateLimit"))
	assert.NotZero(t, guard.Stats().Degraded)

	// Failing open, the fallback counts nothing: the policy goes out, but no
	// current limit (r=0 would tell clients to stop).
	lim, _ = newLimiter(t, guard.Policy(backend.FailOpen), 2, time.Minute)
	h = newHandler(t, lim, nil, WithHeaders(DraftHeaders|XRateLimitHeaders))
	for range 3 {
		w = do(h, request("192.0.2.1:1"))
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"default";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, "2", w.Header().Get("X-RateLimit-Limit"))
		assert.Empty(t, w.Header().Get("RateLimit"))
		assert.Empty(t, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Failing closed: denied with a Retry-After until the breaker probes.
	lim, _ = newLimiter(t, guard.Policy(backend.FailClosed), 2, time.Minute)
	w = do(newHandler(t, lim, nil), request("192.0.2.1:1"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	assert.Contains(t, w.Header().Get("RateLimit"), `"default";r=0;t=`)
}

// TestRealServer runs the middleware behind a real listener on 127.0.0.1
// and talks to it with a real HTTP client: the peer is 127.0.0.1, so
// forwarding headers count only when 127.0.0.1 is a trusted proxy.
func TestRealServer(t *testing.T) {
	run := func(t *testing.T, key KeyFunc) (*httptest.Server, *clock.Fake) {
		lim, fake := newLimiter(t, nil, 2, time.Minute)
		srv := httptest.NewServer(newHandler(t, lim, nil, WithKey(key), WithHeaders(DraftHeaders|XRateLimitHeaders)))
		t.Cleanup(srv.Close)
		return srv, fake
	}
	get := func(t *testing.T, srv *httptest.Server, xff string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp
	}

	t.Run("untrusted peer cannot spoof", func(t *testing.T) {
		key, err := ProxiedClientIP("", "10.0.0.0/8") // 127.0.0.1 is not trusted
		require.NoError(t, err)
		srv, _ := run(t, key)
		codes := []int{}
		for i := range 4 {
			codes = append(codes, get(t, srv, fmt.Sprintf("198.51.100.%d", i)).StatusCode)
		}
		assert.Equal(t, []int{200, 200, 429, 429}, codes, "one key (127.0.0.1) whatever the header says")
	})

	t.Run("trusted proxy", func(t *testing.T) {
		key, err := ProxiedClientIP("", "127.0.0.1", "10.0.0.0/8")
		require.NoError(t, err)
		srv, fake := run(t, key)
		for range 2 {
			require.Equal(t, http.StatusOK, get(t, srv, "198.51.100.1, 10.0.0.3").StatusCode)
		}
		resp := get(t, srv, "198.51.100.1")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "60", resp.Header.Get("Retry-After"))
		assert.Equal(t, `"default";r=0;t=60`, resp.Header.Get("RateLimit"))
		assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Limit"))
		// A client prepending addresses does not get a new key: the
		// rightmost untrusted hop is still 198.51.100.1.
		assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "6.6.6.6, 198.51.100.1").StatusCode)
		// Another client behind the proxy has its own allowance.
		resp = get(t, srv, "198.51.100.2")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, `"default";r=1`, resp.Header.Get("RateLimit"))
		assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Remaining"))
		fake.Advance(time.Minute)
		assert.Equal(t, http.StatusOK, get(t, srv, "198.51.100.1").StatusCode)
	})

	t.Run("concurrent clients", func(t *testing.T) {
		lim, _ := newLimiter(t, nil, 50, time.Minute)
		var served atomic.Int64
		srv := httptest.NewServer(newHandler(t, lim, &served))
		defer srv.Close()
		var ok, denied atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 25 {
					resp, err := srv.Client().Get(srv.URL + "/")
					if !assert.NoError(t, err) { // no require: not the test's goroutine
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusTooManyRequests:
						denied.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.EqualValues(t, 50, ok.Load(), "exactly the limit is admitted")
		assert.EqualValues(t, 150, denied.Load())
		assert.EqualValues(t, 50, served.Load())
	})

	t.Run("failing store", func(t *testing.T) {
		lim, _ := newLimiter(t, newFailingStore(), 2, time.Minute)
		srv := httptest.NewServer(newHandler(t, lim, nil, WithLogger(slog.New(slog.DiscardHandler))))
		defer srv.Close()
		for range 3 {
			resp := get(t, srv, "")
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, `"default";q=2;w=60`, resp.Header.Get("RateLimit-Policy"))
		}
	})
}

// TestStacked: two limits on one route each add their policy to the draft
// fields, and the tighter one denies.
func TestStacked(t *testing.T) {
	perClient, _ := newLimiter(t, nil, 5, time.Minute)
	perRoute, _ := newLimiter(t, nil, 2, time.Second)
	outer, err := New(perClient, WithPolicyName("client"))
	require.NoError(t, err)
	inner, err := New(perRoute, WithPolicyName("route"), WithKey(Route(nil)))
	require.NoError(t, err)
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	w := do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, []string{`"client";q=5;w=60`, `"route";q=2;w=1`}, w.Header().Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"client";r=4`, `"route";r=1`}, w.Header().Values("RateLimit"))
	do(h, request("192.0.2.1:1"))
	w = do(h, request("192.0.2.1:1"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, []string{`"client";r=2`, `"route";r=0;t=1`}, w.Header().Values("RateLimit"))
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
}

func TestGuardPolicyHeaders(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC))
	lim, err := limiter.New(store, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "g:",
		Guard: &limiter.Guard{Limit: 4, Window: time.Hour}}, limiter.WithClock(fake))
	require.NoError(t, err)
	mw, err := New(lim, WithPolicyName("api"), WithHeaders(DraftHeaders|XRateLimitHeaders))
	require.NoError(t, err)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := get()
	require.Equal(t, `"api";q=3;w=60, "api-guard";q=4;w=3600`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"api";r=2`, rec.Header().Get("RateLimit"), "sliding log: no t on admission")
	get()
	fake.Advance(time.Minute)
	get()
	rec = get() // the guard's 4th and last: it has the least left
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"api-guard";r=0;t=3510`, rec.Header().Get("RateLimit"))
	require.Equal(t, "4", rec.Header().Get("X-RateLimit-Limit"))
	rec = get()
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "3510", rec.Header().Get("Retry-After"))
}
