package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// decisionKey is the context key of the decision; a type of its own so no
// other package's key can collide with it.
type decisionKey struct{}

// decided carries the decision, the lease and the view in one allocation,
// where context.WithValue would take two (its node and the boxed
// Decision).
type decided struct {
	context.Context
	d     limiter.Decision
	lease *limiter.Lease
	view  *View
}

// Value answers decisionKey with the context itself and passes every other
// key to the parent.
func (c *decided) Value(key any) any {
	if key == (decisionKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// WithDecision returns ctx carrying the outcome's decision, lease and view.
func WithDecision(ctx context.Context, o *Outcome) context.Context {
	return &decided{Context: ctx, d: o.Decision, lease: o.Lease, view: o.View}
}

func from(ctx context.Context) *decided {
	c, _ := ctx.Value(decisionKey{}).(*decided)
	return c
}

// DecisionFrom returns the decision carried by ctx (the innermost one, when
// transports are stacked); ok is false when there is none.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	if c := from(ctx); c != nil {
		return c.d, true
	}
	return limiter.Decision{}, false
}

// LeaseFrom returns the lease carried by ctx, nil when there is none.
func LeaseFrom(ctx context.Context) *limiter.Lease {
	if c := from(ctx); c != nil {
		return c.lease
	}
	return nil
}

// ViewFrom returns the view the decision carried by ctx was answered
// with, nil when there is none.
func ViewFrom(ctx context.Context) *View {
	if c := from(ctx); c != nil {
		return c.view
	}
	return nil
}

// DefaultReleaseTimeout bounds the release of a lease unless a transport's
// WithReleaseTimeout says otherwise.
const DefaultReleaseTimeout = 2 * time.Second

// Settings are the options every transport has. Their setters return
// errors naming the option ("WithLogger: ..."), which Build prefixes with
// the transport's name.
type Settings struct {
	PolicyName string
	Headers    Headers
	Logger     *slog.Logger
	// ReleaseTimeout bounds a lease's release; ReleaseHook, when set (by
	// tests' controls), releases instead.
	ReleaseTimeout time.Duration
	ReleaseHook    func(ctx context.Context, lease *limiter.Lease) error
}

// NewSettings returns the defaults.
func NewSettings() Settings {
	return Settings{PolicyName: DefaultPolicyName, Headers: DraftHeaders,
		Logger: slog.Default(), ReleaseTimeout: DefaultReleaseTimeout}
}

// Headers selects which rate-limit fields answers carry; combine them
// with |.
type Headers uint8

// The header sets.
const (
	// DraftHeaders are RateLimit-Policy and RateLimit, the fields of the
	// IETF httpapi draft. The default.
	DraftHeaders Headers = 1 << iota
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds from now).
	XRateLimitHeaders
)

// DefaultPolicyName names the policy unless WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// SetPolicyName sets the policy name, printable ASCII.
func (s *Settings) SetPolicyName(name string) error {
	if err := ratelimitfields.CheckName(name); err != nil {
		return fmt.Errorf("WithPolicyName: %w", err)
	}
	s.PolicyName = name
	return nil
}

// SetHeaders sets the header sets sent.
func (s *Settings) SetHeaders(h Headers) error {
	if h&^(DraftHeaders|XRateLimitHeaders) != 0 {
		return fmt.Errorf("WithHeaders: unknown header set %#x; combine DraftHeaders and XRateLimitHeaders with |", uint8(h))
	}
	s.Headers = h
	return nil
}

// SetLogger sets the logger of store failures and failed releases.
func (s *Settings) SetLogger(l *slog.Logger) error {
	if l == nil {
		return errors.New("WithLogger: the logger is nil; pass a *slog.Logger, or leave the option out for slog.Default()")
	}
	s.Logger = l
	return nil
}

// SetReleaseTimeout sets how long a lease's release may take.
func (s *Settings) SetReleaseTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("WithReleaseTimeout: the timeout is %v; give a positive duration such as 2s", d)
	}
	s.ReleaseTimeout = d
	return nil
}

// Fields calls set with each rate-limit field of d the settings select. A
// fallback failing open that counted nothing gets no RateLimit: r=0 would
// tell clients to stop (ratelimitfields.Counted).
func (s *Settings) Fields(v *View, d limiter.Decision, set func(f ratelimitfields.Field, value string)) {
	if s.Headers == 0 || v == nil {
		return
	}
	v.Fields.Fields(d, s.Headers&DraftHeaders != 0, s.Headers&XRateLimitHeaders != 0, set)
}

// Release gives back the lease of a request that ended (or panicked). ctx
// may be over (the client went away), so the release runs without its
// cancellation, under the release timeout. An expired lease is logged as
// a warning (for a while more than the limit were in flight; renewHint
// says how to renew), any other failure as an error (the slot comes back
// when the lease times out); attrs describe the request.
func (s *Settings) Release(ctx context.Context, lease *limiter.Lease, renewHint string, attrs ...slog.Attr) {
	release := lease.Release
	if s.ReleaseHook != nil {
		release = func(context.Context) error { return s.ReleaseHook(ctx, lease) }
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ReleaseTimeout)
	defer cancel()
	switch err := release(rctx); {
	case err == nil:
	case errors.Is(err, limiter.ErrLeaseNotHeld):
		s.Logger.LogAttrs(rctx, slog.LevelWarn, "limitkit: lease expired before its request ended; raise the limit's window or renew the lease ("+renewHint+")", attrs...)
	default:
		s.Logger.LogAttrs(rctx, slog.LevelError, "limitkit: lease not released; its slot comes back when the lease times out",
			append(attrs, slog.Any("error", err))...)
	}
}

// Ended reports whether err is only ctx ending: the client went away or
// its deadline passed, and nothing failed.
func Ended(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// LogFailure logs a request whose limit the store could not decide, with
// what became of it ("request let through", "call refused"), at debug
// level when the request had only ended (Ended), as an error otherwise.
// The cause stays in the log: store errors name servers.
func (s *Settings) LogFailure(ctx context.Context, o *Outcome, then string, attrs ...slog.Attr) {
	err := o.Err
	level, msg := slog.LevelError, "limitkit: rate limit not decided; "+then
	if Ended(ctx, err) {
		level, msg = slog.LevelDebug, "limitkit: rate limit not decided; the request ended"
	}
	attrs = append(attrs, slog.String("policy", s.PolicyName))
	if o.View != nil {
		attrs = append(attrs, slog.String("limit", o.View.Label)) // its key prefix
	}
	attrs = append(attrs, slog.Any("error", err))
	s.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// SetFunc sets *dst to f, an option's func, or refuses a nil one (isNil:
// f == nil, which a type parameter cannot say) with the error refusal: the
// option's name, and what to pass instead.
func SetFunc[F any](dst *F, f F, isNil bool, refusal string) error {
	if isNil {
		return errors.New(refusal)
	}
	*dst = f
	return nil
}
