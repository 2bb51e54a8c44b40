package config

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// httpFile has a policy of each kind of http block; its line numbers are
// those of the error tests' edits.
const httpFile = `backend: {url: memory://}
policies:
  api:
    limit: 2
    window: 1m
    http:
      key: header:X-API-Key
      headers: both
      policy_name: public-api
  plain: {limit: 2, window: 1m}
  uploads:
    algorithm: concurrency
    limit: 1
    window: 30s
    http: {key: header:X-User, release_timeout: 1s}
  search:
    limit: 1
    window: 1m
    http:
      key: [query:api_key, ip]
      ipv6_prefix: 64
  edge:
    limit: 1
    window: 1m
    http:
      key: proxied_ip+route
      trusted_proxies: [127.0.0.0/8, "::1"]
      proxy_header: X-Real-IP
      on_error: refuse
`

// serve builds the set of file and serves each named policy's middleware
// on a loopback server, under /<name>; handler answers the requests.
func serve(t *testing.T, file string, handler http.HandlerFunc, names ...string) (*Set, *httptest.Server) {
	t.Helper()
	cfg, err := Parse([]byte(file), YAML)
	require.NoError(t, err)
	set, err := cfg.Build(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	mux := http.NewServeMux()
	for _, name := range names {
		mw, err := set.HTTP(name)
		require.NoError(t, err, name)
		mux.Handle("/"+name, mw.Handler(handler))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return set, srv
}

// get sends a GET to the server with the headers (name, value pairs).
func get(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	require.NoError(t, res.Body.Close())
	return res
}

func mustParse(t *testing.T, file string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(file), YAML)
	require.NoError(t, err)
	return cfg
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

// TestHTTPBlockDecodes: the file's http blocks become HTTP values, and a
// policy without one has none.
func TestHTTPBlockDecodes(t *testing.T) {
	cfg, err := Parse([]byte(httpFile), YAML)
	require.NoError(t, err)
	got := map[string]*HTTP{}
	for _, p := range cfg.Policies {
		got[p.Name] = p.HTTP
	}
	require.Equal(t, map[string]*HTTP{
		"api":     {Key: []string{"header:X-API-Key"}, Headers: "both", PolicyName: "public-api"},
		"plain":   nil,
		"uploads": {Key: []string{"header:X-User"}, ReleaseTimeout: time.Second},
		"search":  {Key: []string{"query:api_key", "ip"}, IPv6Prefix: 64},
		"edge": {Key: []string{"proxied_ip+route"}, TrustedProxies: []string{"127.0.0.0/8", "::1"},
			ProxyHeader: "X-Real-IP", OnError: "refuse"},
	}, got)

	const json = `{"backend": {"url": "memory://"}, "policies": {"api": {"limit": 2, "window": "1m",
  "http": {"key": ["header:X-API-Key", "ip"], "headers": "none"}}}}`
	cfg, err = Parse([]byte(json), JSON)
	require.NoError(t, err)
	require.Equal(t, &HTTP{Key: []string{"header:X-API-Key", "ip"}, Headers: "none"}, cfg.Policies[0].HTTP)
}

// TestHTTPKeyAndHeaders: over a real loopback server, a policy keyed by a
// header counts each header value apart, answers a request without it
// 400, and sends both header styles under its policy_name; a policy
// without a block keys by the client address and sends the draft fields
// alone, named after the policy (the control of the headers setting).
func TestHTTPKeyAndHeaders(t *testing.T) {
	_, srv := serve(t, httpFile, ok, "api", "plain", "search")

	for _, key := range []string{"k-a", "k-b"} {
		for i := range 2 {
			res := get(t, srv.URL+"/api", "X-API-Key", key)
			require.Equal(t, http.StatusOK, res.StatusCode, "%s #%d", key, i)
			require.Equal(t, `"public-api";q=2;w=60`, res.Header.Get("RateLimit-Policy"))
			require.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"))
			require.Equal(t, []string{"1", "0"}[i], res.Header.Get("X-RateLimit-Remaining"))
		}
	}
	res := get(t, srv.URL+"/api", "X-API-Key", "k-a")
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "k-a's third request")
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	require.Equal(t, http.StatusBadRequest, get(t, srv.URL+"/api").StatusCode, "no X-API-Key: no key")

	// No block: keyed by the address, so the header does not matter.
	for i := range 3 {
		res := get(t, srv.URL+"/plain", "X-API-Key", []string{"x", "y", "z"}[i])
		require.Equal(t, []int{200, 200, 429}[i], res.StatusCode, "plain #%d", i)
		require.Equal(t, `"plain";q=2;w=60`, res.Header.Get("RateLimit-Policy"))
		require.Empty(t, res.Header.Get("X-RateLimit-Limit"), "draft headers only by default")
	}

	// A list is the first key found: the query parameter, else the address.
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/search?api_key=q-1").StatusCode)
	require.Equal(t, http.StatusTooManyRequests, get(t, srv.URL+"/search?api_key=q-1").StatusCode)
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/search?api_key=q-2").StatusCode, "another parameter, another key")
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/search").StatusCode, "no parameter: keyed by the address")
	require.Equal(t, http.StatusTooManyRequests, get(t, srv.URL+"/search").StatusCode)
}

// TestHTTPProxiedRoute: proxied_ip believes X-Real-IP from the trusted
// loopback peer, joined with the route: each forwarded client has its own
// allowance.
func TestHTTPProxiedRoute(t *testing.T) {
	_, srv := serve(t, httpFile, ok, "edge")
	for _, c := range []struct {
		client string
		code   int
	}{{"192.0.2.1", 200}, {"192.0.2.1", 429}, {"192.0.2.2", 200}} {
		require.Equal(t, c.code, get(t, srv.URL+"/edge", "X-Real-IP", c.client).StatusCode, c.client)
	}
}

// TestHTTPConcurrencyLease: a concurrency policy's middleware holds a
// lease while the handler runs and releases it after (the response is
// written once the handler chain, release included, has returned). The
// control: a second request of the key while the first is in flight is
// refused at limit 1.
func TestHTTPConcurrencyLease(t *testing.T) {
	entered, leave := make(chan struct{}), make(chan struct{})
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			<-leave
		}
		ok(w, r)
	}
	_, srv := serve(t, httpFile, handler, "uploads")
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/uploads?hold=1", nil)
		req.Header.Set("X-User", "ann")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_ = res.Body.Close()
		first <- res.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		close(leave)
		t.Fatal("the first request never reached the handler")
	}
	res := get(t, srv.URL+"/uploads", "X-User", "ann")
	held := res.StatusCode
	require.Equal(t, `"uploads";q=1;qu="concurrent-requests"`, res.Header.Get("RateLimit-Policy"))
	require.Equal(t, `"uploads";r=0`, res.Header.Get("RateLimit"))
	other := get(t, srv.URL+"/uploads", "X-User", "bob").StatusCode
	close(leave)
	require.Equal(t, http.StatusOK, <-first)
	require.Equal(t, http.StatusTooManyRequests, held, "ann's second upload while her first is in flight")
	require.Equal(t, http.StatusOK, other, "bob has his own slot")
	for i := range 3 {
		require.Equal(t, http.StatusOK, get(t, srv.URL+"/uploads", "X-User", "ann").StatusCode, "after the release, #%d", i)
	}
}

// TestHTTPBlockErrors: a bad http block fails Parse with the file, the
// line, the field and what to write instead, in YAML and in JSON.
func TestHTTPBlockErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		line int // of httpFile, which edit replaces
		edit string
		want string
	}{
		{"unknown field", 9, "      polcy_name: public-api",
			`limits.yaml:9: policies.api.http.polcy_name: unknown field (did you mean "policy_name"?); the fields here are key, trusted_proxies,`},
		{"misspelt block", 6, "    htp:",
			`limits.yaml:6: policies.api.htp: unknown field (did you mean "http"?); the fields here are algorithm, limit,`},
		{"bad key", 7, "      key: heder:X-API-Key",
			`limits.yaml:7: policies.api.http.key: "heder:X-API-Key" is not a key (did you mean "header"?); write ip, proxied_ip, route, header:NAME or query:NAME`},
		{"bad header name", 7, "      key: header:X API Key",
			`limits.yaml:7: policies.api.http.key: "X API Key" is not a header name; write it like header:X-API-Key`},
		{"bad key part", 7, "      key: ip+rout",
			`limits.yaml:7: policies.api.http.key: "rout" is not a key part (did you mean "route"?)`},
		{"empty key list", 7, "      key: []",
			`limits.yaml:7: policies.api.http.key: is empty; write a key such as ip or header:X-API-Key`},
		{"key not a string", 7, "      key: 7",
			`limits.yaml:7: policies.api.http.key: 7 is not a string; quote it`},
		{"bad headers", 8, "      headers: xratelimit",
			`limits.yaml:8: policies.api.http.headers: "xratelimit" (did you mean "x_ratelimit"?): write "draft", "x_ratelimit", "both" or "none"`},
		{"bad policy name", 9, "      policy_name: \"caf\u00e9\"",
			`limits.yaml:9: policies.api.http.policy_name: policy name "café" has a byte 0xc3; use printable ASCII`},
		{"proxied without proxies", 7, "      key: proxied_ip",
			`limits.yaml:7: policies.api.http.key: proxied_ip needs trusted_proxies: list your proxies' addresses or networks, or key by ip`},
		{"proxies without proxied", 9, "      trusted_proxies: [10.0.0.0/8]",
			`limits.yaml:9: policies.api.http.trusted_proxies: no key is proxied_ip, so nothing reads them; write key: proxied_ip, or remove trusted_proxies`},
		{"bad ipv6 prefix", 9, "      ipv6_prefix: 129",
			`limits.yaml:9: policies.api.http.ipv6_prefix: is 129; give 1 to 128 (64 is usual)`},
		{"ipv6 prefix without address", 9, "      ipv6_prefix: 64",
			`limits.yaml:9: policies.api.http.ipv6_prefix: applies to ip and proxied_ip keys, and no key is one; remove it`},
		{"bad release timeout", 9, "      release_timeout: 0s",
			`limits.yaml:9: policies.api.http.release_timeout: is 0s; write a positive duration such as "2s"`},
		{"release timeout not a duration", 9, "      release_timeout: 2",
			`limits.yaml:9: policies.api.http.release_timeout: "2" is not a duration`},
		{"bad on_error", 9, "      on_error: reject",
			`limits.yaml:9: policies.api.http.on_error: "reject": write "serve" or "refuse"`},
		{"block not a mapping", 6, "    http: ip",
			`limits.yaml:6: policies.api.http: "ip" is not a mapping of fields`},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := strings.Split(httpFile, "\n")
			lines[c.line-1] = c.edit
			file := strings.Join(lines, "\n")
			if c.line == 6 {
				file = strings.Replace(file, "      key: header:X-API-Key\n      headers: both\n      policy_name: public-api\n", "", 1)
			}
			_, err := Load(writeFile(t, "limits.yaml", file))
			require.ErrorIs(t, err, limiter.ErrInvalidConfig)
			require.ErrorContains(t, err, c.want)
		})
	}

	const json = "{\"backend\": {\"url\": \"memory://\"},\n \"policies\": {\"api\": {\"limit\": 2, \"window\": \"1m\",\n  \"http\": {\"key\": [\"ip\",\n    \"bogus\"]}}}}"
	_, err := Load(writeFile(t, "limits.json", json))
	require.ErrorContains(t, err, `limits.json:4: policies.api.http.key.1: "bogus" is not a key; write ip, proxied_ip`)
	var e *Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, 4, e.Line)

	const twice = "backend: {url: memory://}\npolicies:\n  api:\n    limit: 1\n    window: 1m\n    http: {key: ip}\n    http: {key: route}\n"
	_, err = Parse([]byte(twice), YAML)
	require.ErrorContains(t, err, "line 7: policies.api.http: given twice (also on line 6)")
}

// TestHTTPReload: a reload's new limit reaches the middleware's answers;
// a reload that changes an http block is refused with its line, and
// changes nothing.
func TestHTTPReload(t *testing.T) {
	set, srv := serve(t, httpFile, ok, "api")
	require.Equal(t, `"public-api";q=2;w=60`, get(t, srv.URL+"/api", "X-API-Key", "r").Header.Get("RateLimit-Policy"))

	raised := strings.Replace(httpFile, "    limit: 2\n    window: 1m\n    http:", "    limit: 5\n    window: 1m\n    http:", 1)
	require.NoError(t, set.Reload(mustParse(t, raised)))
	require.Equal(t, `"public-api";q=5;w=60`, get(t, srv.URL+"/api", "X-API-Key", "r").Header.Get("RateLimit-Policy"))

	changed := strings.Replace(raised, "limit: 5", "limit: 9", 1)
	changed = strings.Replace(changed, "key: header:X-API-Key", "key: header:X-Other", 1)
	err := set.ReloadFile(writeFile(t, "limits.yaml", changed))
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, "limits.yaml:6: policies.api.http: changed; a reload changes limits only")
	require.Equal(t, int64(5), set.Limiter("api").Config().Limit, "a refused reload changes no limit either")
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/api", "X-API-Key", "r").StatusCode, "still keyed by X-API-Key")

	// An absent block and an empty one are the same middleware.
	empty := strings.Replace(raised, "  plain: {limit: 2, window: 1m}", "  plain: {limit: 2, window: 1m, http: {}}", 1)
	require.NoError(t, set.Reload(mustParse(t, empty)))
}

// TestHTTPOnError: with Redis gone (no fallback), on_error: refuse
// answers 503; the control, the default, lets the request through.
func TestHTTPOnError(t *testing.T) {
	srv := redistest.Start(t)
	file := "backend: {url: 'redis://" + srv.Addr() + "/0?dial_timeout=200ms'}\npolicies:\n" +
		"  strict: {limit: 5, window: 1m, http: {on_error: refuse}}\n  lenient: {limit: 5, window: 1m}\n"
	_, web := serve(t, file, ok, "strict", "lenient")
	require.Equal(t, http.StatusOK, get(t, web.URL+"/strict").StatusCode, "Redis up")
	srv.Kill()
	require.Equal(t, http.StatusServiceUnavailable, get(t, web.URL+"/strict").StatusCode)
	require.Equal(t, http.StatusOK, get(t, web.URL+"/lenient").StatusCode, "the default lets it through")
}

// TestHTTPPlans: plans with the same http block get one middleware keyed
// by it; plans with different blocks are refused, naming them.
func TestHTTPPlans(t *testing.T) {
	file := "backend: {url: memory://}\npolicies:\n" +
		"  free: {limit: 1, window: 1m, http: {key: header:X-API-Key}}\n" +
		"  pro: {limit: 3, window: 1m, http: {key: header:X-API-Key}}\n" +
		"  other: {limit: 3, window: 1m}\n"
	set, err := mustParse(t, file).Build(context.Background())
	require.NoError(t, err)
	defer set.Close()
	resolve := func(_ context.Context, key string) (string, error) {
		if key == "acme" {
			return "pro", nil
		}
		return "free", nil
	}
	mw, err := set.HTTPPlans(resolve, []string{"free", "pro"})
	require.NoError(t, err)
	web := httptest.NewServer(mw.Handler(http.HandlerFunc(ok)))
	defer web.Close()
	for i, want := range []int{200, 200, 200, 429} {
		require.Equal(t, want, get(t, web.URL, "X-API-Key", "acme").StatusCode, "acme #%d", i)
	}
	require.Equal(t, 200, get(t, web.URL, "X-API-Key", "ann").StatusCode)
	res := get(t, web.URL, "X-API-Key", "ann")
	require.Equal(t, 429, res.StatusCode)
	require.Equal(t, `"default";q=1;w=60`, res.Header.Get("RateLimit-Policy"))

	_, err = set.HTTPPlans(resolve, []string{"free", "other"})
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	require.ErrorContains(t, err, "plans free and other have different http blocks")
	_, err = set.HTTP("nope")
	require.ErrorContains(t, err, `no policy "nope"; the policies are ["free" "pro" "other"]`)
	_, err = set.HTTP("free", httplimit.WithPolicyName(""))
	require.ErrorContains(t, err, "policy name is empty", "extra options are checked too")
}
