package adaptive

import (
	"context"
	"log/slog"
	"time"
)

// Outcome is what Acquire decided.
type Outcome string

// The outcomes, the values of the outcome label of metrics.
const (
	// Admitted: a slot was free.
	Admitted Outcome = "admitted"
	// Queued: admitted after waiting in the queue.
	Queued Outcome = "queued"
	// Rejected: refused at once (the limit reached, no room to wait, or
	// too little time before the request's deadline).
	Rejected Outcome = "rejected"
	// Shed: refused while waiting, its place taken by a higher class.
	Shed Outcome = "shed"
	// Expired: refused when its wait ran out, before its deadline.
	Expired Outcome = "expired"
	// Canceled: the request's context ended while it waited.
	Canceled Outcome = "canceled"
)

// Allowed reports an outcome that admitted the request.
func (o Outcome) Allowed() bool { return o == Admitted || o == Queued }

// Result is how an admitted request ended (the Token method called).
type Result string

// The results.
const (
	// Succeeded: Token.OnSuccess.
	Succeeded Result = "success"
	// Dropped: Token.OnDropped.
	Dropped Result = "dropped"
	// Ignored: Token.OnIgnore.
	Ignored Result = "ignored"
)

// Decision describes one Acquire.
type Decision struct {
	// Limiter is Config.Name.
	Limiter string
	// Priority is the request's class.
	Priority Priority
	// Outcome is what became of it.
	Outcome Outcome
	// Wait is how long it waited in the queue.
	Wait time.Duration
	// InFlight is the requests in flight after the decision.
	InFlight int
	// Limit is the limit in force.
	Limit int
}

// Release describes the end of an admitted request.
type Release struct {
	// Limiter is Config.Name.
	Limiter string
	// Priority is the request's class.
	Priority Priority
	// Result is how it ended.
	Result Result
	// Latency is the time from its admission to its release: the
	// latency the limiter measures.
	Latency time.Duration
}

// LimitChange describes the end of a sampling window: the limit before
// and after it (often the same) and what was measured.
type LimitChange struct {
	// Limiter is Config.Name; Law is its Law's Name.
	Limiter, Law string
	// From and To are the limit before and after the window.
	From, To int
	// Window is what the law was given.
	Window Window
}

// Observer receives what a Limiter does, as backend/observe's Observer
// does for rate limits: a struct of optional funcs, called in the
// goroutine of the request they describe, after the decision and outside
// the limiter's lock. They must be quick and safe for concurrent use.
type Observer struct {
	// OnDecision is called after every Acquire, with its context.
	OnDecision func(context.Context, Decision)
	// OnRelease is called when a token is released, with the context of
	// its Acquire.
	OnRelease func(context.Context, Release)
	// OnLimit is called at the end of every sampling window.
	OnLimit func(LimitChange)
}

// Join returns an Observer that passes everything to each of obs in turn.
func Join(obs ...Observer) Observer {
	var j Observer
	for _, o := range obs {
		if f, prev := o.OnDecision, j.OnDecision; f != nil {
			j.OnDecision = func(ctx context.Context, d Decision) {
				if prev != nil {
					prev(ctx, d)
				}
				f(ctx, d)
			}
		}
		if f, prev := o.OnRelease, j.OnRelease; f != nil {
			j.OnRelease = func(ctx context.Context, r Release) {
				if prev != nil {
					prev(ctx, r)
				}
				f(ctx, r)
			}
		}
		if f, prev := o.OnLimit, j.OnLimit; f != nil {
			j.OnLimit = func(c LimitChange) {
				if prev != nil {
					prev(c)
				}
				f(c)
			}
		}
	}
	return j
}

// Slog returns an Observer that logs to l (slog.Default() when nil): a
// change of the limit at Info, refusals at Debug (checked with Enabled
// first: under overload they are many), windows that kept the limit at
// Debug.
func Slog(l *slog.Logger) Observer {
	if l == nil {
		l = slog.Default()
	}
	return Observer{
		OnDecision: func(ctx context.Context, d Decision) {
			if d.Outcome.Allowed() || !l.Enabled(ctx, slog.LevelDebug) {
				return
			}
			l.LogAttrs(ctx, slog.LevelDebug, "limitkit: adaptive limit refused a request",
				slog.String("limiter", d.Limiter), slog.String("priority", d.Priority.String()),
				slog.String("outcome", string(d.Outcome)), slog.Duration("wait", d.Wait),
				slog.Int("in_flight", d.InFlight), slog.Int("limit", d.Limit))
		},
		OnLimit: func(c LimitChange) {
			level := slog.LevelDebug
			if c.From != c.To {
				level = slog.LevelInfo
			}
			ctx := context.Background()
			if !l.Enabled(ctx, level) {
				return
			}
			l.LogAttrs(ctx, level, "limitkit: adaptive limit window",
				slog.String("limiter", c.Limiter), slog.String("law", c.Law),
				slog.Int("from", c.From), slog.Int("to", c.To),
				slog.Duration("rtt", c.Window.RTT), slog.Duration("min_rtt", c.Window.MinRTT),
				slog.Int("samples", c.Window.Samples), slog.Int("in_flight", c.Window.InFlight),
				slog.Bool("dropped", c.Window.Dropped))
		},
	}
}
