package limiter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ErrUnknownPlan reports a plan name that a Plans does not have: the
// resolver returned a name no plan is registered under.
var ErrUnknownPlan = errors.New("limiter: unknown plan")

// Resolver chooses the plan that applies to a request for key: the
// caller's tier (free, pro), looked up by API key or tenant. ctx is the
// request's, for resolvers that read what a middleware put there. An error
// is returned to the caller of Plans.Allow as it is.
type Resolver func(ctx context.Context, key string) (plan string, err error)

// Plans applies, per request, the limit of the plan a Resolver chooses:
// 10 a minute for free tenants and 1,000 for pro ones, on one store.
//
//	free, _ := limiter.New(store, limiter.Config{Limit: 10, Window: time.Minute, Prefix: "api:free:"})
//	pro, _ := limiter.New(store, limiter.Config{Limit: 1000, Window: time.Minute, Prefix: "api:pro:"})
//	plans, err := limiter.NewPlans(map[string]*limiter.Limiter{"free": free, "pro": pro},
//		func(ctx context.Context, tenant string) (string, error) { return tierOf(tenant), nil })
//	d, plan, err := plans.Allow(ctx, tenant)
//
// Each plan counts under its own prefix, so counts stay per key and plan: a
// tenant moved from free to pro starts pro with a full allowance, and its
// free counts expire on their own. Each plan's limiter can change its
// configuration (SetConfig) like any other. A Plans is safe for concurrent
// use.
type Plans struct {
	plans   map[string]*Limiter
	resolve Resolver
	names   []string
}

// NewPlans returns a Plans of the named limiters, chosen per request by
// resolve. Every plan needs a name and a limiter, and no two plans may count
// under one key prefix (their counts would mix).
func NewPlans(plans map[string]*Limiter, resolve Resolver) (*Plans, error) {
	if resolve == nil {
		return nil, invalidf(ErrInvalidConfig, "plan resolver is nil")
	}
	if len(plans) == 0 {
		return nil, invalidf(ErrInvalidConfig, "no plans; give at least one")
	}
	names := slices.Sorted(maps.Keys(plans))
	prefixes := map[string]string{}
	for _, name := range names {
		l := plans[name]
		if name == "" {
			return nil, invalidf(ErrInvalidConfig, "a plan has an empty name")
		}
		if l == nil {
			return nil, invalidf(ErrInvalidConfig, "plan %q has no limiter", name)
		}
		prefix := l.Config().Prefix
		if other, ok := prefixes[prefix]; ok {
			return nil, invalidf(ErrInvalidConfig, "plans %q and %q both count under the prefix %q; give each plan its own", other, name, prefix)
		}
		prefixes[prefix] = name
	}
	return &Plans{plans: maps.Clone(plans), resolve: resolve, names: names}, nil
}

// Names lists the plans, sorted.
func (p *Plans) Names() []string { return slices.Clone(p.names) }

// Plan returns the limiter of the named plan, or an error wrapping
// ErrUnknownPlan.
func (p *Plans) Plan(name string) (*Limiter, error) {
	if l, ok := p.plans[name]; ok {
		return l, nil
	}
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return nil, fmt.Errorf("%w %q; the plans are %q", ErrUnknownPlan, name, p.names)
}

// Resolve returns the plan that applies to key, and its limiter.
func (p *Plans) Resolve(ctx context.Context, key string) (string, *Limiter, error) {
	name, err := p.resolve(ctx, key)
	if err != nil {
		return "", nil, err
	}
	l, err := p.Plan(name)
	return name, l, err
}

// Allow decides one request for key under the plan the resolver chooses,
// and returns the plan's name with the decision.
func (p *Plans) Allow(ctx context.Context, key string) (Decision, string, error) {
	return p.AllowN(ctx, key, 1)
}

// AllowN decides a request of n units for key under the plan the resolver
// chooses (see Limiter.AllowN).
func (p *Plans) AllowN(ctx context.Context, key string, n int64) (Decision, string, error) {
	name, l, err := p.Resolve(ctx, key)
	if err != nil {
		return Decision{}, name, err
	}
	d, err := l.AllowN(ctx, key, n)
	return d, name, err
}

// Acquire takes a lease of one unit for key under the plan the resolver
// chooses (see Limiter.Acquire), and returns the plan's name with it.
// Release the lease with Lease.Release; to release by id, use the plan's
// limiter (Plans.Plan(name).Release).
func (p *Plans) Acquire(ctx context.Context, key string) (*Lease, Decision, string, error) {
	return p.AcquireN(ctx, key, 1)
}

// AcquireN takes a lease of n units for key under the plan the resolver
// chooses (see Limiter.AcquireN).
func (p *Plans) AcquireN(ctx context.Context, key string, n int64) (*Lease, Decision, string, error) {
	name, l, err := p.Resolve(ctx, key)
	if err != nil {
		return nil, Decision{}, name, err
	}
	lease, d, err := l.AcquireN(ctx, key, n)
	return lease, d, name, err
}

// Admit decides req under the plan the resolver chooses for its key (see
// Limiter.Admit), and returns the plan's name with it.
func (p *Plans) Admit(ctx context.Context, req Request) (*Lease, Decision, string, error) {
	if len(req.Keys) != 1 {
		return nil, Decision{}, "", invalidf(ErrInvalidRequest, "%d keys for a plan's limit; give one", len(req.Keys))
	}
	name, l, err := p.Resolve(ctx, req.Keys[0])
	if err != nil {
		return nil, Decision{}, name, err
	}
	lease, d, err := l.Admit(ctx, req)
	return lease, d, name, err
}
