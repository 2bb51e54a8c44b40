package transport

import (
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// View is what a transport's answers take from the configuration in
// force: made once per configuration, and again after a change
// (limiter.Limiter.SetConfig, a file's reload). It is never changed once
// made.
type View struct {
	gen uint64
	// Fields are the rate-limit field values.
	Fields *ratelimitfields.Policy
	// Label names the limit in logs: the (first) limit's key prefix.
	Label string
	// Policies are the named policies, in Fields.Index order: a Limiter's
	// main limit and guard, or a Composite's limits.
	Policies []Policy
	// Extra is what the transport's MakeExtra derived from the rest (its
	// problem bodies, its QuotaFailure details).
	Extra any
}

// Policy is one named limit of a View.
type Policy struct {
	Name   string
	Limit  int64
	Window time.Duration
	Lease  bool // a concurrency limit: Limit counts requests in flight
}

// Of returns the policy that d describes.
func (v *View) Of(d limiter.Decision) *Policy { return &v.Policies[v.Fields.Index(d)] }

func policyOf(name string, alg algorithms.Name, limit int64, window time.Duration) Policy {
	return Policy{Name: name, Limit: limit, Window: window, Lease: algorithms.Rule{Algorithm: alg}.HoldsLeases()}
}

// limiterView describes a Limiter's configuration under the policy name.
func limiterView(gen uint64, name string, cfg limiter.Config) *View {
	v := &View{gen: gen, Fields: ratelimitfields.NewPolicy(name, cfg), Label: cfg.Prefix,
		Policies: []Policy{policyOf(name, cfg.Algorithm, cfg.Limit, cfg.Window)}}
	if g := cfg.Guard; g != nil {
		v.Policies = append(v.Policies, policyOf(name+ratelimitfields.GuardSuffix, g.Algorithm, g.Limit, g.Window))
	}
	return v
}

// compositeView describes a Composite's limits, names[i] naming limit i.
func compositeView(gen uint64, names []string, cfgs []limiter.Config) (*View, error) {
	fields, err := ratelimitfields.NewCompositePolicy(names, cfgs)
	if err != nil {
		return nil, err
	}
	v := &View{gen: gen, Fields: fields, Label: cfgs[0].Prefix}
	for i, cfg := range cfgs {
		v.Policies = append(v.Policies, policyOf(names[i], cfg.Algorithm, cfg.Limit, cfg.Window))
	}
	return v, nil
}

// views keeps the View of one configuration source current: a request
// costs an atomic load and a compare of generations to find it still so.
type views struct {
	v     atomic.Pointer[View]
	gen   func() uint64
	make  func(gen uint64) (*View, error)
	extra func(*View) any
}

// current returns the view in force, making it again after a change. A
// configuration that cannot be described (a composite's names no longer
// fit) keeps the view before it.
func (c *views) current() *View {
	gen := c.gen()
	old := c.v.Load()
	if old != nil && old.gen == gen {
		return old
	}
	// Made after reading gen: a change in between makes this view newer
	// than gen says, and the next request makes it again.
	v, err := c.make(gen)
	if err != nil {
		return old
	}
	if c.extra != nil {
		v.Extra = c.extra(v)
	}
	c.v.Store(v)
	return v
}
