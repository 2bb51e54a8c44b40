package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/limitkit/limitkit/limiter"
)

// Reserve keys r and admits it by reserve, which holds the request's
// estimated cost on key (a Limiter's ReserveN): the outcome is Admit's, with
// the view of the Limiter the core serves (ForLimiter). A core that serves
// a Composite or Plans cannot reserve: its outcome is Failed.
func (c *Core[R]) Reserve(ctx context.Context, r R, reserve func(ctx context.Context, key string) (limiter.Decision, error)) Outcome {
	s, ok := c.src.(*oneSource)
	if !ok {
		return Outcome{Verdict: Failed, Err: errors.New("costs are reserved on a Limiter only, not on a Composite or Plans")}
	}
	k := c.keys[0](r)
	if k.Value == "" {
		return Outcome{Verdict: NoKey}
	}
	o := Outcome{View: s.views.current()}
	var err error
	o.Decision, err = reserve(ctx, k.Value)
	o.classify(err)
	return o
}

// Hold is what a transport holds for a request whose cost is known after
// its handler: the reservation (nil when nothing is held: an exempt key, a
// store failure let through) and the cost the handler reports.
type Hold struct {
	res      Settler
	estimate int64
	actual   atomic.Int64 // the reported cost + 1; 0 until reported
}

// Settler is a reservation: limiter.Reservation.
type Settler interface {
	Settle(ctx context.Context, actual int64) (limiter.Decision, error)
	Cancel(ctx context.Context) error
}

// NewHold returns the hold of res, reserved for estimate units.
func NewHold(res Settler, estimate int64) *Hold { return &Hold{res: res, estimate: estimate} }

// holdKey is the context key of a Hold.
type holdKey struct{}

// WithHold returns ctx carrying h, for ReportCost.
func WithHold(ctx context.Context, h *Hold) context.Context {
	return context.WithValue(ctx, holdKey{}, h)
}

// HoldFrom returns the hold carried by ctx, nil when there is none.
func HoldFrom(ctx context.Context) *Hold {
	h, _ := ctx.Value(holdKey{}).(*Hold)
	return h
}

// Report records n, the request's actual cost (a negative n counts as 0);
// a later report replaces an earlier one.
func (h *Hold) Report(n int64) { h.actual.Store(max(n, 0) + 1) }

// Reported returns the reported cost; ok is false when none was.
func (h *Hold) Reported() (n int64, ok bool) {
	v := h.actual.Load()
	return v - 1, v > 0
}

// Settle ends the hold of a request that ended. A reported cost settles
// the reservation (0 cancels it); without one, a handler that panicked
// (aborted) served nothing, so the reservation is cancelled, and one that
// returned is charged its estimate. ctx may be over (the client went
// away), so it runs without its cancellation, under the release timeout; a
// failure is logged (the reservation counts as its estimate until it
// times out); attrs describe the request.
func (s *Settings) Settle(ctx context.Context, h *Hold, panicked bool, attrs ...slog.Attr) {
	if h == nil || h.res == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ReleaseTimeout)
	defer cancel()
	n, ok := h.Reported()
	if !ok && !panicked {
		n, ok = h.estimate, true
	}
	var err error
	if ok && n > 0 {
		_, err = h.res.Settle(sctx, n)
	} else {
		err = h.res.Cancel(sctx)
	}
	if err != nil {
		s.Logger.LogAttrs(sctx, slog.LevelError, "limitkit: reservation not settled; it counts as its estimate until it times out",
			append(attrs, slog.Int64("estimate", h.estimate), slog.Int64("actual", n), slog.Any("error", err))...)
	}
}
