package httplimit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// countingStore counts every call that reaches a real memory store.
type countingStore struct {
	backend.Store
	calls atomic.Int64
}

func newCountingStore(t *testing.T) *countingStore {
	s, err := memorystore.New()
	require.NoError(t, err)
	return &countingStore{Store: s}
}

func (s *countingStore) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, req)
}

func (s *countingStore) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.TakeAll(ctx, reqs)
}

func (s *countingStore) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	s.calls.Add(1)
	return s.Store.Peek(ctx, req)
}

// listLimiter is a limiter of limit 1 a minute on store with the lists.
func listLimiter(t *testing.T, store backend.Store, exempt, deny []string) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "l:", Exempt: exempt, Deny: deny})
	require.NoError(t, err)
	return lim
}

// TestLists: the limit's exempt keys and addresses (limiter.Config) are
// never limited and never reach the store, even with Redis down; deny lists
// are refused without a store call; a deny entry beats an exemption; the
// address entries apply to client addresses only; everyone else is limited
// as before.
func TestLists(t *testing.T) {
	store := newCountingStore(t)
	// Keys as the key func returns them: FirstOf prefixes the position.
	lim := listLimiter(t, store, []string{"0:monitor", "10.0.0.0/8", "2001:db8::/32", "192.0.2.7"},
		[]string{"0:leaked", "10.6.6.0/24", "198.51.100.66"})
	var served atomic.Int64
	h := newHandler(t, lim, &served, WithKey(FirstOf(Header("X-Api-Key"), ClientIP())))

	for _, tc := range []struct {
		name   string
		r      *http.Request
		status int // the same on each of 3 requests
		store  int64
	}{
		{"exempt key", request("203.0.113.1:1", "X-Api-Key", "monitor"), 200, 0},
		{"exempt network", request("10.1.2.3:1"), 200, 0},
		{"exempt IPv6 network", request("[2001:db8:5::1]:1"), 200, 0},
		{"exempt address, IPv4-mapped", request("[::ffff:192.0.2.7]:1"), 200, 0},
		{"denied key", request("203.0.113.1:1", "X-Api-Key", "leaked"), 403, 0},
		{"denied address", request("198.51.100.66:1"), 403, 0},
		{"denied inside an exempt network", request("10.6.6.6:1"), 403, 0},
		{"denied key from an exempt address", request("10.1.2.3:1", "X-Api-Key", "leaked"), 403, 0},
		{"an address next to the exempt one", request("192.0.2.8:1"), 0, 3},
		{"a key that looks like an exempt address", request("203.0.113.9:1", "X-Api-Key", "10.1.2.3"), 0, 3},
		{"an exempt key without FirstOf's prefix", request("203.0.113.8:1", "X-Api-Key", "0:monitor"), 0, 3},
	} {
		before, servedBefore := store.calls.Load(), served.Load()
		var codes []int
		for range 3 {
			w := do(h, tc.r)
			codes = append(codes, w.Code)
			if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
				assert.Empty(t, w.Header().Get("RateLimit"), tc.name)
			}
		}
		if tc.status == 0 { // limited: one admitted, then 429s
			assert.Equal(t, []int{200, 429, 429}, codes, tc.name)
		} else {
			assert.Equal(t, []int{tc.status, tc.status, tc.status}, codes, tc.name)
		}
		assert.Equal(t, tc.store, store.calls.Load()-before, "%s: store calls", tc.name)
		if tc.status == http.StatusForbidden {
			assert.Equal(t, servedBefore, served.Load(), "%s: never served", tc.name)
		}
	}

	// Exempt requests carry no rate-limit fields: nothing was decided.
	w := do(h, request("10.1.2.3:1"))
	assert.Empty(t, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Get("RateLimit-Policy"))

	// With the store down, exempt and denied requests are unaffected and
	// cost no call.
	down := newFailingStore()
	h = newHandler(t, listLimiter(t, down, []string{"10.0.0.0/8"}, []string{"198.51.100.0/24"}), nil)
	assert.Equal(t, 200, do(h, request("10.9.9.9:1")).Code)
	assert.Equal(t, 403, do(h, request("198.51.100.1:1")).Code)
	assert.Zero(t, down.calls.Load())
}

// TestHeaderKeyNeverMatchesAddressEntries (issue 22, defect 8): keyed by a
// header, a client outside 10.0.0.0/8 sending "X-Api-Key: 10.9.9.9" is
// limited, not exempt, and one sending a deny-listed address is not
// refused: address entries apply to client addresses only. Control: keyed
// by the client address, 10.9.9.9 itself is exempt.
func TestHeaderKeyNeverMatchesAddressEntries(t *testing.T) {
	store := newCountingStore(t)
	lim := listLimiter(t, store, []string{"10.0.0.0/8"}, []string{"198.51.100.0/24"})
	h := newHandler(t, lim, nil, WithKey(Header("X-Api-Key")))
	var codes []int
	for range 3 {
		codes = append(codes, do(h, request("203.0.113.9:1", "X-Api-Key", "10.9.9.9")).Code)
	}
	assert.Equal(t, []int{200, 429, 429}, codes, "a header holding an exempt address")
	assert.Equal(t, 200, do(h, request("203.0.113.9:1", "X-Api-Key", "198.51.100.1")).Code, "a header holding a denied address")

	ctl := newHandler(t, lim, nil)
	for range 3 {
		assert.Equal(t, 200, do(ctl, request("10.9.9.9:1")).Code, "control: the client address is exempt")
	}
	assert.Equal(t, 403, do(ctl, request("198.51.100.1:1")).Code, "control: the client address is denied")
}

// TestListsControl: without the lists the same requests reach the store;
// the zero counts above are the lists' doing.
func TestListsControl(t *testing.T) {
	store := newCountingStore(t)
	lim, _ := newLimiter(t, store, 1, time.Minute)
	h := newHandler(t, lim, nil)
	assert.Equal(t, 200, do(h, request("10.1.2.3:1")).Code)
	assert.Equal(t, 429, do(h, request("10.1.2.3:1")).Code)
	assert.EqualValues(t, 2, store.calls.Load())
}

// TestListsProxiedClientAndHandler: behind a load balancer the address
// entries apply to the client ProxiedClientIP finds, not to the balancer.
func TestListsProxiedClientAndHandler(t *testing.T) {
	store := newCountingStore(t)
	lim := listLimiter(t, store, []string{"192.0.2.0/24"}, []string{"198.51.100.0/24"})
	proxied, err := ProxiedClientIP("", "10.0.0.0/8")
	require.NoError(t, err)
	h := newHandler(t, lim, nil, WithKey(proxied),
		WithDenyListHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnavailableForLegalReasons)
		})))
	for range 3 {
		assert.Equal(t, 200, do(h, request("10.0.0.1:1", "X-Forwarded-For", "192.0.2.50")).Code)
	}
	assert.Equal(t, 451, do(h, request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.3")).Code)
	assert.Zero(t, store.calls.Load())
	assert.Equal(t, 200, do(h, request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.1")).Code)
	assert.Equal(t, 429, do(h, request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.1")).Code)
	assert.EqualValues(t, 2, store.calls.Load())
	_, err = New(lim, WithDenyListHandler(nil))
	require.ErrorContains(t, err, "httplimit: WithDenyListHandler: the handler is nil")
}

// TestListsRealServer: an exempt loopback client of a real server is never
// limited by a limit that exempts it, while a limit on the same counts
// without the exemption limits it.
func TestListsRealServer(t *testing.T) {
	store := newCountingStore(t)
	exemptLim, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "rs:", Exempt: []string{"127.0.0.0/8", "::1"}})
	require.NoError(t, err)
	plainLim, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "rs:"})
	require.NoError(t, err)
	exemptMW, err := New(exemptLim)
	require.NoError(t, err)
	plainMW, err := New(plainLim)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, decided := DecisionFrom(r.Context())
		if decided {
			_, _ = io.WriteString(w, "decided")
		} else {
			_, _ = io.WriteString(w, "exempt")
		}
	})
	mux := http.NewServeMux()
	mux.Handle("/internal/", exemptMW.Handler(ok))
	mux.Handle("/", plainMW.Handler(ok))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode, string(body)
	}
	for range 10 {
		code, body := get("/internal/x")
		require.Equal(t, 200, code)
		require.Equal(t, "exempt", body)
	}
	assert.Zero(t, store.calls.Load())
	var codes []int
	for range 3 {
		code, _ := get("/")
		codes = append(codes, code)
	}
	assert.Equal(t, []int{200, 200, 429}, codes)
	assert.EqualValues(t, 3, store.calls.Load())
}

// TestLimitListsThroughMiddleware: a limit's own lists (limiter.Config's
// Exempt and Deny, as a config file sets them) are answered like the
// middleware's: an exempt request passes with no rate-limit fields, a
// deny-listed one gets 403, not 429; neither reaches the store.
func TestLimitListsThroughMiddleware(t *testing.T) {
	store := newCountingStore(t)
	lim, err := limiter.New(store, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "l:",
		Exempt: []string{"192.0.2.1"}, Deny: []string{"192.0.2.2"}})
	require.NoError(t, err)
	mw, err := New(lim)
	require.NoError(t, err)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	serve := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range 3 {
		w := serve("192.0.2.1")
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"), "an exempt request gets no rate-limit fields")
		w = serve("192.0.2.2")
		assert.Equal(t, http.StatusForbidden, w.Code)
		assert.Empty(t, w.Header().Get("Retry-After"))
	}
	assert.Zero(t, store.calls.Load())
	// Control: an unlisted address is limited, through the store.
	assert.Equal(t, http.StatusOK, serve("192.0.2.3").Code)
	assert.Equal(t, http.StatusTooManyRequests, serve("192.0.2.3").Code)
	assert.EqualValues(t, 2, store.calls.Load())
}
