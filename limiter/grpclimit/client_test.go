package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
)

// realLimiter runs on the system clock: the client waits real time.
func realLimiter(t *testing.T, limit int64, window time.Duration) *limiter.Limiter {
	t.Helper()
	mem, err := memorystore.New()
	require.NoError(t, err)
	lim, err := limiter.New(mem, limiter.Config{Limit: limit, Window: window})
	require.NoError(t, err)
	return lim
}

func retrying(t *testing.T, opts ...grpclimit.RetryOption) grpc.DialOption {
	t.Helper()
	r, err := grpclimit.RetryUnary(opts...)
	require.NoError(t, err)
	return grpc.WithChainUnaryInterceptor(r)
}

func TestRetryUnaryWaitsTheDelayAndRetries(t *testing.T) {
	s := startServer(t, newInterceptor(t, realLimiter(t, 1, 300*time.Millisecond)), retrying(t))
	_, err := s.check(t.Context())
	require.NoError(t, err)
	_, err = s.check(t.Context())
	require.NoError(t, err, "the denied call was retried after its delay")
	assert.GreaterOrEqual(t, s.attempts.Load(), int64(3), "no retry reached the server")
	assert.Equal(t, int64(2), s.served.Load())
}

func TestRetryUnaryGivesUp(t *testing.T) {
	t.Run("without the interceptor (control)", func(t *testing.T) {
		s := startServer(t, newInterceptor(t, realLimiter(t, 1, time.Minute)))
		_, _ = s.check(t.Context())
		_, err := s.check(t.Context())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	})
	t.Run("max retries 0", func(t *testing.T) {
		s := startServer(t, newInterceptor(t, realLimiter(t, 1, 300*time.Millisecond)), retrying(t, grpclimit.WithMaxRetries(0)))
		_, _ = s.check(t.Context())
		_, err := s.check(t.Context())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, int64(2), s.attempts.Load())
	})
	t.Run("retries exhausted", func(t *testing.T) {
		// The limit stays exhausted: a minute's window, a delay it accepts.
		s := startServer(t, newInterceptor(t, realLimiter(t, 1, time.Minute)), retrying(t, grpclimit.WithMaxRetries(2), grpclimit.WithMaxDelay(time.Hour)))
		_, _ = s.check(t.Context())
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		// Waiting a minute would pass the deadline: no wait, no retry.
		_, err := s.check(ctx)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, int64(2), s.attempts.Load())
	})
	t.Run("delay beyond max delay", func(t *testing.T) {
		s := startServer(t, newInterceptor(t, realLimiter(t, 1, time.Minute)), retrying(t, grpclimit.WithMaxDelay(time.Second)))
		_, _ = s.check(t.Context())
		_, err := s.check(t.Context())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, int64(2), s.attempts.Load())
	})
	t.Run("context cancelled while waiting", func(t *testing.T) {
		s := startServer(t, newInterceptor(t, realLimiter(t, 1, time.Minute)), retrying(t))
		_, _ = s.check(t.Context())
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := s.check(ctx)
		assert.Equal(t, codes.Canceled, status.Code(err))
		assert.Equal(t, int64(2), s.attempts.Load())
	})
	t.Run("bounded retries", func(t *testing.T) {
		// Every attempt is denied with a short delay: the client stops
		// after its max retries.
		denyShort := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if status.Code(err) == codes.ResourceExhausted {
				return denial(t, 10*time.Millisecond)
			}
			return err
		}
		s2 := startServer(t, newInterceptor(t, realLimiter(t, 1, time.Minute)), retrying(t, grpclimit.WithMaxRetries(2)), grpc.WithChainUnaryInterceptor(denyShort))
		_, _ = s2.check(t.Context())
		_, err := s2.check(t.Context())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, int64(1+3), s2.attempts.Load(), "one call and its first try and 2 retries")
	})
}

func denial(t *testing.T, d time.Duration) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	require.NoError(t, err)
	return st.Err()
}

func TestRetryDelay(t *testing.T) {
	d, ok := grpclimit.RetryDelay(denial(t, 1500*time.Millisecond))
	assert.True(t, ok)
	assert.Equal(t, 1500*time.Millisecond, d)
	d, ok = grpclimit.RetryDelay(fmt.Errorf("wrapped: %w", denial(t, time.Second)))
	assert.True(t, ok, "a wrapped status")
	assert.Equal(t, time.Second, d)

	unavailable, err := status.New(codes.Unavailable, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	require.NoError(t, err)
	for name, err := range map[string]error{
		"nil":                   nil,
		"not a status":          errors.New("boom"),
		"exhausted, no details": status.Error(codes.ResourceExhausted, "message too large"),
		"another code":          unavailable.Err(),
	} {
		_, ok := grpclimit.RetryDelay(err)
		assert.False(t, ok, name)
	}
}

func TestRetryUnaryRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]grpclimit.RetryOption{
		"WithMaxRetries": grpclimit.WithMaxRetries(-1),
		"WithMaxDelay":   grpclimit.WithMaxDelay(0),
	} {
		_, err := grpclimit.RetryUnary(nil, opt)
		assert.ErrorContains(t, err, "grpclimit: "+name+": ", "a nil option is skipped and the bad one named")
	}
	_, err := grpclimit.RetryUnary(nil, grpclimit.WithMaxRetries(0))
	assert.NoError(t, err)
}
