package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// benchLimiter admits everything: a fixed window far above the load.
func benchLimiter(b *testing.B, limit int64) *limiter.Limiter {
	b.Helper()
	mem, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	lim, err := limiter.New(mem, limiter.Config{Algorithm: "fixed_window", Limit: limit, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// nopStream stands in for the server's transport stream, so that
// grpc.SetHeader does its work as in a server.
type nopStream struct{}

func (nopStream) Method() string                  { return check }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkInterceptor is the unary interceptor's cost per call, in
// process, beside the bare handler and the limiter's own decision: allowed,
// exempt (WithoutMethods) and denied calls, on a memory store.
func BenchmarkInterceptor(b *testing.B) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("192.0.2.1:5000")})
	ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	info := &grpc.UnaryServerInfo{FullMethod: check}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	run := func(b *testing.B, ic grpc.UnaryServerInterceptor) {
		for b.Loop() {
			_, _ = ic(ctx, nil, info, handler)
		}
	}
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			_, _ = handler(ctx, nil)
		}
	})
	newIC := func(b *testing.B, limit int64, opts ...grpclimit.Option) grpc.UnaryServerInterceptor {
		ic, err := grpclimit.New(benchLimiter(b, limit), opts...)
		if err != nil {
			b.Fatal(err)
		}
		return ic.Unary()
	}
	b.Run("limiter-only", func(b *testing.B) {
		// The store's share of "allowed": the same decision, no interceptor.
		lim := benchLimiter(b, 1<<50)
		for b.Loop() {
			_, _ = lim.Allow(ctx, "192.0.2.1")
		}
	})
	b.Run("allowed", func(b *testing.B) { run(b, newIC(b, 1<<50)) })
	b.Run("exempt", func(b *testing.B) { run(b, newIC(b, 1<<50, grpclimit.WithoutMethods("/grpc.health.v1.Health/*"))) })
	b.Run("denied", func(b *testing.B) {
		ic := newIC(b, 1)
		_, _ = ic(ctx, nil, info, handler)
		run(b, ic)
	})
}

// BenchmarkLoopback is a Check call over a real loopback TCP connection:
// the bare server beside one with the interceptor, allowed and exempt.
func BenchmarkLoopback(b *testing.B) {
	serve := func(b *testing.B, opts ...grpc.ServerOption) healthpb.HealthClient {
		srv := grpc.NewServer(opts...)
		healthpb.RegisterHealthServer(srv, health.NewServer())
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = srv.Serve(lis) }()
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	run := func(b *testing.B, c healthpb.HealthClient) {
		req := &healthpb.HealthCheckRequest{}
		for b.Loop() {
			if _, err := c.Check(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	}
	withIC := func(b *testing.B, opts ...grpclimit.Option) grpc.ServerOption {
		ic, err := grpclimit.New(benchLimiter(b, 1<<50), opts...)
		if err != nil {
			b.Fatal(err)
		}
		return grpc.ChainUnaryInterceptor(ic.Unary())
	}
	b.Run("bare", func(b *testing.B) { run(b, serve(b)) })
	b.Run("allowed", func(b *testing.B) { run(b, serve(b, withIC(b))) })
	b.Run("exempt", func(b *testing.B) { run(b, serve(b, withIC(b, grpclimit.WithoutMethods(check)))) })
}
