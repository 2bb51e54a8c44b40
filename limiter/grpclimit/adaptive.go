package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/limitkit/limiter/adaptive"
)

// PriorityMetadata is the metadata key PriorityFromMetadata reads.
const PriorityMetadata = "x-priority"

// PriorityFromMetadata reads a call's class from its PriorityMetadata
// value ("critical", "default", "sheddable"); missing or unknown is
// adaptive.Default. Use it only for callers you trust.
func PriorityFromMetadata(ctx context.Context, _ string) adaptive.Priority {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(PriorityMetadata); len(v) > 0 {
		p, _ := adaptive.ParsePriority(v[0])
		return p
	}
	return adaptive.Default
}

// Adaptive holds the server interceptors of an adaptive.Limiter. Build it
// with NewAdaptive.
type Adaptive struct {
	lim      *adaptive.Limiter
	priority func(ctx context.Context, fullMethod string) adaptive.Priority
	retry    time.Duration
}

// NewAdaptive returns interceptors that admit each call through lim, a
// stream for its whole life, and fail a refused one with
// codes.Unavailable and an errdetails.RetryInfo of retry (1 s when 0):
// the server is overloaded whoever calls, so the client may retry later
// or on another backend (gRPC retries Unavailable; ResourceExhausted, the
// per-client limits' code, says the caller's own quota is spent).
// priority reads a call's class (nil: every call is adaptive.Default;
// PriorityFromMetadata reads it from metadata). A call that returns an
// error with codes.DeadlineExceeded or codes.Canceled, or whose context
// ended, is a drop (its latency a lower bound); any other end is a
// success.
//
// To put a per-client limit first (so that one client cannot fill the
// service), chain its interceptor before these:
//
//	grpc.ChainUnaryInterceptor(perClient.Unary(), ad.Unary())
func NewAdaptive(lim *adaptive.Limiter, priority func(ctx context.Context, fullMethod string) adaptive.Priority, retry time.Duration) (*Adaptive, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: adaptive limiter is nil; build one with adaptive.New")
	}
	if retry < 0 {
		return nil, fmt.Errorf("grpclimit: retry delay is %v; give 0 (1 s) or a positive duration", retry)
	}
	if retry == 0 {
		retry = time.Second
	}
	if priority == nil {
		priority = func(context.Context, string) adaptive.Priority { return adaptive.Default }
	}
	return &Adaptive{lim: lim, priority: priority, retry: retry}, nil
}

func (a *Adaptive) acquire(ctx context.Context, method string) (*adaptive.Token, error) {
	tok, err := a.lim.Acquire(ctx, a.priority(ctx, method))
	if err == nil {
		return tok, nil
	}
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	st := status.New(codes.Unavailable, "server overloaded: adaptive concurrency limit reached")
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(a.retry)}); derr == nil {
		st = d
	}
	return nil, st.Err()
}

func done(ctx context.Context, tok *adaptive.Token, err error) {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		tok.OnDropped()
		return
	}
	if ctx.Err() != nil {
		tok.OnDropped()
		return
	}
	tok.OnSuccess()
}

// Unary returns the unary server interceptor.
func (a *Adaptive) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		tok, err := a.acquire(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer func() { done(ctx, tok, err) }()
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor.
func (a *Adaptive) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		tok, err := a.acquire(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer func() { done(ss.Context(), tok, err) }()
		return handler(srv, ss)
	}
}

// refused reports the answers a Throttle counts as refusals.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// ThrottleUnary returns a client interceptor that refuses calls locally
// when t says so (codes.Unavailable, its message wrapping
// adaptive.ErrThrottled's), and counts every call that did not end in
// codes.Unavailable or codes.ResourceExhausted as accepted.
func ThrottleUnary(t *adaptive.Throttle) (grpc.UnaryClientInterceptor, error) {
	if t == nil {
		return nil, errors.New("grpclimit: throttle is nil; build one with adaptive.NewThrottle")
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !t.Allow() {
			return status.Error(codes.Unavailable, method+": "+adaptive.ErrThrottled.Error())
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if !refused(err) {
			t.Accepted()
		}
		return err
	}, nil
}

// ThrottleStream is ThrottleUnary for streams: the opening of a stream is
// throttled and counted.
func ThrottleStream(t *adaptive.Throttle) (grpc.StreamClientInterceptor, error) {
	if t == nil {
		return nil, errors.New("grpclimit: throttle is nil; build one with adaptive.NewThrottle")
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if !t.Allow() {
			return nil, status.Error(codes.Unavailable, method+": "+adaptive.ErrThrottled.Error())
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if !refused(err) {
			t.Accepted()
		}
		return cs, err
	}, nil
}
