// Package grpclimit rate-limits gRPC calls with a limiter.Limiter: unary and
// stream server interceptors, and a client interceptor that honours the
// server's retry delay.
//
//	lim, _ := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "rpc:"})
//	rl, err := grpclimit.New(lim, grpclimit.WithoutMethods("/grpc.health.v1.Health/*"))
//	if err != nil { ... }
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rl.Unary()), grpc.ChainStreamInterceptor(rl.Stream()))
//	pb.RegisterOrdersServer(srv, orders)
//	if err := rl.Validate(srv); err != nil { ... } // a method pattern that matches nothing
//
// A limiter whose algorithm is "concurrency" bounds the calls in flight
// instead: each call holds a lease (limiter.Limiter.Acquire) from when it
// is admitted until its handler returns, a stream until it ends, whether
// it ran to its end, the client cancelled or the handler panicked (the
// panic goes on after the release). The release runs without the call's
// cancellation, under a timeout of its own (WithReleaseTimeout); a lease
// not released comes back when it times out (the limit's Window). A
// handler that may run longer renews its lease (LeaseFrom). The policy
// metadata has the draft's quota unit: "default";q=2;qu="concurrent-requests".
//
// Each call is keyed by a KeyFunc (PeerAddr by default; FullMethod,
// Metadata, IPv6Prefix, Join, FirstOf or your own) and takes one unit of the
// limiter's allowance for that key; a stream takes one unit when it opens,
// and its messages are not limited. The handler finds the decision with
// DecisionFrom. WithMethods and WithoutMethods choose
// which methods are limited (all by default); the others pass through
// without a store call.
//
// A denied call fails with codes.ResourceExhausted and two error details:
// errdetails.RetryInfo, whose delay is the decision's RetryAfter, and
// errdetails.QuotaFailure naming the policy. Every decided call's response
// header metadata carries the fields limiter/httplimit sends, under
// lower-case names: ratelimit-policy and ratelimit (and, with
// WithHeaders, x-ratelimit-limit, x-ratelimit-remaining and
// x-ratelimit-reset), plus retry-after when denied.
//
// A store failure never panics and by default never fails the call: it is
// logged with log/slog and the call is served (FailOpen). WithErrorPolicy
// (FailClosed) answers codes.Unavailable instead. A call that yields no key
// fails with codes.InvalidArgument: serving it would let clients escape the
// limit by leaving out what names them.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// Headers selects which rate-limit fields response metadata carries;
// combine them with |.
type Headers uint8

// The header sets, as in limiter/httplimit.
const (
	// DraftHeaders are ratelimit-policy and ratelimit, the fields of the
	// IETF httpapi draft. The default.
	DraftHeaders Headers = 1 << iota
	// XRateLimitHeaders are x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset (seconds from now).
	XRateLimitHeaders
)

// DefaultPolicyName names the policy in the metadata and in QuotaFailure
// unless WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// ErrorPolicy says what happens to a call whose limit could not be decided
// because the store failed.
type ErrorPolicy uint8

// The error policies.
const (
	// FailOpen logs the error and serves the call. The default: a
	// limiter outage must not take the service down.
	FailOpen ErrorPolicy = iota
	// FailClosed logs the error and fails the call with
	// codes.Unavailable.
	FailClosed
)

// Option configures an Interceptor.
type Option func(*Interceptor) error

// WithKey sets how calls are keyed (default PeerAddr()).
func WithKey(k KeyFunc) Option {
	return func(i *Interceptor) error {
		if k == nil {
			return errors.New("grpclimit: key func is nil")
		}
		i.key = k
		return nil
	}
}

// WithMethods limits only the methods matching patterns (default: every
// method). A pattern is a full method, "/package.Service/Method", or a whole
// service, "/package.Service/*". Check the patterns against a server's
// services with Validate.
func WithMethods(patterns ...string) Option {
	return func(i *Interceptor) error {
		if len(patterns) == 0 {
			return errors.New("grpclimit: WithMethods has no patterns; leave it out to limit every method")
		}
		return i.only.add(patterns)
	}
}

// WithoutMethods never limits the methods matching patterns (same syntax
// as WithMethods), such as health checks: "/grpc.health.v1.Health/*". It
// wins over WithMethods. Exempt calls cost no store call.
func WithoutMethods(patterns ...string) Option {
	return func(i *Interceptor) error {
		if len(patterns) == 0 {
			return errors.New("grpclimit: WithoutMethods has no patterns")
		}
		return i.exempt.add(patterns)
	}
}

// WithPolicyName names the policy in the rate-limit metadata and in
// QuotaFailure (default DefaultPolicyName). The name must be printable
// ASCII.
func WithPolicyName(name string) Option {
	return func(i *Interceptor) error {
		if err := ratelimitfields.CheckName(name); err != nil {
			return fmt.Errorf("grpclimit: %w", err)
		}
		i.policyName = name
		return nil
	}
}

// WithHeaders selects the metadata fields sent (default DraftHeaders). 0
// sends none but retry-after.
func WithHeaders(h Headers) Option {
	return func(i *Interceptor) error {
		if h&^(DraftHeaders|XRateLimitHeaders) != 0 {
			return fmt.Errorf("grpclimit: unknown header set %#x", uint8(h))
		}
		i.headers = h
		return nil
	}
}

// WithErrorPolicy sets what happens when the store fails (default
// FailOpen).
func WithErrorPolicy(p ErrorPolicy) Option {
	return func(i *Interceptor) error {
		if p != FailOpen && p != FailClosed {
			return fmt.Errorf("grpclimit: unknown error policy %d; use FailOpen or FailClosed", p)
		}
		i.onError = p
		return nil
	}
}

// WithLogger sets the logger store failures are reported to (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(i *Interceptor) error {
		if l == nil {
			return errors.New("grpclimit: logger is nil")
		}
		i.logger = l
		return nil
	}
}

// Interceptor limits the calls of a gRPC server. It is safe for concurrent
// use; build it with New.
type Interceptor struct {
	lim        *limiter.Limiter
	key        KeyFunc
	only       methods
	exempt     methods
	policyName string
	headers    Headers
	onError    ErrorPolicy
	logger     *slog.Logger

	// Precomputed from the limiter's configuration.
	policy *ratelimitfields.Policy // the rate-limit field values
	quotas [2]quota                // the main limit's and the guard's
	mode   atomic.Pointer[mode]    // whether the limit in force holds leases

	// releaseTimeout bounds a lease's release (WithReleaseTimeout);
	// releaseHook, when set (by tests' controls), releases instead.
	releaseTimeout time.Duration
	releaseHook    func(context.Context, *limiter.Lease) error
}

// New returns interceptors enforcing lim. It returns an error for a nil
// limiter, an invalid option or a malformed method pattern.
func New(lim *limiter.Limiter, opts ...Option) (*Interceptor, error) {
	if lim == nil {
		return nil, errors.New("grpclimit: limiter is nil; build one with limiter.New")
	}
	i := &Interceptor{
		lim:        lim,
		key:        PeerAddr(),
		policyName: DefaultPolicyName,
		headers:    DraftHeaders,
		logger:     slog.Default(),

		releaseTimeout: DefaultReleaseTimeout,
	}
	for _, opt := range opts {
		if err := opt(i); err != nil {
			return nil, err
		}
	}
	cfg := lim.Config()
	i.policy = ratelimitfields.NewPolicy(i.policyName, cfg)
	i.quotas[0] = newQuota(i.policyName, cfg.Limit, cfg.Window, i.leases())
	if g := cfg.Guard; g != nil {
		i.quotas[1] = newQuota(i.policyName+ratelimitfields.GuardSuffix, g.Limit, g.Window, false)
	}
	return i, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !i.limits(info.FullMethod) {
			return handler(ctx, req)
		}
		d, decided, lease, md, err := i.decide(ctx, info.FullMethod)
		if md != nil {
			// Fails only outside a server call (a test calling the
			// interceptor directly): nothing to send the fields on.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if decided {
			ctx = &decisionCtx{Context: ctx, d: d, lease: lease}
		}
		if lease != nil {
			// A deferred call runs on return and while panicking alike.
			defer i.release(ctx, info.FullMethod, lease)
		}
		return handler(ctx, req)
	}
}

// decisionKey is the context key of the decision.
type decisionKey struct{}

// decisionCtx carries the decision (and the lease, under a concurrency
// limit) in one allocation.
type decisionCtx struct {
	context.Context
	d     limiter.Decision
	lease *limiter.Lease
}

func (c *decisionCtx) Value(key any) any {
	if key == (decisionKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// DecisionFrom returns the decision the interceptor made for the call whose
// context is ctx, for the handler (and interceptors chained after it). ok
// is false when no decision was made: an exempt method, or a call served
// because the store failed.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	if c, ok := ctx.Value(decisionKey{}).(*decisionCtx); ok {
		return c.d, true
	}
	return limiter.Decision{}, false
}

// decidedStream is a server stream whose context carries the decision.
type decidedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *decidedStream) Context() context.Context { return s.ctx }

// Stream returns the stream server interceptor: a stream takes one unit
// (or, under a concurrency limit, holds a lease until it ends) when it
// opens.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !i.limits(info.FullMethod) {
			return handler(srv, ss)
		}
		d, decided, lease, md, err := i.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md) // nothing is sent yet, so it cannot be too late
		}
		if err != nil {
			return err
		}
		if decided {
			ss = &decidedStream{ServerStream: ss, ctx: &decisionCtx{Context: ss.Context(), d: d, lease: lease}}
		}
		if lease != nil {
			// The stream ends when the handler returns, whether it ran
			// to its end, the client cancelled or it panicked.
			defer i.release(ss.Context(), info.FullMethod, lease)
		}
		return handler(srv, ss)
	}
}

// limits reports whether calls to method are limited.
func (i *Interceptor) limits(method string) bool {
	if i.exempt.matches(method) {
		return false
	}
	return i.only.empty() || i.only.matches(method)
}

// decide takes a unit (or a lease) for the call and returns the decision
// (decided is false when none was made), the lease to release when the
// call ends, the metadata to send and the call's error: nil to serve it.
func (i *Interceptor) decide(ctx context.Context, method string) (d limiter.Decision, decided bool, lease *limiter.Lease, md metadata.MD, err error) {
	key := i.key(ctx, method)
	if key == "" {
		return d, false, nil, nil, errNoKey
	}
	if i.leases() {
		lease, d, err = i.lim.Acquire(ctx, key)
	} else {
		d, err = i.lim.Allow(ctx, key)
	}
	if err != nil {
		if errors.Is(err, limiter.ErrInvalidRequest) {
			return d, false, nil, nil, errNoKey
		}
		if i.headers&DraftHeaders != 0 {
			md = metadata.MD{"ratelimit-policy": {i.policy.Policy()}}
		}
		return d, false, nil, md, i.storeError(ctx, method, err)
	}
	md = i.fields(d)
	if d.Allowed {
		return d, true, lease, md, nil
	}
	if md == nil {
		md = metadata.MD{}
	}
	md["retry-after"] = []string{strconv.FormatInt(ratelimitfields.RetryAfter(d.RetryAfter), 10)}
	return d, true, nil, md, i.denial(d)
}

var errNoKey = status.Error(codes.InvalidArgument, "grpclimit: the call does not say who is making it (no rate limit key)")

// storeError applies the error policy to a store failure.
func (i *Interceptor) storeError(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The client went away or its deadline passed; nothing failed.
		i.logger.LogAttrs(ctx, slog.LevelDebug, "limitkit: rate limit not decided; call ended",
			slog.String("method", method), slog.Any("error", err))
		return status.FromContextError(ctx.Err()).Err()
	}
	if i.onError == FailClosed {
		i.logger.LogAttrs(ctx, slog.LevelError, "limitkit: rate limit not decided; call refused",
			slog.String("policy", i.policyName), slog.String("method", method), slog.Any("error", err))
		// The cause stays in the log: store errors name servers.
		return status.Error(codes.Unavailable, "grpclimit: rate limit could not be decided; retry later")
	}
	i.logger.LogAttrs(ctx, slog.LevelError, "limitkit: rate limit not decided; call let through",
		slog.String("policy", i.policyName), slog.String("method", method), slog.Any("error", err))
	return nil
}

// denial is the status of a denied call. Denied calls are what an attack
// sends, so the constant parts are made once (see quotas).
func (i *Interceptor) denial(d limiter.Decision) error {
	q := &i.quotas[0]
	if i.policy.IsGuard(d) {
		q = &i.quotas[1]
	}
	retry := max(d.RetryAfter, 0)
	ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	if err != nil || q.detail == nil {
		// Only a detail that cannot be marshalled fails; these can.
		return status.Error(codes.ResourceExhausted, q.message+retry.String())
	}
	// FromProto copies the details, so the shared QuotaFailure is safe.
	return status.FromProto(&spb.Status{
		Code:    int32(codes.ResourceExhausted),
		Message: q.message + retry.String(),
		Details: []*anypb.Any{ri, q.detail},
	}).Err()
}

// quota is the constant part of one policy's denials.
type quota struct {
	message string     // the status message, less the retry delay
	detail  *anypb.Any // its errdetails.QuotaFailure
}

// newQuota makes a policy's quota; lease is true for a concurrency limit,
// whose limit is calls in flight and whose window is the lease timeout.
func newQuota(name string, limit int64, window time.Duration, lease bool) quota {
	q := quota{message: fmt.Sprintf("grpclimit: rate limit %q exceeded; retry after ", name)}
	desc := fmt.Sprintf("%d requests per %v", limit, window)
	if lease {
		q.message = fmt.Sprintf("grpclimit: concurrency limit %q reached; retry after at most ", name)
		desc = fmt.Sprintf("%d concurrent requests", limit)
	}
	q.detail, _ = anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "policy:" + name,
		Description: desc,
		QuotaId:     name,
		QuotaValue:  limit,
	}}})
	return q
}

// fields returns the rate-limit metadata of d, as limiter/httplimit writes
// its header fields; nil when none are selected.
func (i *Interceptor) fields(d limiter.Decision) metadata.MD {
	if i.headers == 0 {
		return nil
	}
	md := make(metadata.MD, 5)
	// A fallback failing open that counted nothing gets no ratelimit:
	// r=0 would tell clients to stop (ratelimitfields.Counted).
	i.policy.Fields(d, i.headers&DraftHeaders != 0, i.headers&XRateLimitHeaders != 0, func(f ratelimitfields.Field, value string) {
		md[f.LowerName()] = []string{value}
	})
	return md
}
