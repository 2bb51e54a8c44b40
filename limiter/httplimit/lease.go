package httplimit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/internal/transport"
)

// DefaultReleaseTimeout bounds the release of a lease unless
// WithReleaseTimeout says otherwise.
const DefaultReleaseTimeout = transport.DefaultReleaseTimeout

// WithReleaseTimeout bounds how long the release of a lease may take
// (default DefaultReleaseTimeout). A release that fails or times out is
// logged; its slot comes back when the lease times out (the limit's
// Window).
func WithReleaseTimeout(d time.Duration) Option {
	return func(m *Middleware) error { return m.set.SetReleaseTimeout(d) }
}

// LeaseFrom returns the lease the middleware holds for the request whose
// context is ctx, under a concurrency limit: a handler that may run longer
// than the lease timeout renews it (limiter.Lease.Renew). It is nil for
// other limits, exempt requests, and admissions that hold no lease (a
// fallback failing open). The middleware releases it; the handler need
// not.
func LeaseFrom(ctx context.Context) *limiter.Lease { return transport.LeaseFrom(ctx) }

// release gives back the lease of r once its handler has returned or
// panicked (see transport.Settings.Release).
func (m *Middleware) release(r *http.Request, lease *limiter.Lease) {
	m.set.Release(r.Context(), lease, "httplimit.LeaseFrom",
		slog.String("policy", m.set.PolicyName), slog.String("method", r.Method), slog.String("path", r.URL.Path))
}

// Limit is one limit of a limiter.Composite as NewComposite serves it.
type Limit struct {
	// Key keys the requests for this limit. Required.
	Key KeyFunc
	// Policy names the limit in the draft headers and in problem bodies;
	// printable ASCII, one name per limit. Required.
	Policy string
}

// NewComposite returns middleware enforcing the limits of c, all or
// nothing, limits[i] describing c's limit i. When one of c's limits is a
// concurrency limit, each request holds a lease (limiter.Composite.Admit)
// released as under New; otherwise it takes a unit of each. RateLimit-Policy
// lists every limit; RateLimit describes the one the decision names
// (limiter.Decision.Rule). The fields follow limiter.Composite.SetConfigs.
// WithKey and WithPolicyName do not apply (each Limit has its own).
func NewComposite(c *limiter.Composite, limits []Limit, opts ...Option) (*Middleware, error) {
	keys := make([]func(*http.Request) Key, len(limits))
	names := make([]string, len(limits))
	for i, l := range limits {
		keys[i], names[i] = l.Key, l.Policy
	}
	return build(opts, func(m *Middleware) (*transport.Core[*http.Request], error) {
		m.set.PolicyName = transport.First(names, m.set.PolicyName)
		return transport.ForComposite(c, keys, names, problems)
	})
}
