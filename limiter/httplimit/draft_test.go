package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// TestEffectiveWindow drives each algorithm with irregular traffic and
// checks every response against draft-11 and against the store itself:
// both fields parse strictly; r is what a Peek at the same instant finds;
// t, when sent, is the seconds (rounded up) until more quota is available
// (a Peek t seconds later finds more, one 1 s earlier does not); t is sent
// on every denial, equal to Retry-After, and on admissions exactly for the
// algorithms whose decision says when the next unit returns.
func TestEffectiveWindow(t *testing.T) {
	for _, tc := range []struct {
		alg    algorithms.Name
		limit  int64
		window time.Duration
		tOnOK  bool          // t sent on admissions
		slack  time.Duration // how much earlier than t-1 s quota may grow (ResetAfter is rounded to the ms)
	}{
		{algorithms.FixedWindow, 5, 10 * time.Second, true, 0},
		{algorithms.FixedWindow, 3, 2500 * time.Millisecond, true, 0},
		{algorithms.GCRA, 5, 10 * time.Second, true, time.Millisecond},
		{algorithms.GCRA, 7, 10 * time.Second, true, time.Millisecond}, // a unit every 1428.57 ms
		{algorithms.SlidingLog, 5, 10 * time.Second, false, 0},
		{algorithms.CompactLog, 5, 10 * time.Second, false, 0},
		{algorithms.SlidingCounter, 5, 10 * time.Second, false, 0},
		{algorithms.TwoLevel, 5, 10 * time.Second, false, 0},
	} {
		t.Run(string(tc.alg)+"/"+tc.window.String(), func(t *testing.T) {
			store, err := memorystore.New()
			require.NoError(t, err)
			fake := clock.NewFake(start)
			lim, err := limiter.New(store, limiter.Config{Algorithm: tc.alg, Limit: tc.limit, Window: tc.window, Prefix: "d:"}, limiter.WithClock(fake))
			require.NoError(t, err)
			h := newHandler(t, lim, nil)
			peekAt := func(at time.Time) int64 {
				now := fake.Now()
				fake.Set(at)
				defer fake.Set(now)
				d, err := lim.Peek(context.Background(), "192.0.2.1")
				require.NoError(t, err)
				return d.Remaining
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.alg))))
			var withT, denied int
			for i := range 300 {
				w := do(h, request("192.0.2.1:1"))
				pols, svcs, err := parseDraftFields(w.Header().Values("RateLimit-Policy"), w.Header().Values("RateLimit"))
				require.NoError(t, err, "request %d", i)
				require.Equal(t, map[string]policy{"default": {tc.limit, ratelimitfields.Seconds(tc.window)}}, pols)
				s, ok := svcs["default"]
				require.True(t, ok)
				now := fake.Now()
				require.Equal(t, peekAt(now), s.r, "request %d: r is the quota available now", i)
				if w.Code == http.StatusTooManyRequests {
					denied++
					require.Equal(t, w.Header().Get("Retry-After"), strconv.FormatInt(s.t, 10), "request %d: t is Retry-After when denied", i)
				} else {
					require.Equal(t, tc.tOnOK, s.t >= 0, "request %d: t on admission", i)
				}
				if s.t >= 0 {
					withT++
					tt := time.Duration(s.t) * time.Second
					assert.Greater(t, peekAt(now.Add(tt)), s.r, "request %d: more quota %v later", i, tt)
					assert.Equal(t, s.r, peekAt(now.Add(tt-time.Second-tc.slack)), "request %d: no more quota before %v", i, tt-time.Second)
				}
				fake.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
			assert.Positive(t, denied, "the traffic reaches the limit")
			assert.Positive(t, withT)
		})
	}
}

// TestEffectiveWindowControl: the old t, the time until the key's full
// allowance is back, fails the check above for a sliding log, which is why
// admissions under it carry no t.
func TestEffectiveWindowControl(t *testing.T) {
	lim, fake := newLimiter(t, nil, 3, time.Minute)
	h := newHandler(t, lim, nil)
	do(h, request("192.0.2.1:1"))
	fake.Advance(20 * time.Second)
	var d limiter.Decision
	inner := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { d, _ = DecisionFrom(r.Context()) })
	mw, err := New(lim)
	require.NoError(t, err)
	do(mw.Handler(inner), request("192.0.2.1:1"))
	require.True(t, d.Allowed)
	oldT := ratelimitfields.Seconds(d.ResetAfter) // 60: the second request leaves at +60 s
	peek := func(after time.Duration) int64 {
		fake.Advance(after)
		defer fake.Advance(-after)
		p, err := lim.Peek(context.Background(), "192.0.2.1")
		require.NoError(t, err)
		return p.Remaining
	}
	assert.EqualValues(t, 60, oldT)
	assert.Greater(t, peek(time.Duration(oldT-1)*time.Second), d.Remaining,
		"more quota comes at +40 s, long before the old t: it was not an effective window")
}

// TestProblemJSON: a denial's body is the draft's quota-exceeded problem
// for clients that ask for JSON, and today's text for the others.
func TestProblemJSON(t *testing.T) {
	for _, tc := range []struct {
		accept []string
		json   bool
	}{
		{nil, false},
		{[]string{"*/*"}, false},
		{[]string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, false},
		{[]string{"application/json"}, true},
		{[]string{"application/problem+json"}, true},
		{[]string{"APPLICATION/JSON; charset=utf-8"}, true},
		{[]string{"application/*"}, true},
		{[]string{"text/plain", "application/json"}, true}, // a tie goes to JSON
		{[]string{"text/plain, application/json;q=0.5"}, false},
		{[]string{"application/json;q=0"}, false},
		{[]string{"application/json;q=oops"}, false},
		{[]string{"application/json;q=0.9, */*;q=0.1"}, true},
	} {
		lim, _ := newLimiter(t, nil, 1, time.Minute)
		h := newHandler(t, lim, nil, WithPolicyName(`per "ip"`))
		do(h, request("192.0.2.1:1"))
		r := request("192.0.2.1:1")
		for _, a := range tc.accept {
			r.Header.Add("Accept", a)
		}
		w := do(h, r)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "Accept", w.Header().Get("Vary"))
		if !tc.json {
			assert.Equal(t, "text/plain; charset=utf-8", w.Header().Get("Content-Type"), "%q", tc.accept)
			assert.Equal(t, "429 too many requests: retry after 60 s\n", w.Body.String())
			continue
		}
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%q", tc.accept)
		var p map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
		assert.Equal(t, map[string]any{
			"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
			"title":             "Quota Exceeded",
			"status":            float64(429),
			"detail":            "retry after 60 s",
			"violated-policies": []any{`per "ip"`},
		}, p)
	}
}

// TestProblemJSONGuard: a denial by the guard names the guard's policy.
func TestProblemJSONGuard(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "g:",
		Guard: &limiter.Guard{Limit: 1, Window: time.Hour}}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	h := newHandler(t, lim, nil, WithPolicyName("api"))
	do(h, request("192.0.2.1:1"))
	r := request("192.0.2.1:1", "Accept", "application/json")
	w := do(h, r)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, []string{"api-guard"}, p.Violated)
	_, svcs, err := parseDraftFields(w.Header().Values("RateLimit-Policy"), w.Header().Values("RateLimit"))
	require.NoError(t, err)
	assert.Equal(t, service{0, 3600}, svcs["api-guard"])
}

// TestDraftRealServer: the fields, the problem body and DecisionFrom over a
// real loopback connection, through Go's HTTP client and server.
func TestDraftRealServer(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	fake := clock.NewFake(start)
	lim, err := limiter.New(store, limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Minute, Prefix: "rs:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	mw, err := New(lim, WithPolicyName("crawl"))
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := DecisionFrom(r.Context())
		if !ok {
			http.Error(w, "no decision", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "left "+strconv.FormatInt(d.Remaining, 10))
	})))
	defer srv.Close()
	get := func(accept string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp, string(body)
	}
	fake.Set(start.Add(15 * time.Second)) // 45 s of the aligned minute left
	resp, body := get("")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "left 1", body)
	_, svcs, err := parseDraftFields(resp.Header.Values("RateLimit-Policy"), resp.Header.Values("RateLimit"))
	require.NoError(t, err)
	assert.Equal(t, service{1, 45}, svcs["crawl"], "fixed window: more quota at the window's end")
	get("")
	resp, body = get("application/json")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "45", resp.Header.Get("Retry-After"))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded",
		"status":429,"detail":"retry after 45 s","violated-policies":["crawl"]}`, body)
	_, svcs, err = parseDraftFields(resp.Header.Values("RateLimit-Policy"), resp.Header.Values("RateLimit"))
	require.NoError(t, err)
	assert.Equal(t, service{0, 45}, svcs["crawl"])
}

// TestDecisionFrom: the handler after the middleware, and a custom denied
// handler, see the decision; a request the middleware made no decision for
// does not.
func TestDecisionFrom(t *testing.T) {
	_, ok := DecisionFrom(context.Background())
	assert.False(t, ok)

	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Exempt: []string{"192.0.2.9"}})
	require.NoError(t, err)
	var seen []limiter.Decision
	record := func(r *http.Request) {
		d, ok := DecisionFrom(r.Context())
		require.True(t, ok)
		seen = append(seen, d)
	}
	mw, err := New(lim, WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(http.StatusTooManyRequests)
	})))
	require.NoError(t, err)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := DecisionFrom(r.Context()); !ok {
			w.WriteHeader(http.StatusNoContent) // exempt: no decision
			return
		}
		record(r)
	}))
	for range 3 {
		do(h, request("192.0.2.1:1"))
	}
	require.Len(t, seen, 3)
	assert.Equal(t, []bool{true, true, false}, []bool{seen[0].Allowed, seen[1].Allowed, seen[2].Allowed})
	assert.Equal(t, []int64{1, 0, 0}, []int64{seen[0].Remaining, seen[1].Remaining, seen[2].Remaining})
	// The system clock may tick between the first and the third request.
	assert.True(t, seen[2].RetryAfter > time.Minute-time.Second && seen[2].RetryAfter <= time.Minute, "retry %v", seen[2].RetryAfter)
	assert.Equal(t, http.StatusNoContent, do(h, request("192.0.2.9:1")).Code)

	// Stacked: the innermost decision is found.
	perRoute, _ := newLimiter(t, nil, 5, time.Second)
	inner, err := New(perRoute, WithPolicyName("route"))
	require.NoError(t, err)
	outer, err := New(lim, WithPolicyName("client"))
	require.NoError(t, err)
	var got limiter.Decision
	h = outer.Handler(inner.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, _ = DecisionFrom(r.Context())
	})))
	do(h, request("192.0.2.2:1"))
	assert.EqualValues(t, 5, got.Limit)
	assert.EqualValues(t, 4, got.Remaining)

	// The request's context keeps its values and its cancellation.
	type userKey struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), userKey{}, "alice"))
	var user any
	var doneErr error
	h = outer.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		user = r.Context().Value(userKey{})
		cancel()
		<-r.Context().Done()
		doneErr = r.Context().Err()
		_, ok := DecisionFrom(r.Context())
		assert.True(t, ok)
	}))
	do(h, request("192.0.2.3:1").WithContext(ctx))
	assert.Equal(t, "alice", user)
	assert.ErrorIs(t, doneErr, context.Canceled)
}
