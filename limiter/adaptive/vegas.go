package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Vegas is Netflix concurrency-limits' Vegas law, after TCP Vegas: it
// estimates the queue in front of the backend as limit × (1 − noLoad/RTT),
// where noLoad is the lowest latency seen (the backend with nothing
// queued), and keeps that queue between Alpha and Beta: below Alpha the
// limit grows by log10(limit) (by Beta while the queue is near empty),
// above Beta it falls by log10(limit), and a window with a drop lowers it
// too. Unlike Gradient2 it needs no long average, so it settles in few
// windows, but it trusts noLoad: every ProbeWindows windows the limit is
// lowered by a quarter for one window and noLoad learnt again from that window's
// lowest latency (as Envoy's adaptive concurrency filter pins its
// concurrency to measure minRTT), so that a backend whose floor rose (a
// new dependency, a slower disk) is not read as queueing for ever. The
// probe costs a quarter of one window's throughput every ProbeWindows
// windows; a limit far above capacity learns a floor that is too high at
// its first probe and a better one at the next, as the limit falls.
//
// The zero value is Vegas with the defaults below.
type Vegas struct {
	// Alpha and Beta are the queue bounds, as multiples of log10(limit)
	// (defaults 3 and 6; 0 < Alpha < Beta).
	Alpha, Beta float64
	// Smoothing weighs each new limit against the old one (default 1:
	// applied at once; in (0, 1]).
	Smoothing float64
	// ProbeWindows is how many windows noLoad is kept before it is learnt
	// again (default 60).
	ProbeWindows int

	noLoad  time.Duration
	windows int
	probing bool    // this window runs a quarter below the limit to learn noLoad
	saved   float64 // the limit to restore after the probe
}

// Name returns "vegas".
func (v *Vegas) Name() string { return "vegas" }

func (v *Vegas) defaults() (alpha, beta, smooth float64, probe int) {
	alpha, beta, smooth, probe = v.Alpha, v.Beta, v.Smoothing, v.ProbeWindows
	if alpha == 0 {
		alpha = 3
	}
	if beta == 0 {
		beta = 6
	}
	if smooth == 0 {
		smooth = 1
	}
	if probe == 0 {
		probe = 60
	}
	return alpha, beta, smooth, probe
}

func (v *Vegas) check() error {
	alpha, beta, smooth, probe := v.defaults()
	switch {
	case !(alpha > 0) || math.IsInf(alpha, 0):
		return fmt.Errorf("Vegas.Alpha is %v; give a positive value (default 3)", v.Alpha)
	case !(beta > alpha) || math.IsInf(beta, 0):
		return fmt.Errorf("Vegas.Beta is %v; give a value above Alpha %v (default 6)", v.Beta, alpha)
	case !(smooth > 0 && smooth <= 1):
		return fmt.Errorf("Vegas.Smoothing is %v; give a value in (0, 1] (default 1)", v.Smoothing)
	case probe < 1:
		return fmt.Errorf("Vegas.ProbeWindows is %d; give 1 or more (default 60)", v.ProbeWindows)
	}
	return nil
}

// Update applies one window.
func (v *Vegas) Update(limit float64, w Window) float64 {
	if v.probing {
		// The probe's window ran a quarter below the limit: its lowest
		// latency is the floor with (nearly) nothing queued.
		v.probing = false
		if w.MinRTT > 0 {
			v.noLoad = w.MinRTT
		}
		return v.saved
	}
	if w.RTT <= 0 || w.MinRTT <= 0 {
		return limit // no latency measured: nothing to follow
	}
	alpha, beta, smooth, probe := v.defaults()
	if v.noLoad == 0 {
		v.noLoad = w.MinRTT // the first floor is learnt, not acted on
		return limit
	}
	v.noLoad = min(v.noLoad, w.MinRTT)
	if v.windows++; v.windows%probe == 0 {
		// Learn the floor again a quarter below the limit for one window
		// (below a capacity the limit hovers over): a floor learnt under
		// load would read queueing as none, and one that rose since would
		// read none as queueing for ever.
		v.probing, v.saved = true, limit
		return max(1, limit*3/4)
	}
	if !w.Dropped && float64(w.InFlight) < limit/2 {
		return limit // the limit was not tested: do not move it
	}
	step := math.Log10(max(limit, 10)) // at least 1, so small limits move
	queue := math.Ceil(limit * (1 - float64(v.noLoad)/float64(w.RTT)))
	next := limit
	switch {
	case w.Dropped:
		next = limit - step
	case queue <= step:
		next = limit + beta*step
	case queue < alpha*step:
		next = limit + step
	case queue > beta*step:
		next = limit - step
	}
	return limit*(1-smooth) + next*smooth
}

var _ Law = (*Vegas)(nil)
