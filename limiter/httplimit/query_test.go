package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/limiter/httplimit"
)

func TestQueryKey(t *testing.T) {
	key := httplimit.Query("api_key")
	for target, want := range map[string]string{
		"/items?api_key=k-1":             "k-1",
		"/items?api_key=%20k-2%20&x=1":   "k-2",
		"/items?x=1&api_key=a&api_key=b": "a",
		"/items?api_key=":                "",
		"/items?API_KEY=k-3":             "", // names are case-sensitive
		"/items":                         "",
	} {
		k := key(httptest.NewRequest(http.MethodGet, target, nil))
		require.Equal(t, want, k.Value, target)
		require.False(t, k.Client.IsValid(), "a query value is never a client address")
	}
	require.Empty(t, key(&http.Request{}).Value, "a request without a URL has no key")
}
