package grpclimit

import (
	"context"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/internal/transport"
)

// DefaultReleaseTimeout bounds the release of a lease unless
// WithReleaseTimeout says otherwise.
const DefaultReleaseTimeout = transport.DefaultReleaseTimeout

// WithReleaseTimeout bounds how long the release of a lease may take
// (default DefaultReleaseTimeout). A release that fails or times out is
// logged; its slot comes back when the lease times out.
func WithReleaseTimeout(d time.Duration) Option {
	return func(i *Interceptor) error { return i.set.SetReleaseTimeout(d) }
}

// LeaseFrom returns the lease the interceptor holds for the call whose
// context is ctx, under a concurrency limit: a handler that may run longer
// than the lease timeout renews it (limiter.Lease.Renew). It is nil for
// other limits and undecided calls. The interceptor releases it; the
// handler need not.
func LeaseFrom(ctx context.Context) *limiter.Lease { return transport.LeaseFrom(ctx) }

// release gives back the lease of a call that ended (see
// transport.Settings.Release).
func (i *Interceptor) release(callCtx context.Context, method string, lease *limiter.Lease) {
	i.set.Release(callCtx, lease, "grpclimit.LeaseFrom", slog.String("policy", i.set.PolicyName), slog.String("method", method))
}
