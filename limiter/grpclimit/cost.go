package grpclimit

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/transport"
)

// Estimator returns the units to reserve for a call to method before its
// handler runs: an upper bound of its cost keeps the limit exact (see
// docs/tokens.md). req is the request of a unary call, nil for a stream
// (estimated when it opens). An error, or a value below 1, fails the call
// with codes.InvalidArgument; a value above the limit reserves the limit.
type Estimator func(ctx context.Context, method string, req any) (int64, error)

// CostInterceptor limits calls by what they cost, known after the handler:
// it reserves an estimate when a call starts and settles the cost the
// handler reports (ReportCost) when the call, or the stream, ends. It is
// safe for concurrent use.
type CostInterceptor struct {
	Interceptor
	lim      *limiter.Limiter
	estimate Estimator
}

// NewCost returns interceptors limiting calls by their cost on lim's limit
// (limiter.Limiter.ReserveN, then limiter.Reservation.Settle): a call that
// returns without reporting is charged its estimate; one whose handler
// panics before reporting is cancelled. A refused call fails as under New.
// It returns an error for a nil limiter or estimator, an invalid option, or
// a limit that cannot reserve (a concurrency limit, a guard, Shadow mode).
func NewCost(lim *limiter.Limiter, estimate Estimator, opts ...Option) (*CostInterceptor, error) {
	if lim == nil || estimate == nil {
		return nil, errors.New("grpclimit: NewCost needs a limiter and an estimator")
	}
	if cfg := lim.Config(); cfg.Algorithm == algorithms.Concurrency || cfg.Guard != nil || cfg.Mode == limiter.Shadow {
		return nil, errors.New("grpclimit: NewCost reserves on one enforced rate limit; this one is a concurrency limit, has a guard or is in Shadow mode")
	}
	i, err := New(lim, opts...)
	if err != nil {
		return nil, err
	}
	return &CostInterceptor{Interceptor: *i, lim: lim, estimate: estimate}, nil
}

// ReportCost records n as the actual cost of the call whose context is
// ctx, settled when the call ends; a later report replaces an earlier one.
// It returns false when no reservation is held for ctx.
func ReportCost(ctx context.Context, n int64) bool {
	h := transport.HoldFrom(ctx)
	if h == nil {
		return false
	}
	h.Report(n)
	return true
}

// reserve estimates and reserves the call, sends the metadata, and returns
// the context to serve it with and its hold; a non-nil error refuses it.
func (i *CostInterceptor) reserve(ctx context.Context, method string, req any, setHeader func(md map[string][]string) error) (context.Context, *transport.Hold, error) {
	est, err := i.estimate(ctx, method, req)
	if err == nil && est < 1 {
		err = errors.New("the estimate is below 1")
	}
	if err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, "grpclimit: "+err.Error())
	}
	est = min(est, i.lim.Config().Limit)
	h := transport.NewHold(nil, est)
	o := i.core.Reserve(ctx, call{ctx: ctx, method: method}, func(ctx context.Context, key string) (limiter.Decision, error) {
		res, d, err := i.lim.ReserveN(ctx, key, est)
		if res != nil {
			h = transport.NewHold(res, est)
		}
		return d, err
	})
	md, err := i.answer(ctx, method, o)
	if md != nil {
		_ = setHeader(md) // fails only outside a server call
	}
	if err != nil {
		return nil, nil, err
	}
	if o.Verdict == transport.Admitted {
		ctx = transport.WithDecision(ctx, &o)
	}
	return transport.WithHold(ctx, h), h, nil
}

func (i *CostInterceptor) settle(ctx context.Context, method string, h *transport.Hold, panicked bool) {
	i.set.Settle(ctx, h, panicked, slog.String("policy", i.set.PolicyName), slog.String("method", method))
}

// Unary returns the unary server interceptor.
func (i *CostInterceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !i.limits(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, h, err := i.reserve(ctx, info.FullMethod, req, func(md map[string][]string) error { return grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		returned := false
		defer func() { i.settle(ctx, info.FullMethod, h, !returned) }()
		resp, err := handler(ctx, req)
		returned = true
		return resp, err
	}
}

// Stream returns the stream server interceptor: the estimate is reserved
// when the stream opens and settled when it ends.
func (i *CostInterceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !i.limits(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, h, err := i.reserve(ss.Context(), info.FullMethod, nil, func(md map[string][]string) error { return ss.SetHeader(md) })
		if err != nil {
			return err
		}
		returned := false
		defer func() { i.settle(ctx, info.FullMethod, h, !returned) }()
		err = handler(srv, &decidedStream{ServerStream: ss, ctx: ctx})
		returned = true
		return err
	}
}
