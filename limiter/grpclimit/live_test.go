package grpclimit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// TestPolicyFollowsSetConfig (issue 22, defect 13): on a real server, after
// SetConfig raises 3 a minute to 5 per 30 s, the metadata says q=5;w=30 and
// a denial's QuotaFailure says 5; after a switch to "concurrency" the
// policy carries the concurrent-requests unit.
func TestPolicyFollowsSetConfig(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 3, Window: time.Minute, Prefix: "live:"})
	s := startServer(t, newInterceptor(t, lim))
	md, err := s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=3;w=60`}, md.Get("ratelimit-policy"))

	require.NoError(t, lim.SetConfig(limiter.Config{Limit: 5, Window: 30 * time.Second, Prefix: "live:"}))
	for range 4 {
		md, err = s.check(t.Context())
		require.NoError(t, err)
		assert.Equal(t, []string{`"default";q=5;w=30`}, md.Get("ratelimit-policy"))
	}
	md, err = s.check(t.Context())
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, []string{`"default";q=5;w=30`}, md.Get("ratelimit-policy"))
	_, qf := details(t, err)
	require.NotNil(t, qf)
	assert.EqualValues(t, 5, qf.GetViolations()[0].GetQuotaValue())
	assert.Equal(t, "5 requests per 30s", qf.GetViolations()[0].GetDescription())

	require.NoError(t, lim.SetConfig(limiter.Config{Algorithm: "concurrency", Limit: 2, Window: time.Minute, Prefix: "live:"}))
	md, err = s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=2;qu="concurrent-requests"`}, md.Get("ratelimit-policy"))
}

const liveFile = `
backend:
  url: memory://
policies:
  api:
    limit: %d
    window: %s
`

// TestPolicyFollowsReloadFile: a configuration file's reload
// (config.Set.ReloadFile, which calls SetConfig) reaches the metadata.
func TestPolicyFollowsReloadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(limit int, window string) {
		require.NoError(t, os.WriteFile(path, []byte(fmtFile(limit, window)), 0o600))
	}
	write(3, "1m")
	cfg, err := config.Load(path)
	require.NoError(t, err)
	set, err := cfg.Build(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = set.Close() })
	s := startServer(t, newInterceptor(t, set.Limiter("api")))
	md, err := s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=3;w=60`}, md.Get("ratelimit-policy"))
	write(7, "10s")
	require.NoError(t, set.ReloadFile(path))
	md, err = s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=7;w=10`}, md.Get("ratelimit-policy"))
}

// TestListsReachGRPC (issue 23 item 2, issue 22 defect 8): the limit's
// lists apply to gRPC calls: the exempt peer is never limited, a
// deny-listed one gets PermissionDenied; keyed by metadata, a client
// sending an exempt address in it is limited, not exempt.
func TestListsReachGRPC(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "lists:", Exempt: []string{"127.0.0.0/8"}})
	s := startServer(t, newInterceptor(t, lim))
	for range 3 {
		md, err := s.check(t.Context())
		require.NoError(t, err, "the exempt peer")
		assert.Empty(t, md.Get("ratelimit"), "an exempt call gets no fields")
	}
	denied, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute, Prefix: "deny:", Deny: []string{"127.0.0.1"}})
	_, err := startServer(t, newInterceptor(t, denied)).check(t.Context())
	assert.Equal(t, codes.PermissionDenied, status.Code(err))

	byKey := startServer(t, newInterceptor(t, lim, grpclimit.WithKey(grpclimit.Metadata("x-api-key"))))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "127.0.0.5")
	_, err = byKey.check(ctx)
	require.NoError(t, err)
	_, err = byKey.check(ctx)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "an address in metadata is no client address")
}

func fmtFile(limit int, window string) string { return fmt.Sprintf(liveFile, limit, window) }
