package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Window summarizes the requests that completed during one sampling
// window: what a Law decides the next limit from.
type Window struct {
	// RTT is the mean latency of the window's successful and dropped
	// requests (a drop's latency is a lower bound of what it would have
	// taken).
	RTT time.Duration
	// MinRTT is the lowest of them.
	MinRTT time.Duration
	// P90 is their 90th percentile.
	P90 time.Duration
	// Samples is how many requests completed (successful or dropped).
	Samples int
	// InFlight is the most requests held at once during the window: a
	// limit far above it was not tested by the window (the service was
	// idle, not fast), so laws do not grow it.
	InFlight int
	// Dropped reports a request dropped during the window (Token.OnDropped:
	// a timeout, an overload answer from below).
	Dropped bool
}

// Law is a control law: from the current limit and one window's summary it
// returns the next limit. The Limiter clamps the result into [Min, Max]
// and calls Update under its lock, from one goroutine at a time, so a Law
// may keep state without locking. A Law value must not be shared by two
// Limiters.
type Law interface {
	// Update returns the limit to use after w, given the limit in force
	// during it.
	Update(limit float64, w Window) float64
	// Name names the law in logs and metrics ("gradient2", "aimd").
	Name() string
}

// Gradient2 is Netflix concurrency-limits' Gradient2 law: it compares the
// window's latency (short) with an exponential average of past windows
// (long). While short stays within Tolerance × long the limit grows by
// QueueSize per window; past it the limit is multiplied by the gradient
// Tolerance × long / short (never below 0.5), so a latency that rises
// with the load brings the limit down to where it stopped rising. The
// change is smoothed. The long average forgets faster when latency has
// fallen to less than half of it (a recovered backend), and the limit does
// not grow while less than half of it is in use. One departure from
// concurrency-limits: a window's latency enters the long average capped at
// Tolerance × long, so that the overloaded windows after a drop in
// capacity do not raise the baseline (and the limit) for minutes; and the
// headroom QueueSize is added only while latency is within the tolerance,
// so that the limit falls at small limits too.
//
// The zero value is Gradient2 with the defaults below.
type Gradient2 struct {
	// Tolerance is how far short may rise above long before the limit
	// falls (default 1.5; at least 1).
	Tolerance float64
	// Smoothing weighs each new limit against the old one (default 0.2;
	// in (0, 1]; 1 applies each window's limit at once).
	Smoothing float64
	// QueueSize is added to the limit each window, the headroom with
	// which it probes for more capacity (default 4).
	QueueSize float64
	// LongWindows is how many windows the long average spans (default
	// 600, ten minutes of one-second windows).
	LongWindows int
	// ProbeWindows is how often, in windows, the baseline is measured
	// again (default 60): one window runs a fifth below the limit and its
	// latency, if lower, replaces the long average, as Envoy's adaptive concurrency
	// filter pins its concurrency to measure minRTT. Without it a baseline
	// learnt under overload, or one the average let creep up, holds the
	// limit above capacity for good.
	ProbeWindows int
	// P90 follows each window's 90th percentile latency instead of its
	// mean (concurrency-limits' default; Envoy takes a percentile too).
	// Where overload slows only the requests past capacity (a worker
	// pool's queue) the mean dilutes them: at 10% over capacity they are
	// a tenth of the window.
	P90 bool
	// FallAtOnce applies a fall unsmoothed. A window holds only requests
	// admitted under the limit in force, so a fall answers that limit's
	// own latency; smoothing it keeps the service overloaded for several
	// more windows.
	FallAtOnce bool

	long    float64 // nanoseconds; 0 until the first window
	windows int     // windows seen, for the average's warm-up
	probing bool    // this window runs a fifth below the limit
	saved   float64 // the limit to restore after the probe
}

// Name returns "gradient2".
func (g *Gradient2) Name() string { return "gradient2" }

func (g *Gradient2) probeWindows() int {
	if g.ProbeWindows == 0 {
		return 60
	}
	return g.ProbeWindows
}

func (g *Gradient2) defaults() (tol, smooth, queue float64, long int) {
	tol, smooth, queue, long = g.Tolerance, g.Smoothing, g.QueueSize, g.LongWindows
	if tol == 0 {
		tol = 1.5
	}
	if smooth == 0 {
		smooth = 0.2
	}
	if queue == 0 {
		queue = 4
	}
	if long == 0 {
		long = 600
	}
	return tol, smooth, queue, long
}

func (g *Gradient2) check() error {
	tol, smooth, queue, long := g.defaults()
	switch {
	case tol < 1 || math.IsNaN(tol) || math.IsInf(tol, 0):
		return fmt.Errorf("Gradient2.Tolerance is %v; give 1 or more (default 1.5)", g.Tolerance)
	case !(smooth > 0 && smooth <= 1):
		return fmt.Errorf("Gradient2.Smoothing is %v; give a value in (0, 1] (default 0.2)", g.Smoothing)
	case queue < 0 || math.IsNaN(queue) || math.IsInf(queue, 0):
		return fmt.Errorf("Gradient2.QueueSize is %v; give 0 or more (default 4)", g.QueueSize)
	case long < 1:
		return fmt.Errorf("Gradient2.LongWindows is %d; give 1 or more (default 600)", g.LongWindows)
	case g.probeWindows() < 2:
		return fmt.Errorf("Gradient2.ProbeWindows is %d; give 2 or more (default 60)", g.ProbeWindows)
	}
	return nil
}

// Update applies one window.
func (g *Gradient2) Update(limit float64, w Window) float64 {
	if w.RTT <= 0 {
		return limit // only drops or ignored requests: no latency to follow
	}
	if g.probing {
		// The window ran a fifth below the limit: its latency is the
		// baseline with (nearly) nothing queued, unless the limit was far
		// over capacity. It may only lower the baseline: a probe still in
		// overload reads the callers' deadline (every request dropped),
		// and as a baseline that let the limit run away (issue 39's
		// example, C halved). A risen floor is learnt by the average.
		g.probing, g.long = false, min(g.long, float64(w.RTT))
		return g.saved
	}
	next := g.follow(limit, w)
	if g.windows%g.probeWindows() == 0 {
		g.probing, g.saved = true, next
		return next * 4 / 5
	}
	return next
}

// follow is Gradient2's law proper: the limit after w.
func (g *Gradient2) follow(limit float64, w Window) float64 {
	tol, smooth, queue, longN := g.defaults()
	short := float64(w.RTT)
	if g.P90 && w.P90 > 0 {
		short = float64(w.P90)
	}
	g.windows++
	// A window past the tolerance enters the average as at it: one
	// overloaded window (tens of times the baseline after a capacity
	// drop) would otherwise raise the baseline for minutes, and the limit
	// with it. A backend that really slowed still moves it, geometrically.
	sample := min(short, tol*g.long)
	switch {
	case g.long == 0:
		g.long = short
	case g.windows <= 10:
		// Warm-up: a plain mean of the first windows.
		g.long += (sample - g.long) / float64(g.windows)
	default:
		g.long += (sample - g.long) * 2 / float64(longN+1)
	}
	if g.long/short > 2 {
		// Latency fell well below the long average (the backend recovered
		// or the average was learnt under overload): forget faster.
		g.long *= 0.95
	}
	if float64(w.InFlight) < limit/2 {
		return limit // the limit was not tested: do not grow it
	}
	gradient := max(0.5, min(1, tol*g.long/short))
	next := limit * gradient
	if gradient == 1 {
		// Headroom only while latency is within tolerance: added to a
		// falling limit it cancels the fall at small limits (at 7, a
		// gradient of 0.5 plus 4 left the limit where it was).
		next += queue
	} else if g.FallAtOnce {
		return next
	}
	return limit*(1-smooth) + next*smooth
}

// AIMD is additive increase, multiplicative decrease: the limit grows by
// one per window while at least half of it was used, and is multiplied by
// Backoff after a window with a drop or whose latency passed Timeout.
// It needs no latency baseline, so it suits backends whose latency says
// little and which answer overload with errors (Token.OnDropped).
//
// The zero value is AIMD with the defaults below.
type AIMD struct {
	// Backoff multiplies the limit after a bad window (default 0.9; in
	// (0, 1)).
	Backoff float64
	// Timeout is the window latency counted as a drop (default 0: only
	// drops count).
	Timeout time.Duration
}

// Name returns "aimd".
func (a *AIMD) Name() string { return "aimd" }

func (a *AIMD) check() error {
	if a.Backoff != 0 && !(a.Backoff > 0 && a.Backoff < 1) {
		return fmt.Errorf("AIMD.Backoff is %v; give a value in (0, 1) (default 0.9)", a.Backoff)
	}
	if a.Timeout < 0 {
		return fmt.Errorf("AIMD.Timeout is %v; give 0 (drops only) or a positive duration", a.Timeout)
	}
	return nil
}

// Update applies one window.
func (a *AIMD) Update(limit float64, w Window) float64 {
	backoff := a.Backoff
	if backoff == 0 {
		backoff = 0.9
	}
	if w.Dropped || (a.Timeout > 0 && w.RTT > a.Timeout) {
		return limit * backoff
	}
	if float64(w.InFlight)*2 >= limit {
		return limit + 1
	}
	return limit
}

// Fixed keeps the limit where Config.Initial set it: a plain concurrency
// limit with the Limiter's priorities, queue and metrics, and the baseline
// the adaptive laws are compared with.
type Fixed struct{}

// Name returns "fixed".
func (Fixed) Name() string { return "fixed" }

// Update returns limit.
func (Fixed) Update(limit float64, _ Window) float64 { return limit }

// checker is a Law that validates its parameters.
type checker interface{ check() error }

var (
	_ Law = (*Gradient2)(nil)
	_ Law = (*AIMD)(nil)
	_ Law = Fixed{}
)
