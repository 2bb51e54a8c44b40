package limiter

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/hotpath"
)

// source holds the configurations of one Limiter, or of every Limiter of
// a Group: one atomic pointer, so that a change to several is seen by
// every request either entirely or not at all.
type source struct {
	mu  sync.Mutex // serialises writers
	cur atomic.Pointer[[]*compiled]
}

func newSource(cs []*compiled) *source {
	s := &source{}
	for _, c := range cs {
		c.gen = 1
	}
	s.cur.Store(&cs)
	return s
}

// Group is limiters on one store whose configurations change together, in
// one atomic step: a configuration file's policies, reloaded. It is safe
// for concurrent use.
type Group struct {
	limiters []*Limiter
}

// NewGroup returns a Group of one Limiter per config, in order, on store,
// each with opts. Each config is validated as New does; the error names the
// index of the first invalid one.
func NewGroup(store backend.Store, configs []Config, opts ...Option) (*Group, error) {
	if store == nil {
		return nil, errNilStore
	}
	cs, err := compileAll(configs)
	if err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	src := newSource(cs)
	g := &Group{}
	hot := hotpath.Of(store)
	for i := range cs {
		g.limiters = append(g.limiters, &Limiter{store: store, clock: o.clock, src: src, idx: i, hot: hot})
	}
	return g, nil
}

func compileAll(configs []Config) ([]*compiled, error) {
	cs := make([]*compiled, len(configs))
	for i, cfg := range configs {
		c, err := compile(cfg)
		if err != nil {
			return nil, within(err, fmt.Sprintf("limit %d", i))
		}
		cs[i] = c
	}
	return cs, nil
}

// Limiters returns the group's limiters, in the order of the configs.
func (g *Group) Limiters() []*Limiter { return slices.Clone(g.limiters) }

// SetConfigs changes every limiter of the group at once: configs[i] becomes
// limiter i's configuration. All are validated first; when any is invalid,
// nothing changes. Then one atomic step swaps them all, so no request sees
// some limiters changed and others not. What a change does to the counts
// is described at Limiter.SetConfig.
func (g *Group) SetConfigs(configs []Config) error {
	if len(configs) != len(g.limiters) {
		return invalidf(ErrInvalidConfig, "%d configs for a group of %d limiters; give one per limiter", len(configs), len(g.limiters))
	}
	cs, err := compileAll(configs)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		return nil
	}
	s := g.limiters[0].src
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.cur.Load()
	for i := range cs {
		cs[i].gen = old[i].gen + 1
	}
	s.cur.Store(&cs)
	return nil
}
