package config

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/limiter/adaptive"
	"github.com/limitkit/limitkit/limiter/configtree"
)

// Adaptive is one named adaptive concurrency limit (package
// limiter/adaptive), from the file's adaptive block:
//
//	adaptive:
//	  api:
//	    law: gradient2        # or vegas, aimd, fixed (default gradient2)
//	    min: 5
//	    max: 500
//	    initial: 20
//	    window: 1s
//	    min_samples: 10
//	    queue_size: 50
//	    max_wait: 50ms
//	    lifo: false
//	    default_share: 0.9
//	    sheddable_share: 0.75
//	    tolerance: 1.5        # gradient2
//	    probe_windows: 60     # gradient2
//	    p90: false            # gradient2
//	    fall_at_once: false   # gradient2
//	    backoff: 0.9          # aimd
//	    timeout: 200ms        # aimd: a window slower than this is a drop
//
// Every field is optional and defaults as adaptive.Config and its laws do.
// Config.AdaptiveLimiter builds it.
type Adaptive struct {
	// Name identifies the limit in AdaptiveLimiter and in metrics.
	Name string
	// Law is "gradient2", "vegas", "aimd" or "fixed".
	Law string
	// Config is the limiter's configuration, without its Law, Clock or
	// Observer.
	Config adaptive.Config
	// Tolerance is Gradient2's; Backoff and Timeout are AIMD's.
	Tolerance, Backoff float64
	Timeout            time.Duration
	// ProbeWindows, P90 and FallAtOnce are Gradient2's (see
	// adaptive.Gradient2).
	ProbeWindows    int
	P90, FallAtOnce bool
}

const adaptiveFields = "law, min, max, initial, window, min_samples, queue_size, max_wait, lifo, default_share, sheddable_share, tolerance, probe_windows, p90, fall_at_once, backoff, timeout"

// law returns a new Law for a (each limiter keeps its own state).
func (a *Adaptive) law() (adaptive.Law, error) {
	switch a.Law {
	case "", "gradient2":
		return &adaptive.Gradient2{Tolerance: a.Tolerance, ProbeWindows: a.ProbeWindows, P90: a.P90, FallAtOnce: a.FallAtOnce}, nil
	case "vegas":
		return &adaptive.Vegas{}, nil
	case "aimd":
		return &adaptive.AIMD{Backoff: a.Backoff, Timeout: a.Timeout}, nil
	case "fixed":
		return adaptive.Fixed{}, nil
	}
	return nil, fmt.Errorf("law %q is unknown; use gradient2, vegas, aimd or fixed", a.Law)
}

// AdaptiveLimiter builds a new limiter from the adaptive block named name,
// reporting to obs. Each call makes a limiter of its own: call it once per
// limit and share the result.
func (c *Config) AdaptiveLimiter(name string, obs adaptive.Observer) (*adaptive.Limiter, error) {
	for i := range c.Adaptive {
		a := &c.Adaptive[i]
		if a.Name != name {
			continue
		}
		law, err := a.law()
		if err != nil {
			return nil, fmt.Errorf("config: adaptive.%s: %w", name, err)
		}
		cfg := a.Config
		cfg.Name, cfg.Law, cfg.Observer = name, law, obs
		lim, err := adaptive.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("config: adaptive.%s: %w", name, err)
		}
		return lim, nil
	}
	return nil, fmt.Errorf("config: no adaptive limit is named %q; declare it under adaptive:", name)
}

func (d decoder) adaptive(n *configtree.Node, path string) error {
	return d.Each(n, path, func(f configtree.Pair, p string) error {
		a := Adaptive{Name: f.Key}
		if err := d.Each(f.Val, p, func(g configtree.Pair, q string) error { return d.adaptiveField(&a, g, q) }); err != nil {
			return err
		}
		if err := checkAdaptive(&a); err != nil {
			return &configtree.Error{Line: f.KeyLine, Field: p, Err: err}
		}
		d.c.Adaptive = append(d.c.Adaptive, a)
		return nil
	})
}

// checkAdaptive checks a block at load, so that a bad one fails Load.
func checkAdaptive(a *Adaptive) error {
	law, err := a.law()
	if err != nil {
		return err
	}
	cfg := a.Config
	cfg.Law = law
	_, err = adaptive.New(cfg)
	return err
}

func (d decoder) adaptiveField(a *Adaptive, f configtree.Pair, p string) (err error) {
	c := &a.Config
	switch f.Key {
	case "law":
		a.Law, err = d.Str(f.Val, p)
	case "min":
		c.Min, err = d.Int(f.Val, p)
	case "max":
		c.Max, err = d.Int(f.Val, p)
	case "initial":
		c.Initial, err = d.Int(f.Val, p)
	case "window":
		c.Window, err = d.Duration(f.Val, p)
	case "min_samples":
		c.MinSamples, err = d.Int(f.Val, p)
	case "queue_size":
		c.QueueSize, err = d.Int(f.Val, p)
	case "max_wait":
		c.MaxWait, err = d.Duration(f.Val, p)
	case "lifo":
		c.LIFO, err = d.Bool(f.Val, p)
	case "timeout":
		a.Timeout, err = d.Duration(f.Val, p)
	case "probe_windows":
		a.ProbeWindows, err = d.Int(f.Val, p)
	case "p90":
		a.P90, err = d.Bool(f.Val, p)
	case "fall_at_once":
		a.FallAtOnce, err = d.Bool(f.Val, p)
	default:
		return d.adaptiveFloat(a, f, p)
	}
	return err
}

func (d decoder) adaptiveFloat(a *Adaptive, f configtree.Pair, p string) error {
	var dst *float64
	switch f.Key {
	case "default_share":
		dst = &a.Config.DefaultShare
	case "sheddable_share":
		dst = &a.Config.SheddableShare
	case "tolerance":
		dst = &a.Tolerance
	case "backoff":
		dst = &a.Backoff
	default:
		return d.Unknown(f, p[:len(p)-len(f.Key)-1], adaptiveFields)
	}
	if err := d.Scalar(f.Val, p); err != nil {
		return err
	}
	v, err := strconv.ParseFloat(f.Val.Value, 64)
	if err != nil {
		return &configtree.Error{Line: f.KeyLine, Field: p, Err: errors.New("not a number; write one such as 0.9")}
	}
	*dst = v
	return nil
}
