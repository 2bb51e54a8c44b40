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

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// costStores runs check on the memory store and on a real redis-server
// through each Redis client.
func costStores(t *testing.T, check func(t *testing.T, store backend.Store)) {
	t.Run("memory", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		check(t, s)
	})
	srv := redistest.Start(t)
	for _, client := range []string{storeurl.GoRedis, storeurl.Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := srv.Do("FLUSHALL")
			require.NoError(t, err)
			op, err := storeurl.Open(t.Context(), "redis://"+srv.Addr()+"/0", storeurl.WithClient(client))
			require.NoError(t, err)
			defer func() { _ = op.Close() }()
			check(t, op.Store)
		})
	}
}

// modeCost serves the health service on loopback behind NewCost on lim,
// every call estimated at 40, keyed by x-key. Inside the cost interceptor
// a call's x-mode makes the handler report 10 ("report"), panic before
// reporting ("panic"), or report 30 then panic ("report-panic"); an
// outer interceptor turns a panic into codes.Internal, as a recovery
// interceptor does.
func modeCost(t *testing.T, lim *limiter.Limiter) healthpb.HealthClient {
	t.Helper()
	ic, err := grpclimit.NewCost(lim, func(context.Context, string, any) (int64, error) { return 40, nil },
		grpclimit.WithKey(grpclimit.Metadata("x-key")), grpclimit.WithPolicyName("tokens"))
	require.NoError(t, err)
	recoverer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return h(ctx, req)
	}
	behave := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		switch mode := md.Get("x-mode"); {
		case len(mode) == 0:
		case mode[0] == "report":
			grpclimit.ReportCost(ctx, 10)
		case mode[0] == "panic":
			panic("boom")
		case mode[0] == "report-panic":
			grpclimit.ReportCost(ctx, 30)
			panic("boom")
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverer, ic.Unary(), behave))
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

// TestCostOnRedis: a real gRPC server on loopback, NewCost on a fixed
// window of 100 a minute on memory and a real redis-server (both clients).
// Calls reserving 40 and reporting 10 give 30 back each, so 7 fit (the
// control, reporting nothing, pays its estimates: 2 fit, then
// ResourceExhausted); a handler that panics before reporting has its
// reservation cancelled (100 left after it), one that reported 30 first
// is settled at 30 (70 left).
func TestCostOnRedis(t *testing.T) {
	costStores(t, func(t *testing.T, store backend.Store) {
		lim, err := limiter.New(store, limiter.Config{Algorithm: "fixed_window", Limit: 100, Window: time.Minute, Prefix: "grpc-cost:"})
		require.NoError(t, err)
		client := modeCost(t, lim)
		call := func(key, mode string) error {
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-key", key)
			if mode != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-mode", mode)
			}
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}
		left := func(key string) int64 {
			d, err := lim.Peek(t.Context(), key)
			require.NoError(t, err)
			return d.Remaining
		}
		for _, tc := range []struct {
			mode string
			want int
		}{{"report", 7}, {"", 2}} {
			admitted := 0
			var last error
			for range 10 {
				if err := call("settle-"+tc.mode, tc.mode); err == nil {
					admitted++
				} else {
					last = err
				}
			}
			assert.Equal(t, tc.want, admitted, "mode %q", tc.mode)
			assert.Equal(t, codes.ResourceExhausted, status.Code(last), "mode %q", tc.mode)
		}
		assert.Equal(t, codes.Internal, status.Code(call("panic", "panic")))
		assert.Equal(t, int64(100), left("panic"), "a panic before a report cancels")
		assert.Equal(t, codes.Internal, status.Code(call("report-panic", "report-panic")))
		assert.Equal(t, int64(70), left("report-panic"), "a panic after a report settles at it")
		require.NoError(t, call("control", ""))
		assert.Equal(t, int64(60), left("control"), "the control pays its estimate")
	})
}
