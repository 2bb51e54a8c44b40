package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
	"github.com/limitkit/limitkit/limiter/internal/transporttest"
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

// TestPolicyFollowsGroupReload: a configuration file's reload
// (config.Set.ReloadFile swaps every policy with limiter.Group.SetConfigs)
// reaches the metadata. The config package is not imported here: it would
// bring the Redis clients into this module's requirements.
func TestPolicyFollowsGroupReload(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	group, err := limiter.NewGroup(store, []limiter.Config{{Limit: 3, Window: time.Minute, Prefix: "api:"}})
	require.NoError(t, err)
	s := startServer(t, newInterceptor(t, group.Limiters()[0]))
	md, err := s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=3;w=60`}, md.Get("ratelimit-policy"))
	require.NoError(t, group.SetConfigs([]limiter.Config{{Limit: 7, Window: 10 * time.Second, Prefix: "api:"}}))
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

// TestReloadToAndFromConcurrency (issue 22, defect 7): calls through the
// unary interceptor while the limit switches between "concurrency" and
// "fixed_window" never fail.
func TestReloadToAndFromConcurrency(t *testing.T) {
	lim, _ := transporttest.NewLimiter(t, nil, transporttest.LeaseConfig)
	ic := newInterceptor(t, lim, grpclimit.WithKey(grpclimit.FullMethod()))
	unary := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/a.B/C"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	transporttest.ReloadLoop(t, lim, func() bool {
		_, err := unary(t.Context(), nil, info, handler)
		return err == nil
	})
}
