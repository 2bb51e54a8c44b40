package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// DefaultReleaseTimeout bounds the release of a lease unless
// WithReleaseTimeout says otherwise.
const DefaultReleaseTimeout = 2 * time.Second

// WithReleaseTimeout bounds how long the release of a lease may take
// (default DefaultReleaseTimeout). A release that fails or times out is
// logged; its slot comes back when the lease times out (the limit's
// Window).
func WithReleaseTimeout(d time.Duration) Option {
	return func(m *Middleware) error {
		if d <= 0 {
			return fmt.Errorf("httplimit: release timeout %v; give a positive duration such as 2s", d)
		}
		m.releaseTimeout = d
		return nil
	}
}

// LeaseFrom returns the lease the middleware holds for the request whose
// context is ctx, under a concurrency limit: a handler that may run longer
// than the lease timeout renews it (limiter.Lease.Renew). It is nil for
// other limits, exempt requests, and admissions that hold no lease (a
// fallback failing open). The middleware releases it; the handler need
// not.
func LeaseFrom(ctx context.Context) *limiter.Lease {
	if c, ok := ctx.Value(decisionKey{}).(*decisionCtx); ok {
		return c.lease
	}
	return nil
}

// release gives back the lease of r once its handler has returned or
// panicked (see ratelimitfields.ReleaseLease).
func (m *Middleware) release(r *http.Request, lease *limiter.Lease) {
	release := lease.Release
	if m.releaseHook != nil {
		release = func(context.Context) error { return m.releaseHook(r, lease) }
	}
	ratelimitfields.ReleaseLease(r.Context(), m.releaseTimeout, release, m.logger, "httplimit.LeaseFrom",
		slog.String("policy", m.current().policyLabel), slog.String("method", r.Method), slog.String("path", r.URL.Path))
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
// concurrency limit, each request holds a lease (limiter.Composite.Acquire)
// released as under New; otherwise it takes a unit of each. The exempt and
// deny lists are checked against the first limit's key. RateLimit-Policy
// lists every limit; RateLimit describes the one the decision names
// (limiter.Decision.Rule). The fields describe c's limits as they were
// here: after limiter.Composite.SetConfigs, make the middleware again.
// WithKey and WithPolicyName do not apply (each Limit has its own).
func NewComposite(c *limiter.Composite, limits []Limit, opts ...Option) (*Middleware, error) {
	if c == nil {
		return nil, errors.New("httplimit: composite is nil; build one with limiter.NewComposite")
	}
	cfgs := c.Configs()
	if len(limits) != len(cfgs) {
		return nil, fmt.Errorf("httplimit: %d limits for a composite of %d; describe each of its limits", len(limits), len(cfgs))
	}
	m := newMiddleware()
	m.comp = c
	names := make([]string, len(limits))
	for i, l := range limits {
		if l.Key == nil {
			return nil, fmt.Errorf("httplimit: limit %d has no key func", i)
		}
		m.compKeys = append(m.compKeys, l.Key)
		names[i] = l.Policy
	}
	fields, err := ratelimitfields.NewCompositePolicy(names, cfgs)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	if err := m.apply(opts); err != nil {
		return nil, err
	}
	m.key, m.policyName = m.compKeys[0], names[0]
	v := &view{fields: fields, policyLabel: cfgs[0].Prefix}
	for i, cfg := range cfgs {
		v.problem = append(v.problem, problemHead(names[i]))
		v.lease = v.lease || ratelimitfields.IsLease(algorithms.Rule{Algorithm: cfg.Algorithm})
	}
	m.view.Store(v)
	return m, nil
}

// decideComposite decides r under the composite, key being the first
// limit's key.
func (m *Middleware) decideComposite(r *http.Request, key string, v *view) (limiter.Decision, *limiter.Lease, error) {
	keys := make([]string, len(m.compKeys))
	keys[0] = key
	for i := 1; i < len(keys); i++ {
		if keys[i] = m.compKeys[i](r); keys[i] == "" {
			return limiter.Decision{}, nil, fmt.Errorf("%w: no key for limit %d", limiter.ErrInvalidRequest, i)
		}
	}
	if v.lease {
		lease, d, err := m.comp.Acquire(r.Context(), keys...)
		return d, lease, err
	}
	d, err := m.comp.Allow(r.Context(), keys...)
	return d, nil, err
}
