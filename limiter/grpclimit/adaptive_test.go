package grpclimit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/limiter/adaptive"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

func TestAdaptiveUnaryRefusesUnavailable(t *testing.T) {
	lim, err := adaptive.New(adaptive.Config{Law: adaptive.Fixed{}, Initial: 1})
	require.NoError(t, err)
	ad, err := grpclimit.NewAdaptive(lim, grpclimit.PriorityFromMetadata, 0)
	require.NoError(t, err)
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/M"}
	ic := ad.Unary()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := ic(context.Background(), nil, info, func(context.Context, any) (any, error) {
			close(inside)
			<-release
			return "ok", nil
		})
		done <- err
	}()
	<-inside
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpclimit.PriorityMetadata, "critical"))
	_, err = ic(ctx, nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code())
	require.Len(t, st.Details(), 1)
	require.IsType(t, &errdetails.RetryInfo{}, st.Details()[0])
	close(release)
	require.NoError(t, <-done)
	require.Zero(t, lim.InFlight())
	// Control: a free slot serves.
	_, err = ic(ctx, nil, info, func(context.Context, any) (any, error) { return "ok", nil })
	require.NoError(t, err)
}

func TestThrottleUnaryRefusesLocally(t *testing.T) {
	th, err := adaptive.NewThrottle(adaptive.ThrottleConfig{Rand: func() float64 { return 0.5 }})
	require.NoError(t, err)
	ic, err := grpclimit.ThrottleUnary(th)
	require.NoError(t, err)
	sent := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		sent++
		return status.Error(codes.ResourceExhausted, "no")
	}
	for range 20 {
		err := ic(context.Background(), "/svc/M", nil, nil, nil, invoker)
		require.Equal(t, codes.ResourceExhausted == status.Code(err) || codes.Unavailable == status.Code(err), true)
	}
	require.Equal(t, 2, sent, "p = n/(n+1) with nothing accepted: two sent, the rest refused locally")
	_, acc := th.Counts()
	require.Zero(t, acc)
}
