package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
)

// TestEveryErrorAtOnce: a file with several problems reports them all, in
// file order, each with its line and field (before: only the first).
func TestEveryErrorAtOnce(t *testing.T) {
	file := `backend:
  url: memory://
  client: goredis
policies:
  login:
    limit: 5
    window: 1 minute
  api:
    algorithm: sliding_logg
    limit: 100
    window: 1m
    on_failure: fail_close
  pay:
    limt: 3
    window: 1s
  bad:
    limit: five
    window: 0s
`
	_, err := Load(writeFile(t, "limits.yaml", file))
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	var es *Errors
	require.True(t, errors.As(err, &es), "%T", err)
	var got []string
	for _, e := range es.Errs {
		got = append(got, fmt.Sprintf("%d %s", e.Line, e.Field))
	}
	require.Equal(t, []string{
		"3 backend.client",
		"7 policies.login.window",
		"9 policies.api.algorithm",
		"12 policies.api.on_failure",
		"14 policies.pay.limt",
		"17 policies.bad.limit",
		"18 policies.bad.window",
	}, got)
	msg := err.Error()
	for _, want := range []string{
		`limits.yaml:3: backend.client: unknown client "goredis" (did you mean "go-redis"?)`,
		`limits.yaml:9: policies.api.algorithm: unknown algorithm "sliding_logg" (did you mean "sliding_log"?)`,
		`limits.yaml:12: policies.api.on_failure: failure policy "fail_close"`,
		`(did you mean "fail_closed"?)`,
		`limits.yaml:14: policies.pay.limt: unknown field (did you mean "limit"?)`,
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "policies.pay.limit: missing", "a misspelt field is not also reported missing")
	require.Equal(t, len(es.Errs), strings.Count(msg, "\n")+1, "one problem per line")
	var first *Error
	require.True(t, errors.As(err, &first))
	require.Equal(t, "backend.client", first.Field)
}

// TestErrorsAreBounded: a file with many problems lists MaxErrors of them
// and counts the rest.
func TestErrorsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("backend: {url: memory://}\npolicies:\n")
	for i := range MaxErrors + 10 {
		fmt.Fprintf(&b, "  p%d: {limit: 1, window: soon}\n", i)
	}
	_, err := Parse([]byte(b.String()), YAML)
	var es *Errors
	require.True(t, errors.As(err, &es))
	require.Len(t, es.Errs, MaxErrors)
	require.Equal(t, 10, es.Omitted)
	require.True(t, strings.HasSuffix(err.Error(), "\n... and 10 more problems"), err.Error())
}

// TestDidYouMean: near misses get a suggestion; far ones do not.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"backend: {url: memory://}\npolices: {}\n", `polices: unknown field (did you mean "policies"?)`},
		{"backend: {url: memory://, clinet: rueidis}\npolicies: {a: {limit: 1, window: 1s}}\n", `backend.clinet: unknown field (did you mean "client"?)`},
		{"backend: {url: 'redis+clustr://127.0.0.1:7000'}\npolicies: {a: {limit: 1, window: 1s}}\n", `unknown scheme "redis+clustr" (did you mean "redis+cluster"?)`},
		{"backend: {url: 'memory://?max_key=3'}\npolicies: {a: {limit: 1, window: 1s}}\n", `no option "max_key" (did you mean "max_keys"?)`},
		{"backend: {url: memory://}\npolicies: {a: {limit: 1, window: 1s, algorithm: gcar}}\n", `unknown algorithm "gcar" (did you mean "gcra"?)`},
		{"backend: {url: memory://}\npolicies: {a: {limit: 1, window: 1s, on_failure: locl:3}}\n", `(did you mean "local"?)`},
		{"backend: {url: redis://127.0.0.1:6379, replica_ack: {replicas: 1, timeout: 1s, on_short: dney}}\npolicies: {a: {limit: 1, window: 1s}}\n", `"dney" (did you mean "deny"?)`},
	} {
		_, err := Parse([]byte(tc.file), YAML)
		require.ErrorContains(t, err, tc.want, tc.file)
	}
	_, err := Parse([]byte("backend: {url: memory://}\npolicies: {a: {limit: 1, window: 1s, algorithm: leaky_bucket}}\n"), YAML)
	require.ErrorContains(t, err, `unknown algorithm "leaky_bucket"; choose one of`)
	require.NotContains(t, err.Error(), "did you mean")
}

// TestGCRALimitBoundNamesTheWindow: gcra's largest limit depends on the
// window; the error names the file's window and that window's maximum
// (before: "with a window of 1s" whatever the file said).
func TestGCRALimitBoundNamesTheWindow(t *testing.T) {
	bound := algorithms.Rule{Algorithm: algorithms.GCRA, Limit: 1, Window: 8760 * time.Hour}.LimitBound()
	for _, limit := range []int64{10_000_000_000_000, bound + 1} {
		_, err := Parse(fmt.Appendf(nil, "backend: {url: memory://}\npolicies:\n  a:\n    algorithm: gcra\n    limit: %d\n    window: 8760h\n", limit), YAML)
		require.ErrorContains(t, err, fmt.Sprintf("line 5: policies.a.limit: limit %d with a window of 8760h0m0s is above the gcra maximum %d", limit, bound))
	}
	_, err := Parse(fmt.Appendf(nil, "backend: {url: memory://}\npolicies: {a: {algorithm: gcra, limit: %d, window: 8760h}}\n", bound), YAML)
	require.NoError(t, err)
}
