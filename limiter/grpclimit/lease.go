package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
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
// logged; its slot comes back when the lease times out.
func WithReleaseTimeout(d time.Duration) Option {
	return func(i *Interceptor) error {
		if d <= 0 {
			return fmt.Errorf("grpclimit: release timeout %v; give a positive duration such as 2s", d)
		}
		i.releaseTimeout = d
		return nil
	}
}

// LeaseFrom returns the lease the interceptor holds for the call whose
// context is ctx, under a concurrency limit: a handler that may run longer
// than the lease timeout renews it (limiter.Lease.Renew). It is nil for
// other limits and undecided calls. The interceptor releases it; the
// handler need not.
func LeaseFrom(ctx context.Context) *limiter.Lease {
	if c, ok := ctx.Value(decisionKey{}).(*decisionCtx); ok {
		return c.lease
	}
	return nil
}

// release gives back the lease of a call that ended (see
// ratelimitfields.ReleaseLease).
func (i *Interceptor) release(callCtx context.Context, method string, lease *limiter.Lease) {
	release := lease.Release
	if i.releaseHook != nil {
		release = func(context.Context) error { return i.releaseHook(callCtx, lease) }
	}
	ratelimitfields.ReleaseLease(callCtx, i.releaseTimeout, release, i.logger, "grpclimit.LeaseFrom",
		slog.String("policy", i.policyName), slog.String("method", method))
}

// mode is whether the limiter's configuration of one generation holds
// leases.
type mode struct {
	gen   uint64
	lease bool
}

// leases reports whether the limit in force is a concurrency limit, to be
// taken with Acquire: it follows limiter.Limiter.SetConfig, at the cost of
// an atomic load and a compare per call.
func (i *Interceptor) leases() bool {
	gen := i.lim.Generation()
	if m := i.mode.Load(); m != nil && m.gen == gen {
		return m.lease
	}
	// Read after gen: a change in between makes this newer than gen says,
	// and the next call looks again.
	m := &mode{gen: gen, lease: ratelimitfields.IsLease(algorithms.Rule{Algorithm: i.lim.Config().Algorithm})}
	i.mode.Store(m)
	return m.lease
}
