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
// The limit's exemptions and deny list (limiter.Config.Exempt and Deny)
// cost no store call: an exempt call is served without fields or
// decision, a deny-listed one fails with codes.PermissionDenied. Their
// address entries apply only to keys derived from the peer's address
// (PeerAddr, and IPv6Prefix, Join or FirstOf of it; see Key).
//
// The metadata and QuotaFailure follow the limiter's configuration: after
// limiter.Limiter.SetConfig (or a configuration file's reload) they
// describe the new limit, and a change to or from "concurrency" switches
// between units and leases without failing a call in flight
// (limiter.Limiter.Admit decides both from one configuration).
// NewComposite serves a limiter.Composite and NewPlans a limiter.Plans the
// same way.
//
// A store failure never panics and by default never fails the call: it is
// logged with log/slog and the call is served (FailOpen). WithErrorPolicy
// (FailClosed) answers codes.Unavailable instead. A call that yields no key
// fails with codes.InvalidArgument: serving it would let clients escape the
// limit by leaving out what names them.
package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

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
	"github.com/limitkit/limitkit/limiter/transport"
)

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

// Interceptor limits the calls of a gRPC server. It is safe for concurrent
// use; build it with New, NewComposite or NewPlans.
type Interceptor struct {
	options
	core *transport.Core[call]
}

// call is what key funcs read: the call's context and full method.
type call struct {
	ctx    context.Context
	method string
}

// New returns interceptors enforcing lim. It returns an error for a nil
// limiter, an invalid option or a malformed method pattern.
func New(lim *limiter.Limiter, opts ...Option) (*Interceptor, error) {
	return build(opts, func(o *options) (*transport.Core[call], error) {
		return transport.ForLimiter(lim, o.key.onCall, o.set.PolicyName, quotas)
	})
}

// NewPlans returns interceptors enforcing the plan p's resolver chooses for
// each call's key (limiter.Plans.Admit): each plan's limit, with its
// metadata, follows that plan's configuration.
func NewPlans(p *limiter.Plans, opts ...Option) (*Interceptor, error) {
	return build(opts, func(o *options) (*transport.Core[call], error) {
		return transport.ForPlans(p, o.key.onCall, o.set.PolicyName, quotas)
	})
}

// Limit is one limit of a limiter.Composite as NewComposite serves it.
type Limit struct {
	// Key keys the calls for this limit. Required.
	Key KeyFunc
	// Policy names the limit in the metadata and in QuotaFailure;
	// printable ASCII, one name per limit. Required.
	Policy string
}

// NewComposite returns interceptors enforcing the limits of c, all or
// nothing, limits[i] describing c's limit i: a lease when one of them is
// a concurrency limit (released as under New), a unit of each otherwise.
// The ratelimit-policy metadata lists every limit; ratelimit and a
// denial's QuotaFailure describe the one the decision names. WithKey and
// WithPolicyName do not apply (each Limit has its own).
func NewComposite(c *limiter.Composite, limits []Limit, opts ...Option) (*Interceptor, error) {
	keys := make([]KeyFunc, len(limits))
	names := make([]string, len(limits))
	for j, l := range limits {
		keys[j], names[j] = l.Key, l.Policy
	}
	return build(opts, func(o *options) (*transport.Core[call], error) {
		o.set.PolicyName = transport.First(names, o.set.PolicyName)
		return transport.ForComposite(c, onCalls(keys), names, quotas)
	})
}

// build applies opts to an Interceptor with the defaults and gives it the
// core newCore makes.
func build(opts []Option, newCore func(*options) (*transport.Core[call], error)) (*Interceptor, error) {
	i := &Interceptor{options: options{set: transport.NewSettings(), key: PeerAddr()}}
	var err error
	if i.core, err = transport.Build("grpclimit", &i.options, opts, newCore); err != nil {
		return nil, err
	}
	return i, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !i.limits(info.FullMethod) {
			return handler(ctx, req)
		}
		o, md, err := i.decide(ctx, info.FullMethod)
		if md != nil {
			// Fails only outside a server call (a test calling the
			// interceptor directly): nothing to send the fields on.
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if o.Verdict == transport.Admitted {
			ctx = transport.WithDecision(ctx, &o)
		}
		if o.Lease != nil {
			// A deferred call runs on return and while panicking alike.
			defer i.release(ctx, info.FullMethod, o.Lease)
		}
		return handler(ctx, req)
	}
}

// DecisionFrom returns the decision the interceptor made for the call whose
// context is ctx, for the handler (and interceptors chained after it). ok
// is false when no decision was made: an exempt method or key, or a call
// served because the store failed.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	return transport.DecisionFrom(ctx)
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
		o, md, err := i.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md) // nothing is sent yet, so it cannot be too late
		}
		if err != nil {
			return err
		}
		if o.Verdict == transport.Admitted {
			ss = &decidedStream{ServerStream: ss, ctx: transport.WithDecision(ss.Context(), &o)}
		}
		if o.Lease != nil {
			// The stream ends when the handler returns, whether it ran
			// to its end, the client cancelled or it panicked.
			defer i.release(ss.Context(), info.FullMethod, o.Lease)
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

// decide admits the call and returns the outcome, the metadata to send
// and the call's error: nil to serve it.
func (i *Interceptor) decide(ctx context.Context, method string) (transport.Outcome, metadata.MD, error) {
	o := i.core.Admit(ctx, call{ctx: ctx, method: method})
	md, err := i.answer(ctx, method, o)
	return o, md, err
}

// answer returns the metadata to send for the admission o and the call's
// error: nil to serve it (as decide); NewCost's interceptors answer their
// reservations with it too.
func (i *Interceptor) answer(ctx context.Context, method string, o transport.Outcome) (metadata.MD, error) {
	switch o.Verdict {
	case transport.Exempt:
		return nil, nil
	case transport.NoKey:
		return nil, errNoKey
	case transport.DenyListed:
		return nil, errDenyListed
	case transport.Failed:
		var md metadata.MD
		if i.set.Headers&DraftHeaders != 0 && o.View != nil {
			md = metadata.MD{"ratelimit-policy": {o.View.Fields.Policy()}}
		}
		return md, i.storeError(ctx, method, &o)
	}
	md := i.fields(o.View, o.Decision)
	if o.Verdict == transport.Admitted {
		return md, nil
	}
	if md == nil {
		md = metadata.MD{}
	}
	md["retry-after"] = []string{strconv.FormatInt(ratelimitfields.RetryAfter(o.Decision.RetryAfter), 10)}
	return md, denial(o.View, o.Decision)
}

var (
	errNoKey      = status.Error(codes.InvalidArgument, "grpclimit: the call does not say who is making it (no rate limit key)")
	errDenyListed = status.Error(codes.PermissionDenied, "grpclimit: this client may not use this service")
)

// storeError applies the error policy to a store failure.
func (i *Interceptor) storeError(ctx context.Context, method string, o *transport.Outcome) error {
	if transport.Ended(ctx, o.Err) {
		i.set.LogFailure(ctx, o, "", slog.String("method", method))
		return status.FromContextError(ctx.Err()).Err()
	}
	if i.onError == FailClosed {
		i.set.LogFailure(ctx, o, "call refused", slog.String("method", method))
		return status.Error(codes.Unavailable, "grpclimit: rate limit could not be decided; retry later")
	}
	i.set.LogFailure(ctx, o, "call let through", slog.String("method", method))
	return nil
}

// denial is the status of a denied call. Denied calls are what an attack
// sends, so the constant parts are made once per configuration (quotas).
func denial(v *transport.View, d limiter.Decision) error {
	q := &v.Extra.([]quota)[v.Fields.Index(d)]
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

// quotas makes a view's quotas, one per policy (the View's Extra). A
// concurrency limit's limit is calls in flight and its window the lease
// timeout.
func quotas(v *transport.View) any {
	qs := make([]quota, len(v.Policies))
	for j, p := range v.Policies {
		q := quota{message: fmt.Sprintf("grpclimit: rate limit %q exceeded; retry after ", p.Name)}
		desc := fmt.Sprintf("%d requests per %v", p.Limit, p.Window)
		if p.Lease {
			q.message = fmt.Sprintf("grpclimit: concurrency limit %q reached; retry after at most ", p.Name)
			desc = fmt.Sprintf("%d concurrent requests", p.Limit)
		}
		q.detail, _ = anypb.New(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "policy:" + p.Name,
			Description: desc,
			QuotaId:     p.Name,
			QuotaValue:  p.Limit,
		}}})
		qs[j] = q
	}
	return qs
}

// fields returns the rate-limit metadata of d, as limiter/httplimit writes
// its header fields; nil when none are selected.
func (i *Interceptor) fields(v *transport.View, d limiter.Decision) metadata.MD {
	if i.set.Headers == 0 {
		return nil
	}
	md := make(metadata.MD, 5)
	i.set.Fields(v, d, func(f ratelimitfields.Field, value string) {
		md[f.LowerName()] = []string{value}
	})
	return md
}
