package httplimit

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/transport"
)

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
