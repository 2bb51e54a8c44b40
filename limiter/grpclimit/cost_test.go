package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// costClient serves the health service on loopback behind NewCost on a
// fixed window of 100 a minute, every call estimated at 40; report, when
// not 0, is the cost each call reports.
func costClient(t *testing.T, report int64) healthpb.HealthClient {
	t.Helper()
	store, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute, Prefix: "tok:"})
	require.NoError(t, err)
	ic, err := grpclimit.NewCost(lim, func(context.Context, string, any) (int64, error) { return 40, nil },
		grpclimit.WithKey(grpclimit.Metadata("x-key")), grpclimit.WithPolicyName("tokens"))
	require.NoError(t, err)
	reporter := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if report != 0 {
			assert.True(t, grpclimit.ReportCost(ctx, report))
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary(), reporter), grpc.ChainStreamInterceptor(ic.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestCostUnarySettles: calls reserving 40 and reporting 10 give 30 back
// each, so 7 fit in 100; the control, reporting nothing, is charged its
// estimates: 2 fit, then ResourceExhausted with the rate-limit metadata.
func TestCostUnarySettles(t *testing.T) {
	for _, tc := range []struct {
		report int64
		want   int
	}{{10, 7}, {0, 2}} {
		client := costClient(t, tc.report)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", "k")
		admitted := 0
		var md metadata.MD
		var last error
		for range 10 {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			if err == nil {
				admitted++
			} else {
				last = err
			}
		}
		assert.Equal(t, tc.want, admitted, "report %d", tc.report)
		assert.Equal(t, codes.ResourceExhausted, status.Code(last))
		assert.Equal(t, []string{`"tokens";q=100;w=60`}, md.Get("ratelimit-policy"))
	}
	assert.False(t, grpclimit.ReportCost(t.Context(), 1), "no reservation held")
}

// TestCostStreamSettlesAtItsEnd: a stream reserves its estimate when it
// opens and, reporting nothing, is charged it when it ends.
func TestCostStreamSettlesAtItsEnd(t *testing.T) {
	client := costClient(t, 0)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", "k")
	for range 2 {
		sctx, cancel := context.WithCancel(ctx)
		w, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = w.Recv()
		require.NoError(t, err)
		cancel()
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "80 held or charged, 40 more does not fit")
}
