package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/transport"
)

// Cost says how CostMiddleware prices a request whose cost is known only
// after its handler ran (the tokens of an LLM completion).
type Cost struct {
	// Estimate returns the units to reserve for r before its handler
	// runs: an upper bound of its cost keeps the limit exact (see
	// docs/tokens.md). It may read r.Body if it puts back an equal one.
	// An error, or a value below 1, answers 400 Bad Request with the
	// error; a value above the limit reserves the limit (the rest, if
	// spent, is settled as debt). Required.
	Estimate func(r *http.Request) (int64, error)
	// Actual, when set, reads the actual cost from the response's
	// header, trailers included, once the handler has returned without
	// calling ReportCost; ok false leaves the estimate.
	Actual func(r *http.Request, header http.Header) (n int64, ok bool)
}

// CostMiddleware limits requests by what they cost, reserving an estimate
// before the handler and settling the actual cost after it. It is safe
// for concurrent use.
type CostMiddleware struct {
	Middleware
	lim     *limiter.Limiter
	cost    Cost
	reserve reserver
}

// NewCost returns middleware limiting requests by their cost on lim's
// limit, known after the handler: each request reserves Cost.Estimate
// (limiter.Limiter.ReserveN) and settles its actual cost when the handler
// ends (limiter.Reservation.Settle). A reservation that could not be
// settled counts as its estimate until the limit's ReservationTimeout. It
// returns an error for a nil limiter or Estimate, an invalid option, or a
// limit that cannot reserve: a concurrency limit, one with a guard or in
// Shadow mode.
func NewCost(lim *limiter.Limiter, c Cost, opts ...Option) (*CostMiddleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: limiter is nil; build one with limiter.New")
	}
	if cfg := lim.Config(); cfg.Algorithm == algorithms.Concurrency || cfg.Guard != nil || cfg.Mode == limiter.Shadow {
		return nil, errors.New("httplimit: NewCost reserves on one enforced rate limit; this one is a concurrency limit, has a guard or is in Shadow mode")
	}
	return newCost(lim, func(ctx context.Context, key string, n int64) (transport.Settler, limiter.Decision, error) {
		res, d, err := lim.ReserveN(ctx, key, n)
		if res == nil { // no typed nil in the interface
			return nil, d, err
		}
		return res, d, err
	}, c, opts...)
}

// reserver holds estimate units on key: a Limiter's ReserveN. A nil
// Settler with an admitting decision holds nothing (an exempt key).
type reserver func(ctx context.Context, key string, estimate int64) (transport.Settler, limiter.Decision, error)

// newCost returns the middleware reserving with reserve the costs of
// lim's limit, whose configuration the headers describe.
func newCost(lim *limiter.Limiter, reserve reserver, c Cost, opts ...Option) (*CostMiddleware, error) {
	if c.Estimate == nil {
		return nil, errors.New("httplimit: Cost.Estimate is nil; give a func that estimates a request's cost")
	}
	m, err := New(lim, opts...)
	if err != nil {
		return nil, err
	}
	return &CostMiddleware{Middleware: *m, lim: lim, cost: c, reserve: reserve}, nil
}

// ReportCost records n as the actual cost of the request whose context is
// ctx, for CostMiddleware to settle when the handler returns; a later
// report replaces an earlier one. It returns false when no reservation is
// held for ctx (no CostMiddleware, an exempt key, a store failure let
// through).
func ReportCost(ctx context.Context, n int64) bool {
	h := transport.HoldFrom(ctx)
	if h == nil {
		return false
	}
	h.Report(n)
	return true
}

// Handler returns next wrapped by the limit: the request's estimate is
// reserved, or the request refused as by Middleware (429, the same
// headers and problem+json); after next returns, the reservation is
// settled with the cost next reported (ReportCost), or Cost.Actual's, or
// the estimate. When next panics (an aborted response) before reporting a
// cost, the reservation is cancelled; the panic goes on after.
func (m *CostMiddleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		est, err := m.cost.Estimate(r)
		if err == nil && est < 1 {
			err = errors.New("the estimate is below 1")
		}
		if err != nil {
			http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		est = min(est, m.most())
		h := transport.NewHold(nil, est)
		o := m.core.Reserve(r.Context(), r, func(ctx context.Context, key string) (limiter.Decision, error) {
			res, d, err := m.reserve(ctx, key, est)
			h = transport.NewHold(res, est)
			return d, err
		})
		r, _, ok := m.answer(w, r, o)
		if !ok {
			return
		}
		r = r.WithContext(transport.WithHold(r.Context(), h))
		returned := false
		// A deferred call runs on return and while panicking alike; the
		// panic goes on unrecovered.
		defer func() { m.settle(w, r, h, !returned) }()
		next.ServeHTTP(w, r)
		returned = true
	})
}

// most is the largest reservation lim's limit admits: its limit, or its
// guard's when smaller.
func (m *CostMiddleware) most() int64 {
	cfg := m.lim.Config()
	if g := cfg.Guard; g != nil {
		return min(cfg.Limit, g.Limit)
	}
	return cfg.Limit
}

// settle ends h once next returned or panicked (see
// transport.Settings.Settle), reading Cost.Actual first when it returned.
func (m *CostMiddleware) settle(w http.ResponseWriter, r *http.Request, h *transport.Hold, panicked bool) {
	if _, ok := h.Reported(); !ok && !panicked && m.cost.Actual != nil {
		if n, ok := m.cost.Actual(r, w.Header()); ok {
			h.Report(n)
		}
	}
	m.set.Settle(r.Context(), h, panicked,
		slog.String("policy", m.set.PolicyName), slog.String("method", r.Method), slog.String("path", r.URL.Path))
}
