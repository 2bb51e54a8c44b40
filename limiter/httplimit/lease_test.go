package httplimit

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// leaseStores runs check on the memory store, then on a real redis-server
// through both clients (redis true).
func leaseStores(t *testing.T, check func(t *testing.T, store backend.Store, redis bool)) {
	t.Run("memory", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		check(t, s, false)
	})
	srv := redistest.Start(t)
	for _, client := range []string{storeurl.GoRedis, storeurl.Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := srv.Do("FLUSHALL")
			require.NoError(t, err)
			op, err := storeurl.Open(t.Context(), "redis://"+srv.Addr()+"/0", storeurl.WithClient(client))
			require.NoError(t, err)
			defer func() { _ = op.Close() }()
			check(t, op.Store, true)
		})
	}
}

// newLeaseLimiter returns a concurrency limiter of n leases lasting a
// minute, on a fake clock that only the test moves: no lease times out
// unless the test says so.
func newLeaseLimiter(t *testing.T, store backend.Store, n int64) (*limiter.Limiter, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(start)
	lim, err := limiter.New(store, limiter.Config{Algorithm: algorithms.Concurrency, Limit: n, Window: time.Minute, Prefix: "cc:"},
		limiter.WithClock(fake))
	require.NoError(t, err)
	return lim, fake
}

// quietServer is a loopback HTTP server for h that does not log the
// panics tests provoke.
func quietServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// status does a GET and returns the status code.
func status(t *testing.T, srv *httptest.Server) int {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// gauge counts handlers in flight and keeps the most seen at once.
type gauge struct {
	now, max atomic.Int64
}

func (g *gauge) enter() {
	n := g.now.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
}

func (g *gauge) leave() { g.now.Add(-1) }

var waitFor = transporttest.WaitFor

// gated sends two rounds of 2n requests, one at a time, to a server whose
// handlers stay in flight until the end, the fake clock moving a second
// between rounds, and returns the most handlers in flight at once and
// the 429s.
func gated(t *testing.T, mw *Middleware, fake *clock.Fake, n int) (maxInFlight, denied int64) {
	t.Helper()
	var g gauge
	gate := make(chan struct{})
	var entered, refused atomic.Int64
	srv := quietServer(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.enter()
		defer g.leave()
		entered.Add(1)
		<-gate
	})))
	var wg sync.WaitGroup
	sent := int64(0)
	for round := 0; round < 2; round++ {
		for i := 0; i < 2*n; i++ {
			sent++
			wg.Go(func() {
				if status(t, srv) == http.StatusTooManyRequests {
					refused.Add(1)
				}
			})
			// One at a time: the next is sent when this one is in its
			// handler or refused.
			waitFor(t, "a request to be served or refused", func() bool { return entered.Load()+refused.Load() == sent })
		}
		fake.Advance(time.Second)
	}
	close(gate)
	wg.Wait()
	return g.max.Load(), refused.Load()
}

// TestLeaseBoundsInFlight: under a concurrency limit of 3 no more than 3
// handlers are ever in flight on a real server, whatever arrives; the
// control, a rate limit of 3 a second, lets 6 be in flight once a second
// has passed, so the assertion catches a middleware that does not hold
// the slot while the handler runs.
func TestLeaseBoundsInFlight(t *testing.T) {
	const n = 3
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		lim, fake := newLeaseLimiter(t, store, n)
		mw, err := New(lim)
		require.NoError(t, err)
		maxInFlight, denied := gated(t, mw, fake, n)
		assert.Equal(t, int64(n), maxInFlight, "at most n in flight, and n reached")
		assert.Equal(t, int64(4*n-n), denied)
	})
	t.Run("control", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		fake := clock.NewFake(start)
		lim, err := limiter.New(s, limiter.Config{Algorithm: algorithms.SlidingLog, Limit: n, Window: time.Second, Prefix: "rl:"}, limiter.WithClock(fake))
		require.NoError(t, err)
		mw, err := New(lim)
		require.NoError(t, err)
		maxInFlight, _ := gated(t, mw, fake, n)
		assert.Equal(t, int64(2*n), maxInFlight, "a rate limit does not bound the handlers in flight")
	})
}

// load sends clients*each requests from clients goroutines to a server
// whose handlers yield a few times, and returns the most in flight at once
// and how many were admitted and denied.
func load(t *testing.T, mw *Middleware, clients, each int) (maxInFlight, admitted, denied int64) {
	t.Helper()
	var g gauge
	srv := quietServer(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.enter()
		defer g.leave()
		for range 20 {
			runtime.Gosched()
		}
	})))
	var wg sync.WaitGroup
	var ok, no atomic.Int64
	for range clients {
		wg.Go(func() {
			for range each {
				switch status(t, srv) {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					no.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return g.max.Load(), ok.Load(), no.Load()
}

// TestLeaseReleasedOnReturn: under load from 8 clients, a limit of 2 never
// has more than 2 handlers in flight, and far more than 2 requests are
// served, so each lease came back when its handler returned (the clock
// stands still: none timed out). The control keeps every lease: only 2
// are ever served.
func TestLeaseReleasedOnReturn(t *testing.T) {
	const n, clients, each = 2, 8, 25
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		lim, _ := newLeaseLimiter(t, store, n)
		mw, err := New(lim)
		require.NoError(t, err)
		maxInFlight, admitted, denied := load(t, mw, clients, each)
		assert.LessOrEqual(t, maxInFlight, int64(n))
		assert.Equal(t, int64(clients*each), admitted+denied)
		assert.Greater(t, admitted, int64(n), "leases came back")
		d, err := lim.Peek(t.Context(), "127.0.0.1")
		require.NoError(t, err)
		assert.Equal(t, int64(n), d.Remaining, "none left held")
	})
	t.Run("control", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		lim, _ := newLeaseLimiter(t, s, n)
		mw, err := New(lim)
		require.NoError(t, err)
		mw.set.ReleaseHook = func(context.Context, *limiter.Lease) error { return nil } // never released
		_, admitted, _ := load(t, mw, clients, each)
		assert.Equal(t, int64(n), admitted)
	})
}

// TestLeaseReleasedOnPanic: a handler that panics has its lease released
// before the panic goes on (an outer handler recovers it and finds the
// slot free), and the panic value is the handler's. The control keeps the
// lease: the slot is still held then.
func TestLeaseReleasedOnPanic(t *testing.T) {
	run := func(t *testing.T, store backend.Store, keep bool) (remainingAtRecover int64, next int) {
		lim, _ := newLeaseLimiter(t, store, 1)
		mw, err := New(lim)
		require.NoError(t, err)
		if keep {
			mw.set.ReleaseHook = func(context.Context, *limiter.Lease) error { return nil }
		}
		var panics, remaining atomic.Int64
		remaining.Store(-1)
		inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("panic") != "" {
				panic("boom")
			}
		}))
		srv := quietServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					assert.Equal(t, "boom", p, "the handler's panic goes on")
					d, err := lim.Peek(context.Background(), "127.0.0.1")
					assert.NoError(t, err)
					remaining.Store(d.Remaining)
					panics.Add(1)
					panic(http.ErrAbortHandler) // close the connection quietly
				}
			}()
			inner.ServeHTTP(w, r)
		}))
		_, err = srv.Client().Get(srv.URL + "?panic=1")
		require.Error(t, err, "the panicking request gets no response")
		require.Equal(t, int64(1), panics.Load())
		return remaining.Load(), status(t, srv)
	}
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		remaining, next := run(t, store, false)
		assert.Equal(t, int64(1), remaining, "released before the panic went on")
		assert.Equal(t, http.StatusOK, next)
	})
	t.Run("control", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		remaining, next := run(t, s, true)
		assert.Equal(t, int64(0), remaining)
		assert.Equal(t, http.StatusTooManyRequests, next)
	})
}

// TestLeaseReleasedOnDisconnect: a client that gives up while its handler
// runs ends the request's context; the handler returns, and the release,
// which must not run in that cancelled context, frees the slot: the next
// request is served at once, long before the lease would time out (the
// clock stands still). On Redis, the control releases in the request's
// context, as a naive middleware would: the client refuses a cancelled
// context, the lease stays held and the next request is refused.
func TestLeaseReleasedOnDisconnect(t *testing.T) {
	run := func(t *testing.T, store backend.Store, naive bool) int {
		lim, _ := newLeaseLimiter(t, store, 1)
		var logs safeBuffer
		mw, err := New(lim, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		require.NoError(t, err)
		if naive {
			mw.set.ReleaseHook = func(ctx context.Context, l *limiter.Lease) error { return l.Release(ctx) }
		}
		entered := make(chan struct{}, 1)
		var handled sync.WaitGroup
		inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("slow") == "" {
				return
			}
			entered <- struct{}{}
			<-r.Context().Done() // the work stops when the client leaves
		}))
		srv := quietServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer handled.Done()
			inner.ServeHTTP(w, r) // returns after the release
		}))
		handled.Add(1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?slow=1", nil)
			resp, err := srv.Client().Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			done <- err
		}()
		<-entered
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		handled.Wait() // the handler returned and the middleware released
		handled.Add(1)
		code := status(t, srv)
		if naive {
			assert.Contains(t, logs.String(), "lease not released")
		} else {
			assert.NotContains(t, logs.String(), "lease")
		}
		return code
	}
	leaseStores(t, func(t *testing.T, store backend.Store, redis bool) {
		assert.Equal(t, http.StatusOK, run(t, store, false), "the slot came back at once")
		if redis {
			require.NoError(t, store.Reset(t.Context(), backend.Key{Prefix: "cc:", ID: "127.0.0.1"},
				algorithms.Rule{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Minute}, time.Now()))
			assert.Equal(t, http.StatusTooManyRequests, run(t, store, true), "control: released in the cancelled context")
		}
	})
}

// safeBuffer is a log sink for concurrent writers.
type safeBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// TestLeaseFields: a concurrency limit's responses on a real server carry
// the draft's concurrent-requests quota unit and no window; a denial is a
// 429 with Retry-After (when the oldest lease times out, at the latest)
// and the quota-exceeded problem, and its RateLimit has no t, which a
// lease cannot tell.
func TestLeaseFields(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	lim, fake := newLeaseLimiter(t, s, 2)
	mw, err := New(lim, WithPolicyName("uploads"), WithHeaders(DraftHeaders|XRateLimitHeaders))
	require.NoError(t, err)
	gate := make(chan struct{})
	var entered atomic.Int64
	var seen atomic.Pointer[limiter.Lease]
	srv := quietServer(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(LeaseFrom(r.Context()))
		entered.Add(1)
		<-gate
	})))
	type answer struct {
		resp *http.Response
		body string
	}
	get := func() answer {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Accept", "application/problem+json")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		return answer{resp, string(b)}
	}
	answers := make(chan answer, 2)
	for i := range 2 {
		go func() { answers <- get() }()
		waitFor(t, "a handler", func() bool { return entered.Load() == int64(i+1) })
	}
	require.NotNil(t, seen.Load(), "LeaseFrom finds the lease")
	assert.Equal(t, "127.0.0.1", seen.Load().Key())
	fake.Advance(20 * time.Second)
	denied := get()
	assert.Equal(t, http.StatusTooManyRequests, denied.resp.StatusCode)
	assert.Equal(t, `"uploads";q=2;qu="concurrent-requests"`, denied.resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"uploads";r=0`, denied.resp.Header.Get("RateLimit"))
	assert.Equal(t, "40", denied.resp.Header.Get("Retry-After"), "the first lease times out 40 s from now")
	assert.Equal(t, "application/problem+json", denied.resp.Header.Get("Content-Type"))
	assert.Contains(t, denied.body, `"violated-policies":["uploads"]`)
	close(gate)
	for range 2 {
		a := <-answers
		assert.Equal(t, http.StatusOK, a.resp.StatusCode)
		assert.Equal(t, `"uploads";q=2;qu="concurrent-requests"`, a.resp.Header.Get("RateLimit-Policy"))
		assert.Regexp(t, `^"uploads";r=[01]$`, a.resp.Header.Get("RateLimit"))
		assert.Equal(t, "2", a.resp.Header.Get("X-RateLimit-Limit"))
	}
}

// TestCompositeLease: a composite of a rate limit (5 a minute) and a
// concurrency limit (2 in flight) per user, on a real server: a third
// request in flight is refused by the concurrency limit, and costs no rate
// unit (all or nothing); once the handlers return, requests go on until the
// rate limit refuses the sixth. Each refusal names its own policy.
func TestCompositeLease(t *testing.T) {
	leaseStores(t, func(t *testing.T, store backend.Store, _ bool) {
		fake := clock.NewFake(start)
		c, err := limiter.NewComposite(store, []limiter.Config{
			{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute, Prefix: "per-minute:"},
			{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute, Prefix: "in-flight:"},
		}, limiter.WithClock(fake))
		require.NoError(t, err)
		user := Header("X-User")
		mw, err := NewComposite(c, []Limit{{Key: user, Policy: "per-minute"}, {Key: user, Policy: "in-flight"}})
		require.NoError(t, err)
		gate := make(chan struct{})
		var g gauge
		srv := quietServer(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.enter()
			defer g.leave()
			if r.URL.Query().Get("hold") != "" {
				<-gate
			}
		})))
		get := func(query string) *http.Response {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+query, nil)
			req.Header.Set("X-User", "ann")
			req.Header.Set("Accept", "application/json")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			require.NoError(t, resp.Body.Close())
			resp.Header.Set("X-Body", string(body))
			return resp
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { assert.Equal(t, http.StatusOK, get("?hold=1").StatusCode) })
		}
		waitFor(t, "two requests in flight", func() bool { return g.now.Load() == 2 })
		resp := get("")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, `"per-minute";q=5;w=60, "in-flight";q=2;qu="concurrent-requests"`, resp.Header.Get("RateLimit-Policy"))
		assert.Equal(t, `"in-flight";r=0`, resp.Header.Get("RateLimit"))
		assert.Contains(t, resp.Header.Get("X-Body"), `"violated-policies":["in-flight"]`)
		close(gate)
		wg.Wait()
		// 2 rate units taken so far: the refused third took none.
		for want := int64(2); want >= 0; want-- {
			resp = get("")
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
		resp = get("")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the sixth")
		assert.Regexp(t, `^"per-minute";r=0;t=\d+$`, resp.Header.Get("RateLimit"))
		assert.Contains(t, resp.Header.Get("X-Body"), `"violated-policies":["per-minute"]`)
		assert.LessOrEqual(t, g.max.Load(), int64(2))
	})
}

// TestNewCompositeErrors: bad composites are refused with what to change.
func TestNewCompositeErrors(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	c, err := limiter.NewComposite(s, []limiter.Config{{Limit: 5, Window: time.Minute, Prefix: "a:"}, {Limit: 5, Window: time.Minute, Prefix: "b:"}})
	require.NoError(t, err)
	_, err = NewComposite(nil, nil)
	assert.ErrorContains(t, err, "composite is nil")
	_, err = NewComposite(c, []Limit{{Key: ClientIP(), Policy: "a"}})
	assert.ErrorContains(t, err, "1 limits described for a composite of 2")
	_, err = NewComposite(c, []Limit{{Key: ClientIP(), Policy: "a"}, {Policy: "b"}})
	assert.ErrorContains(t, err, "limit 1 has no key func")
	_, err = NewComposite(c, []Limit{{Key: ClientIP(), Policy: "a"}, {Key: ClientIP(), Policy: ""}})
	assert.ErrorContains(t, err, "policy name is empty")
	_, err = New(nil)
	assert.Error(t, err)
	_, err = New(mustLeaseLimiter(t), WithReleaseTimeout(0))
	assert.ErrorContains(t, err, "httplimit: WithReleaseTimeout: the timeout is 0s")
}

func mustLeaseLimiter(t *testing.T) *limiter.Limiter {
	s, err := memorystore.New()
	require.NoError(t, err)
	lim, _ := newLeaseLimiter(t, s, 1)
	return lim
}

// TestLeaseModeFollowsSetConfig: a limiter changed from a concurrency limit
// to a rate limit while it serves is taken with Allow from then on, and its
// fields follow: 3 sequential requests pass a concurrency limit of 1 (each
// lease comes back), then a rate limit of 1 refuses the second.
func TestLeaseModeFollowsSetConfig(t *testing.T) {
	lim := mustLeaseLimiter(t)
	mw, err := New(lim)
	require.NoError(t, err)
	srv := quietServer(t, mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	for range 3 {
		require.Equal(t, http.StatusOK, status(t, srv))
	}
	require.NoError(t, lim.SetConfig(limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Minute, Prefix: "rl:"}))
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"default";q=1;w=60`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, http.StatusTooManyRequests, status(t, srv))
}
