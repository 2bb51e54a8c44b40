package httplimit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestLists: exempt keys and addresses are never limited and never reach
// the store, even with Redis down; deny lists are refused without a store
// call; a deny entry beats an exemption; everyone else is limited as before.
func TestLists(t *testing.T) {
	store := newCountingStore(t)
	lim, _ := newLimiter(t, store, 1, time.Minute)
	var served atomic.Int64
	h := newHandler(t, lim, &served, WithKey(FirstOf(Header("X-Api-Key"), ClientIP())),
		// Keys as the key func returns them: FirstOf prefixes the position.
		WithExemptKeys("0:monitor"), WithExemptAddrs("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"),
		WithDenyKeys("0:leaked"), WithDenyAddrs("10.6.6.0/24", "198.51.100.66"))

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
		{"exempt address, missing key is fine", request("192.0.2.7:1"), 200, 0},
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
	lim, _ = newLimiter(t, down, 1, time.Minute)
	h = newHandler(t, lim, nil, WithExemptAddrs("10.0.0.0/8"), WithDenyAddrs("198.51.100.0/24"))
	assert.Equal(t, 200, do(h, request("10.9.9.9:1")).Code)
	assert.Equal(t, 403, do(h, request("198.51.100.1:1")).Code)
	assert.Zero(t, down.calls.Load())
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

func TestListsClientAddrAndHandler(t *testing.T) {
	store := newCountingStore(t)
	lim, _ := newLimiter(t, store, 1, time.Minute)
	proxied, err := ProxiedClientIP("", "10.0.0.0/8")
	require.NoError(t, err)
	h := newHandler(t, lim, nil, WithKey(proxied), WithClientAddr(proxied),
		WithExemptAddrs("192.0.2.0/24"), WithDenyAddrs("198.51.100.0/24"),
		WithDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusUnavailableForLegalReasons)
		})))
	// Behind the load balancer the client address comes from the header.
	for range 3 {
		assert.Equal(t, 200, do(h, request("10.0.0.1:1", "X-Forwarded-For", "192.0.2.50")).Code)
	}
	assert.Equal(t, 451, do(h, request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.3")).Code)
	assert.Zero(t, store.calls.Load())
	// The load balancer itself is not exempt: 10.0.0.1 is a peer, not a client in the list.
	assert.Equal(t, 200, do(h, request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.1")).Code)
	assert.Equal(t, 429, do(h, request("10.0.0.1:1", "X-Forwarded-For", "203.0.113.1")).Code)
	assert.EqualValues(t, 2, store.calls.Load())
}

// TestListErrors: a bad entry is an error from New naming the entry and
// what to write instead, never a panic.
func TestListErrors(t *testing.T) {
	lim, _ := newLimiter(t, nil, 1, time.Minute)
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithExemptAddrs("10.0.0.0/33"), `exempt address "10.0.0.0/33": not a CIDR prefix`},
		{WithExemptAddrs("10.0.0.0/8", "nope"), `exempt address "nope": not an IP address or a CIDR prefix`},
		{WithDenyAddrs("10.1.2.3/8"), `deny address "10.1.2.3/8": has bits set after the first 8; write 10.0.0.0/8`},
		{WithDenyAddrs("fe80::1%eth0"), `has an IPv6 zone`},
		{WithDenyAddrs("::ffff:0:0/95"), `has bits set after the first 95`},
		{WithDenyAddrs(""), `deny address ""`},
		{WithExemptAddrs(strings.Repeat("9", 1000)), `exempt address "9999999999999999999999999999999999999999999999999999999999999999...": too long`},
		{WithExemptKeys("a", ""), "exempt key is empty"},
		{WithDenyKeys(""), "deny key is empty"},
		{WithClientAddr(nil), "client address func is nil"},
		{WithDenyHandler(nil), "deny handler is nil"},
	} {
		_, err := New(lim, tc.opt)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		assert.Less(t, len(err.Error()), 300, "errors stay short")
	}
	// IPv4-mapped prefixes are taken as the IPv4 prefix they name.
	store := newCountingStore(t)
	lim, _ = newLimiter(t, store, 1, time.Minute)
	h := newHandler(t, lim, nil, WithExemptAddrs("::ffff:10.0.0.0/104"))
	assert.Equal(t, 200, do(h, request("10.200.0.1:1")).Code)
	assert.Zero(t, store.calls.Load())
}

// TestListsRealServer: an exempt loopback client of a real server is never
// limited while another middleware on the same limiter limits it.
func TestListsRealServer(t *testing.T) {
	store := newCountingStore(t)
	lim, _ := newLimiter(t, store, 2, time.Minute)
	exemptMW, err := New(lim, WithExemptAddrs("127.0.0.0/8", "::1"))
	require.NoError(t, err)
	plainMW, err := New(lim)
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
