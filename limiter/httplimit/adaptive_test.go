package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/adaptive"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

func TestAdaptiveRefusesWith503AndPerClientRunsFirst(t *testing.T) {
	lim, err := adaptive.New(adaptive.Config{Law: adaptive.Fixed{}, Initial: 1})
	require.NoError(t, err)
	store, err := memorystore.New()
	require.NoError(t, err)
	perClient, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Hour, Prefix: "c:"})
	require.NoError(t, err)
	pk, err := httplimit.New(perClient, httplimit.WithKey(httplimit.Header("X-Client")))
	require.NoError(t, err)
	mw, err := httplimit.NewAdaptive(lim, httplimit.WithPerClient(pk), httplimit.WithPriority(httplimit.PriorityHeader("X-Priority")))
	require.NoError(t, err)

	inside := make(chan struct{})
	release := make(chan struct{})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Client") == "a" {
			close(inside)
			<-release
		}
	}))
	send := func(client string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Client", client)
		req.Header.Set("Accept", "application/json")
		h.ServeHTTP(rec, req)
		return rec
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- send("a") }()
	<-inside
	// The service is full: another client is refused 503.
	rec := send("b")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	// Client a, over its own limit, is refused 429 by the per-client
	// limit before it reaches the adaptive one.
	rec = send("a")
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	close(release)
	require.Equal(t, http.StatusOK, (<-done).Code)
	require.Zero(t, lim.InFlight())
	// Control: a free slot admits.
	require.Equal(t, http.StatusOK, send("c").Code)
}

type status int

func (s status) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: int(s), Body: http.NoBody}, nil
}

func TestThrottleTransportRefusesLocally(t *testing.T) {
	th, err := adaptive.NewThrottle(adaptive.ThrottleConfig{Clock: clock.NewFake(time.Unix(0, 0)), Rand: func() float64 { return 0.5 }})
	require.NoError(t, err)
	rt, err := httplimit.ThrottleTransport(th, status(http.StatusServiceUnavailable))
	require.NoError(t, err)
	client := &http.Client{Transport: rt}
	var throttled int
	for range 20 {
		resp, err := client.Get("http://backend.invalid/")
		if errors.Is(err, adaptive.ErrThrottled) {
			throttled++
			continue
		}
		require.NoError(t, err)
		resp.Body.Close()
	}
	// Nothing accepted: p = n/(n+1) for the n requests before; with a
	// draw of 0.5 the first two are sent (p = 0, 0.5), the rest refused.
	require.Equal(t, 18, throttled)
	_, acc := th.Counts()
	require.Zero(t, acc)
	// Control: an accepting backend is never throttled.
	th2, _ := adaptive.NewThrottle(adaptive.ThrottleConfig{Rand: func() float64 { return 0 }})
	rt2, _ := httplimit.ThrottleTransport(th2, status(http.StatusOK))
	for range 20 {
		resp, err := (&http.Client{Transport: rt2}).Get("http://backend.invalid/")
		require.NoError(t, err)
		resp.Body.Close()
	}
}
