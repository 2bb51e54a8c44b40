package grpclimit

import (
	"context"

	"github.com/limitkit/limitkit/limiter"
)

// SetReleaseHook makes ic release leases with hook, for tests' controls.
func SetReleaseHook(ic *Interceptor, hook func(context.Context, *limiter.Lease) error) {
	ic.set.ReleaseHook = hook
}
