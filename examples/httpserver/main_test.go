package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// serve starts the example's handler on a loopback listener.
func serve(t *testing.T, cfg config) (*httptest.Server, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(start)
	cfg.Clock = fake
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, closeApp, err := newApp(cfg)
	require.NoError(t, err)
	t.Cleanup(closeApp)
	srv := httptest.NewServer(h) // 127.0.0.1, a random port
	t.Cleanup(srv.Close)
	return srv, fake
}

func get(t *testing.T, srv *httptest.Server, path, xff string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(body)
}

// crawl sends 150 requests from one client, 100 ms of (fake) time apart,
// and checks that exactly the first 100 are admitted and each of the other
// 50 gets 429 with the Retry-After of the sliding log: the first request
// (t=0) slides out at t=60 s. RateLimit's t, the seconds until more quota is
// available, is that Retry-After; an admission under the sliding log
// carries no t (the decision does not say when the oldest entry leaves).
func crawl(t *testing.T, srv *httptest.Server, fake *clock.Fake) {
	t.Helper()
	admitted, denied := 0, 0
	for i := range 150 {
		now := time.Duration(i) * 100 * time.Millisecond
		fake.Set(start.Add(now))
		resp, body := get(t, srv, "/", "")
		assert.Equal(t, `"crawl";q=100;w=60`, resp.Header.Get("RateLimit-Policy"), "request %d", i+1)
		assert.Equal(t, "100", resp.Header.Get("X-RateLimit-Limit"))
		switch resp.StatusCode {
		case http.StatusOK:
			admitted++
			left := strconv.Itoa(limit - admitted)
			assert.Equal(t, `"crawl";r=`+left, resp.Header.Get("RateLimit"), "request %d", i+1)
			assert.Equal(t, left, resp.Header.Get("X-RateLimit-Remaining"))
			assert.Contains(t, body, left+" requests left")
		case http.StatusTooManyRequests:
			denied++
			wait := window - now // until the request at t=0 slides out
			secs := strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
			assert.Equal(t, secs, resp.Header.Get("Retry-After"), "request %d at %v", i+1, now)
			assert.Equal(t, `"crawl";r=0;t=`+secs, resp.Header.Get("RateLimit"), "request %d", i+1)
			assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
		default:
			t.Fatalf("request %d: status %d", i+1, resp.StatusCode)
		}
		if i < 100 {
			require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		}
	}
	assert.Equal(t, 100, admitted)
	assert.Equal(t, 50, denied)

	// Retry-After is right: once it has passed, the client is admitted.
	resp, _ := get(t, srv, "/", "")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	fake.Advance(time.Duration(retry) * time.Second)
	resp, _ = get(t, srv, "/", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestCrawlerLimitInMemory(t *testing.T) {
	srv, fake := serve(t, config{})
	crawl(t, srv, fake)

	// The metrics saw it all, and are not limited themselves.
	resp, body := get(t, srv, "/metrics", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, `limitkit_decisions_total{outcome="allowed",policy="crawl:"} 101`)
	assert.Contains(t, body, `limitkit_decisions_total{outcome="denied",policy="crawl:"} 51`)
	assert.Contains(t, body, `limitkit_memorystore_keys{store="memory"} 1`)
}

// TestSpoofedForwardedFor: a client cannot get a fresh allowance by writing
// X-Forwarded-For when its peer address is not a trusted proxy.
func TestSpoofedForwardedFor(t *testing.T) {
	for _, trusted := range []string{"", "10.0.0.0/8"} { // 127.0.0.1 untrusted either way
		t.Run("trusted="+trusted, func(t *testing.T) {
			srv, _ := serve(t, config{TrustedProxies: trusted})
			for i := range limit {
				resp, _ := get(t, srv, "/", fmt.Sprintf("198.51.100.%d", i%250))
				require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
			}
			for _, xff := range []string{"", "203.0.113.9", "203.0.113.9, 127.0.0.1", "for=203.0.113.10"} {
				resp, _ := get(t, srv, "/", xff)
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "X-Forwarded-For %q", xff)
			}
		})
	}

	// The control: when the peer (127.0.0.1) is a trusted proxy, the header
	// names the client, so another address has its own allowance.
	srv, _ := serve(t, config{TrustedProxies: "127.0.0.1"})
	for range limit {
		resp, _ := get(t, srv, "/", "198.51.100.1")
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, _ := get(t, srv, "/", "198.51.100.1")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp, _ = get(t, srv, "/", "198.51.100.2")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"crawl";r=99`, resp.Header.Get("RateLimit"))
}

func TestBadTrustedProxies(t *testing.T) {
	_, _, err := newApp(config{TrustedProxies: "10.0.0.0/8,proxy.internal", Logger: slog.New(slog.DiscardHandler)})
	require.ErrorContains(t, err, `"proxy.internal"`)
	_, _, err = newApp(config{RedisURL: "redis://127.0.0.1:1/0", Client: "memcached"})
	require.ErrorContains(t, err, "unknown client")
}

// TestCrawlerLimitOnRedis: the same behaviour with the counts in a real
// redis-server, through each client library.
func TestCrawlerLimitOnRedis(t *testing.T) {
	redis := redistest.Start(t)
	for i, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			srv, fake := serve(t, config{RedisURL: "redis://" + redis.Addr() + "/" + strconv.Itoa(i), Client: client})
			crawl(t, srv, fake)
			_, body := get(t, srv, "/metrics", "")
			assert.Contains(t, body, `limitkit_breaker_state{breaker="redis",state="closed"} 1`)
			assert.NotContains(t, body, "limitkit_degraded_decisions_total{", "Redis decided every request")
		})
	}
}

// TestPageReadsTheDecision: the page's count comes from the decision in the
// request's context, not from response headers: without a decision it says
// so even when an X-RateLimit-Remaining header is set.
func TestPageReadsTheDecision(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("X-RateLimit-Remaining", "7")
	page(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.True(t, strings.Contains(w.Body.String(), "not limited here"), w.Body.String())

	// Through the middleware on a loopback server the page counts down.
	srv, _ := serve(t, config{})
	for i := range 3 {
		_, body := get(t, srv, "/", "")
		assert.Contains(t, body, strconv.Itoa(limit-1-i)+" requests left", body)
	}
}

// TestProblemJSON: a client that accepts JSON gets the draft's
// quota-exceeded problem; curl's "*/*" keeps the text body.
func TestProblemJSON(t *testing.T) {
	srv, _ := serve(t, config{})
	for range limit {
		resp, _ := get(t, srv, "/", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded",
		"status":429,"detail":"retry after 60 s","violated-policies":["crawl"]}`, string(body))

	req.Header.Set("Accept", "*/*")
	resp, err = srv.Client().Do(req)
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, "429 too many requests: retry after 60 s\n", string(body))
}

// TestExemptAndDeny: the loopback client, once exempt, is never limited and
// the page says so; once denied, always refused; a bad entry is an error.
func TestExemptAndDeny(t *testing.T) {
	srv, _ := serve(t, config{Exempt: "127.0.0.0/8,::1"})
	for i := range limit + 20 {
		resp, body := get(t, srv, "/", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		require.Empty(t, resp.Header.Get("RateLimit"))
		require.Contains(t, body, "not limited here")
	}
	_, body := get(t, srv, "/metrics", "")
	assert.NotContains(t, body, `limitkit_decisions_total{`, "an exempt request never reaches the store")

	// Behind a trusted proxy the list matches the forwarded client.
	srv, _ = serve(t, config{TrustedProxies: "127.0.0.1", Exempt: "198.51.100.0/24", Deny: "203.0.113.66"})
	for range limit + 5 {
		resp, _ := get(t, srv, "/", "198.51.100.7")
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, _ := get(t, srv, "/", "203.0.113.66")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = get(t, srv, "/", "203.0.113.67")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"crawl";r=99`, resp.Header.Get("RateLimit"))

	_, _, err := newApp(config{Exempt: "10.0.0.0/33", Logger: slog.New(slog.DiscardHandler)})
	assert.ErrorContains(t, err, `exempt entry "10.0.0.0/33"`)
}
