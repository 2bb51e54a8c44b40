package grpclimit

import (
	"context"
	"log/slog"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/transport"
)

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
