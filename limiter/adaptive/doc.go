// Package adaptive protects a service from itself: a concurrency limit
// that follows the latency it measures, priorities that shed the lowest
// class first, and client-side throttling for outgoing calls.
//
// limitkit's other limiters bound what each client may ask; this one
// bounds what the service takes in all, whoever asks, at the concurrency
// where its latency stops being flat. A Limiter admits a request while
// fewer than its limit are in flight (Acquire, then one of the Token's
// OnSuccess, OnDropped, OnIgnore); every Config.Window the Law moves the
// limit from what the window measured, within [Config.Min, Config.Max]:
//
//   - Gradient2 (Netflix concurrency-limits): the limit grows while the
//     window's latency stays within a tolerance of its long average, and
//     falls by their ratio past it. The default.
//   - Vegas (Netflix concurrency-limits, with Envoy's probe): keeps the
//     queue it estimates from the lowest latency seen between two bounds,
//     and learns that floor again one window in ProbeWindows.
//   - AIMD: grows by one per window, multiplied by a backoff after a
//     window with a drop (a timeout, an overload answer from below).
//   - Fixed: stays where it started; a plain concurrency limit with the
//     priorities and metrics.
//
// Each request has a Priority: Critical, Default or Sheddable. Default
// requests fill at most Config.DefaultShare of the limit and Sheddable
// ones Config.SheddableShare, so the rest is kept for the classes above
// and under overload the lowest class is refused first. With a queue
// (Config.QueueSize) a request over the limit waits, a bounded time, for a
// slot; slots go to the highest class first, a full queue sheds its
// lowest class for a higher one, and a wait ends while the request's
// deadline still leaves the time the service takes, so that it is refused
// rather than served to a caller that gave up.
//
// Time is read from Config.Clock, so tests drive the laws with a
// clock.Fake. Decisions, releases and the limit's windows go to an
// Observer (Slog here; backend/observe/promobserve's NewAdaptive for
// Prometheus).
//
// Throttle is the client's side (Google SRE's adaptive throttling): an
// outgoing call is refused locally with probability max(0, (requests −
// K·accepts)/(requests + 1)) over a sliding window, so that a backend that
// refuses most calls is not sent every retry of every caller.
//
// limiter/httplimit (NewAdaptive, ThrottleTransport) and
// limiter/grpclimit (NewAdaptive, ThrottleUnary) serve both over the
// transports. The package links no third-party code.
package adaptive
