package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func request(remoteAddr string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/items/42", nil)
	r.RemoteAddr = remoteAddr
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func TestClientIP(t *testing.T) {
	key := ClientIP()
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[::ffff:192.0.2.9]:80", "192.0.2.9"}, // IPv4-mapped: one client, one key
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"192.0.2.1", "192.0.2.1"}, // no port
		{"@", ""},                  // a Unix socket peer has no address
		{"", ""},
	} {
		assert.Equal(t, tc.want, key(request(tc.remote)).Value, "RemoteAddr %q", tc.remote)
	}
	// Forwarding headers are never read: any client can write them.
	r := request("192.0.2.1:1234", "X-Forwarded-For", "203.0.113.7", "Forwarded", "for=203.0.113.8")
	assert.Equal(t, "192.0.2.1", key(r).Value)
}

func TestProxiedClientIPXForwardedFor(t *testing.T) {
	key, err := ProxiedClientIP("", "10.0.0.0/8", "192.0.2.7")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"untrusted peer: header ignored", "203.0.113.50:999", []string{"198.51.100.1"}, "203.0.113.50"},
		{"untrusted peer spoofing a trusted chain", "203.0.113.50:999", []string{"198.51.100.1, 10.0.0.1"}, "203.0.113.50"},
		{"trusted peer, one hop", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"trusted peer, no header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"client spoofs the left of the chain", "10.1.2.3:5000", []string{"6.6.6.6, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"single trusted address", "192.0.2.7:80", []string{"198.51.100.2"}, "198.51.100.2"},
		{"chain split over header lines", "10.1.2.3:5000", []string{"6.6.6.6", "198.51.100.3, 192.0.2.7"}, "198.51.100.3"},
		{"every hop trusted: the leftmost", "10.1.2.3:5000", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"unparsable hop stops the walk at the hop that vouched for it", "10.1.2.3:5000", []string{"198.51.100.1, unknown, 10.0.0.6"}, "10.0.0.6"},
		{"unparsable rightmost hop: the peer", "10.1.2.3:5000", []string{"198.51.100.1, garbage"}, "10.1.2.3"},
		{"ports and brackets", "10.1.2.3:5000", []string{"[2001:db8::5]:1234, 10.0.0.6:80"}, "2001:db8::5"},
		{"mapped IPv4 peer is trusted", "[::ffff:10.1.2.3]:5000", []string{"198.51.100.4"}, "198.51.100.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.remote)
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			r.Header.Set("Forwarded", "for=6.6.6.6") // not the configured header
			assert.Equal(t, tc.want, key(r).Value)
		})
	}
}

func TestProxiedClientIPForwarded(t *testing.T) {
	key, err := ProxiedClientIP("forwarded", "10.0.0.0/8")
	require.NoError(t, err)
	for _, tc := range []struct{ name, forwarded, want string }{
		{"simple", "for=198.51.100.1", "198.51.100.1"},
		{"quoted IPv6 with port", `for="[2001:db8:cafe::17]:4711";proto=https`, "2001:db8:cafe::17"},
		{"several elements, rightmost untrusted wins", `for=6.6.6.6, For=198.51.100.1;by=10.0.0.9, for=10.0.0.7`, "198.51.100.1"},
		{"obfuscated identifier stops the walk", `for=198.51.100.1, for=_hidden, for=10.0.0.7`, "10.0.0.7"},
		{"element without for", `for=198.51.100.1, by=10.0.0.9`, "10.1.2.3"},
		{"quoted comma does not split", `for=198.51.100.1;x="a,b"`, "198.51.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request("10.1.2.3:80", "Forwarded", tc.forwarded, "X-Forwarded-For", "6.6.6.6")
			assert.Equal(t, tc.want, key(r).Value)
		})
	}
	// Untrusted peer: the Forwarded header is ignored too.
	assert.Equal(t, "203.0.113.5", key(request("203.0.113.5:80", "Forwarded", "for=198.51.100.1")).Value)
}

func TestProxiedClientIPOtherHeader(t *testing.T) {
	key, err := ProxiedClientIP("X-Real-IP", "127.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.8", key(request("127.0.0.1:80", "X-Real-IP", "198.51.100.8", "X-Forwarded-For", "6.6.6.6")).Value)
}

func TestProxiedClientIPErrors(t *testing.T) {
	_, err := ProxiedClientIP("X-Forwarded-For")
	require.ErrorContains(t, err, "no trusted proxies")
	_, err = ProxiedClientIP("", "10.0.0.0/33")
	require.ErrorContains(t, err, `"10.0.0.0/33"`)
	_, err = ProxiedClientIP("", "10.0.0.0/8", "proxy.internal")
	require.ErrorContains(t, err, `"proxy.internal"`)
	_, err = ProxiedClientIP("X Forwarded", "10.0.0.0/8")
	require.ErrorContains(t, err, "not a header name")
}

func TestHeaderAndContextKeys(t *testing.T) {
	assert.Equal(t, "abc", Header("x-api-key")(request("192.0.2.1:1", "X-Api-Key", "  abc ")).Value)
	assert.Equal(t, "", Header("X-Api-Key")(request("192.0.2.1:1")).Value)

	type userKey struct{}
	user := FromContext(func(ctx context.Context) string {
		id, _ := ctx.Value(userKey{}).(string)
		return id
	})
	r := request("192.0.2.1:1")
	assert.Equal(t, "", user(r).Value)
	assert.Equal(t, "u-17", user(r.WithContext(context.WithValue(r.Context(), userKey{}, "u-17"))).Value)
	assert.Equal(t, "", FromContext(nil)(r).Value)
}

func TestRoute(t *testing.T) {
	mux := http.NewServeMux()
	var seen string
	mux.HandleFunc("GET /items/{id}", func(_ http.ResponseWriter, r *http.Request) { seen = Route(nil)(r).Value })

	// Inside the mux: r.Pattern is set.
	mux.ServeHTTP(httptest.NewRecorder(), request("192.0.2.1:1"))
	assert.Equal(t, "GET /items/{id}", seen)
	// Wrapping the mux: the pattern is looked up.
	assert.Equal(t, "GET /items/{id}", Route(mux)(request("192.0.2.1:1")).Value)
	// No mux, or no match: method and path.
	assert.Equal(t, "GET /items/42", Route(nil)(request("192.0.2.1:1")).Value)
	assert.Equal(t, "POST /nowhere", Route(mux)(httptest.NewRequest(http.MethodPost, "/nowhere", nil)).Value)
}

func TestIPv6Prefix(t *testing.T) {
	key, err := IPv6Prefix(64, ClientIP())
	require.NoError(t, err)
	assert.Equal(t, "2001:db8:1:2::/64", key(request("[2001:db8:1:2:aaaa::1]:443")).Value)
	assert.Equal(t, key(request("[2001:db8:1:2::1]:443")).Value, key(request("[2001:db8:1:2:ffff:ffff:ffff:ffff]:443")).Value,
		"one /64, one key")
	assert.NotEqual(t, key(request("[2001:db8:1:2::1]:443")).Value, key(request("[2001:db8:1:3::1]:443")).Value)
	assert.Equal(t, "192.0.2.1", key(request("192.0.2.1:1")).Value, "IPv4 is kept")
	assert.Equal(t, "192.0.2.1", key(request("[::ffff:192.0.2.1]:1")).Value, "mapped IPv4 is IPv4")
	assert.Equal(t, "", key(request("@")).Value)

	hdr, err := IPv6Prefix(48, Header("X-Id"))
	require.NoError(t, err)
	assert.Equal(t, "not-an-address", hdr(request("192.0.2.1:1", "X-Id", "not-an-address")).Value)

	for _, bits := range []int{0, -1, 129} {
		_, err := IPv6Prefix(bits, ClientIP())
		require.ErrorContains(t, err, "1 to 128")
	}
	_, err = IPv6Prefix(64, nil)
	require.Error(t, err)
}
