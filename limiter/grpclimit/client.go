package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxRetries is how many times RetryUnary retries one call unless
// WithMaxRetries says otherwise.
const DefaultMaxRetries = 3

// DefaultMaxDelay is the longest retry delay RetryUnary waits unless
// WithMaxDelay says otherwise.
const DefaultMaxDelay = time.Minute

// RetryOption configures RetryUnary, as Option configures the server
// interceptors: options apply in order, and a nil RetryOption is ignored.
type RetryOption func(*retryOptions) error

// retryOptions are what the RetryOptions set, over the defaults RetryUnary
// gives.
type retryOptions struct {
	maxRetries int
	maxDelay   time.Duration
}

// WithMaxRetries sets how many times one call is retried (default
// DefaultMaxRetries; 0 never retries).
func WithMaxRetries(n int) RetryOption {
	return func(o *retryOptions) error {
		if n < 0 {
			return fmt.Errorf("WithMaxRetries: the count is %d; give 0 or more", n)
		}
		o.maxRetries = n
		return nil
	}
}

// WithMaxDelay sets the longest retry delay waited (default
// DefaultMaxDelay): a denial asking for longer is returned at once.
func WithMaxDelay(d time.Duration) RetryOption {
	return func(o *retryOptions) error {
		if d <= 0 {
			return fmt.Errorf("WithMaxDelay: the delay is %v; give a positive duration", d)
		}
		o.maxDelay = d
		return nil
	}
}

// retrier retries denied calls within its options.
type retrier struct{ retryOptions }

// RetryUnary returns a unary client interceptor that honours rate-limit
// denials: a call failing with codes.ResourceExhausted and an
// errdetails.RetryInfo (as the server interceptors send) is retried after
// the delay it asks for, up to the max retries. A call is not retried, and
// the denial is returned, when the delay is beyond the max delay or would
// pass ctx's deadline; ctx ending while waiting returns ctx's status.
// Other errors, and ResourceExhausted without RetryInfo (a message too
// large, say), are returned as they are. A denied call never reached the
// handler, so retrying it is safe whatever the method does.
//
// Streams are not retried: their denial arrives with the first receive,
// after the caller may have sent messages.
func RetryUnary(opts ...RetryOption) (grpc.UnaryClientInterceptor, error) {
	r := &retrier{retryOptions{maxRetries: DefaultMaxRetries, maxDelay: DefaultMaxDelay}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&r.retryOptions); err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
	}
	return r.unary, nil
}

func (r *retrier) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for attempt := 0; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || attempt >= r.maxRetries {
			return err
		}
		delay, ok := RetryDelay(err)
		if !ok || delay > r.maxDelay {
			return err
		}
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) < delay {
			return err // waiting would only end in DeadlineExceeded
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
}

// RetryDelay returns the delay a rate-limit denial asks for: the RetryInfo
// of a codes.ResourceExhausted status. ok is false for any other error.
func RetryDelay(err error) (delay time.Duration, ok bool) {
	if err == nil {
		return 0, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return 0, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, isRetry := d.(*errdetails.RetryInfo); isRetry && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}
