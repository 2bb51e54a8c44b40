package ratelimitfields

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/limiter"
)

// ReleaseLease gives back a lease once its request or call has ended, for
// the HTTP middleware and the gRPC interceptors alike. ctx may be over
// (the client went away), so release runs without its cancellation, under
// a timeout of its own. An expired lease is logged as a warning (for a
// while more than the limit were in flight; renewHint says how to renew),
// any other failure as an error (the slot comes back when the lease times
// out); attrs describe the request.
func ReleaseLease(ctx context.Context, timeout time.Duration, release func(context.Context) error,
	logger *slog.Logger, renewHint string, attrs ...slog.Attr) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	switch err := release(ctx); {
	case err == nil:
	case errors.Is(err, limiter.ErrLeaseNotHeld):
		logger.LogAttrs(ctx, slog.LevelWarn, "limitkit: lease expired before its request ended; raise the limit's window or renew the lease ("+renewHint+")", attrs...)
	default:
		logger.LogAttrs(ctx, slog.LevelError, "limitkit: lease not released; its slot comes back when the lease times out",
			append(attrs, slog.Any("error", err))...)
	}
}
