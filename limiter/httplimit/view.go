package httplimit

import (
	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// view is what the headers take from the limiter's configuration, made
// once per configuration: a request costs one atomic load and a compare
// (limiter.Limiter.Generation) to find it still current.
type view struct {
	gen         uint64
	fields      *ratelimitfields.Policy // the rate-limit field values
	policyLabel string                  // the limiter's key prefix, for logs
	problem     []string                // problem+json bodies up to "detail": the main rule's and the guard's, or a composite's limits'
	lease       bool                    // the limit is a concurrency limit: Acquire, not Allow
}

// current returns the view of the limiter's configuration in force,
// making it again after a change.
func (m *Middleware) current() *view {
	if m.comp != nil {
		return m.view.Load() // made once, by NewComposite
	}
	gen := m.lim.Generation()
	if v := m.view.Load(); v != nil && v.gen == gen {
		return v
	}
	// Read after gen: if the configuration changes in between, this view
	// is newer than gen says, and the next request makes it again.
	v := m.makeView(gen, m.lim.Config())
	m.view.Store(v)
	return v
}

func (m *Middleware) makeView(gen uint64, cfg limiter.Config) *view {
	v := &view{gen: gen, fields: ratelimitfields.NewPolicy(m.policyName, cfg), policyLabel: cfg.Prefix,
		lease: ratelimitfields.IsLease(algorithms.Rule{Algorithm: cfg.Algorithm})}
	v.problem = []string{problemHead(m.policyName)}
	if cfg.Guard != nil {
		v.problem = append(v.problem, problemHead(m.policyName+ratelimitfields.GuardSuffix))
	}
	return v
}
