package grpclimit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/limiter/transport"
)

// Option configures New, NewComposite and NewPlans. Options apply in
// order; a nil Option is ignored. An option given a value it cannot use
// makes the constructor fail with an error naming the option.
type Option func(*options) error

// options are what the Options set, over the defaults build gives.
type options struct {
	set     transport.Settings
	key     KeyFunc
	only    methods
	exempt  methods
	onError ErrorPolicy
}

// WithKey sets how calls are keyed (default PeerAddr()).
func WithKey(k KeyFunc) Option {
	return func(o *options) error {
		return transport.SetFunc(&o.key, k, k == nil, "WithKey: the key func is nil; pass one such as PeerAddr(), or leave the option out")
	}
}

// WithMethods limits only the methods matching patterns (default: every
// method). A pattern is a full method, "/package.Service/Method", or a whole
// service, "/package.Service/*". Check the patterns against a server's
// services with Validate.
func WithMethods(patterns ...string) Option {
	return func(o *options) error {
		if len(patterns) == 0 {
			return errors.New("WithMethods: no patterns; leave the option out to limit every method")
		}
		if err := o.only.add(patterns); err != nil {
			return fmt.Errorf("WithMethods: %w", err)
		}
		return nil
	}
}

// WithoutMethods never limits the methods matching patterns (same syntax
// as WithMethods), such as health checks: "/grpc.health.v1.Health/*". It
// wins over WithMethods. Exempt calls cost no store call.
func WithoutMethods(patterns ...string) Option {
	return func(o *options) error {
		if len(patterns) == 0 {
			return errors.New("WithoutMethods: no patterns; give some, or leave the option out")
		}
		if err := o.exempt.add(patterns); err != nil {
			return fmt.Errorf("WithoutMethods: %w", err)
		}
		return nil
	}
}

// Defaults of the options.
const (
	// DefaultPolicyName names the policy in the metadata and in
	// QuotaFailure unless WithPolicyName says otherwise.
	DefaultPolicyName = transport.DefaultPolicyName
	// DefaultReleaseTimeout bounds the release of a lease unless
	// WithReleaseTimeout says otherwise.
	DefaultReleaseTimeout = transport.DefaultReleaseTimeout
)

// WithPolicyName names the policy in the rate-limit metadata and in
// QuotaFailure (default DefaultPolicyName). The name must be printable
// ASCII.
func WithPolicyName(name string) Option {
	return func(o *options) error { return o.set.SetPolicyName(name) }
}

// The metadata field sets WithHeaders selects, as in limiter/httplimit:
// DraftHeaders (ratelimit-policy and ratelimit, the IETF httpapi draft's
// fields; the default) and XRateLimitHeaders (x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset, seconds from now).
const (
	DraftHeaders      = transport.DraftHeaders
	XRateLimitHeaders = transport.XRateLimitHeaders
)

// Headers selects which rate-limit fields response metadata carries;
// combine them with |.
type Headers = transport.Headers

// WithHeaders selects the metadata fields sent (default DraftHeaders). 0
// sends none but retry-after.
func WithHeaders(h Headers) Option {
	return func(o *options) error { return o.set.SetHeaders(h) }
}

// WithReleaseTimeout bounds how long the release of a lease may take
// (default DefaultReleaseTimeout). A release that fails or times out is
// logged; its slot comes back when the lease times out.
func WithReleaseTimeout(d time.Duration) Option {
	return func(o *options) error { return o.set.SetReleaseTimeout(d) }
}

// WithLogger sets the logger store failures and failed lease releases are
// reported to (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { return o.set.SetLogger(l) }
}

// WithErrorPolicy sets what happens when the store fails (default
// FailOpen).
func WithErrorPolicy(p ErrorPolicy) Option {
	return func(o *options) error {
		if p != FailOpen && p != FailClosed {
			return fmt.Errorf("WithErrorPolicy: unknown error policy %d; use FailOpen or FailClosed", p)
		}
		o.onError = p
		return nil
	}
}
