package httplimit

import (
	"strconv"

	"github.com/limitkit/limitkit/limiter"
)

// view is what the headers take from the limiter's configuration, made
// once per configuration: a request costs one atomic load and a compare
// (limiter.Limiter.Generation) to find it still current.
type view struct {
	gen         uint64
	policy      string    // RateLimit-Policy value
	limit       string    // X-RateLimit-Limit value
	guardName   string    // the guard's policy name, quoted; "" without a guard
	policyLabel string    // the limiter's key prefix, for logs
	main, guard rule      // the rules the policies describe
	problem     [2]string // problem+json bodies up to "detail", for the main rule and the guard
}

// current returns the view of the limiter's configuration in force,
// making it again after a change.
func (m *Middleware) current() *view {
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
	v := &view{gen: gen}
	v.policy = m.quotedName + ";q=" + strconv.FormatInt(cfg.Limit, 10) + ";w=" + strconv.FormatInt(max(seconds(cfg.Window), 1), 10)
	if g := cfg.Guard; g != nil {
		// The guard is a policy of its own, named after the main one.
		v.guardName = quote(m.policyName + "-guard")
		v.policy += ", " + v.guardName + ";q=" + strconv.FormatInt(g.Limit, 10) + ";w=" + strconv.FormatInt(max(seconds(g.Window), 1), 10)
	}
	v.limit = strconv.FormatInt(cfg.Limit, 10)
	v.policyLabel = cfg.Prefix
	v.main = rule{cfg.Algorithm, cfg.Window}
	v.problem[0] = problemHead(m.policyName)
	if g := cfg.Guard; g != nil {
		v.guard = rule{g.Algorithm, g.Window}
		v.problem[1] = problemHead(m.policyName + "-guard")
	}
	return v
}
