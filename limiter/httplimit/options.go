package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/limitkit/limitkit/limiter/transport"
)

// Option configures New, NewComposite and NewPlans. Options apply in
// order; a nil Option is ignored. An option given a value it cannot use
// makes the constructor fail with an error naming the option.
type Option func(*options) error

// options are what the Options set, over the defaults build gives.
type options struct {
	set        transport.Settings
	key        KeyFunc
	onError    ErrorHandler
	denied     http.Handler
	deny       http.Handler
	missingKey http.Handler
}

// WithKey sets how requests are keyed (default ClientIP()).
func WithKey(k KeyFunc) Option {
	return func(o *options) error {
		return transport.SetFunc(&o.key, k, k == nil, "WithKey: the key func is nil; pass one such as ClientIP(), or leave the option out")
	}
}

// WithPolicyName names the policy in the draft headers (default
// DefaultPolicyName). Give each limit its own name when one response can
// carry several. The name must be printable ASCII.
func WithPolicyName(name string) Option {
	return func(o *options) error { return o.set.SetPolicyName(name) }
}

// WithHeaders selects the header fields sent (default DraftHeaders). 0
// sends none but Retry-After.
func WithHeaders(h Headers) Option {
	return func(o *options) error { return o.set.SetHeaders(h) }
}

// WithLogger sets the logger of the default error handler and of failed
// lease releases (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { return o.set.SetLogger(l) }
}

// WithErrorHandler sets what happens when the store fails (default: log
// with the middleware's logger and let the request through).
func WithErrorHandler(h ErrorHandler) Option {
	return func(o *options) error {
		return transport.SetFunc(&o.onError, h, h == nil, "WithErrorHandler: the handler is nil; pass one, or leave the option out to log and serve")
	}
}

// WithDeniedHandler sets the handler that answers denied requests. The
// rate-limit headers and Retry-After are set, and the decision is in the
// request's context (DecisionFrom), before it runs; it must write the status
// itself (default: 429 with a problem+json body for clients that accept
// JSON, a short text body for others). Requests on the deny list are
// WithDenyListHandler's.
func WithDeniedHandler(h http.Handler) Option {
	return handlerOption(h, "WithDeniedHandler", func(o *options) *http.Handler { return &o.denied })
}

// WithDenyListHandler sets the handler that answers requests on the limit's
// deny list, limiter.Config.Deny (default: 403 Forbidden with a short text
// body). Requests over the limit are WithDeniedHandler's.
func WithDenyListHandler(h http.Handler) Option {
	return handlerOption(h, "WithDenyListHandler", func(o *options) *http.Handler { return &o.deny })
}

// WithMissingKey sets the handler that answers requests for which the key
// func finds no key (default: 400 with a short text body). To limit such
// requests by another key instead, use FirstOf in WithKey.
func WithMissingKey(h http.Handler) Option {
	return handlerOption(h, "WithMissingKey", func(o *options) *http.Handler { return &o.missingKey })
}

// handlerOption is the option named name that sets the handler field
// returns to h.
func handlerOption(h http.Handler, name string, field func(*options) *http.Handler) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New(name + ": the handler is nil; pass one, or leave the option out for the default")
		}
		*field(o) = h
		return nil
	}
}

// DefaultReleaseTimeout bounds the release of a lease unless
// WithReleaseTimeout says otherwise.
const DefaultReleaseTimeout = transport.DefaultReleaseTimeout

// WithReleaseTimeout bounds how long the release of a lease may take
// (default DefaultReleaseTimeout). A release that fails or times out is
// logged; its slot comes back when the lease times out (the limit's
// Window).
func WithReleaseTimeout(d time.Duration) Option {
	return func(o *options) error { return o.set.SetReleaseTimeout(d) }
}
