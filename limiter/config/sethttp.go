package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/httplimit"
)

// HTTP returns net/http middleware for the named policy, built from its
// http block (HTTP) with extra applied after it: a logger, a handler of
// your own, or a key the file cannot name (httplimit.WithKey of
// httplimit.Route(mux)). A concurrency policy holds a lease per request
// until its handler returns, as httplimit.New does. The middleware
// follows Reload as it follows limiter.Limiter.SetConfig: its headers
// describe the new limit, and a change to or from concurrency switches
// between units and leases; Reload refuses a change to the http block
// itself (restart for that). Each call returns a new middleware.
func (s *Set) HTTP(name string, extra ...httplimit.Option) (*httplimit.Middleware, error) {
	lim, ok := s.limiters[name]
	if !ok {
		return nil, fmt.Errorf("config: %w: no policy %q; the policies are %q", limiter.ErrInvalidConfig, clip(name, 64), s.names)
	}
	opts, err := s.http[name].options(name)
	if err != nil {
		return nil, fmt.Errorf("config: policy %s: %w", name, err)
	}
	mw, err := httplimit.New(lim, slices.Concat(opts, extra)...)
	if err != nil {
		return nil, fmt.Errorf("config: policy %s: %w", name, err)
	}
	return mw, nil
}

// HTTPPlans returns net/http middleware serving plans (see Set.Plans) of
// the named policies, chosen per request by resolve. One middleware keys
// and answers for every plan, so the plans' http blocks must be the same;
// the policy in the headers is their policy_name, or
// httplimit.DefaultPolicyName without one. extra applies after the file's
// settings, as in Set.HTTP.
func (s *Set) HTTPPlans(resolve limiter.Resolver, names []string, extra ...httplimit.Option) (*httplimit.Middleware, error) {
	plans, err := s.Plans(resolve, names...)
	if err != nil {
		return nil, err
	}
	block := s.http[names[0]]
	for _, name := range names[1:] {
		if !sameHTTP(s.http[name], block) {
			return nil, fmt.Errorf("config: %w: plans %s and %s have different http blocks; one middleware serves every plan, so give them the same",
				limiter.ErrInvalidConfig, names[0], name)
		}
	}
	opts, err := block.options(httplimit.DefaultPolicyName)
	if err != nil {
		return nil, fmt.Errorf("config: plans: %w", err)
	}
	mw, err := httplimit.NewPlans(plans, slices.Concat(opts, extra)...)
	if err != nil {
		return nil, fmt.Errorf("config: plans: %w", err)
	}
	return mw, nil
}

// sameHTTP reports whether two http blocks configure the same middleware:
// an absent block is an empty one.
func sameHTTP(a, b *HTTP) bool {
	if a == nil {
		a = &HTTP{}
	}
	if b == nil {
		b = &HTTP{}
	}
	return reflect.DeepEqual(a, b)
}

// checkHTTPUnchanged refuses a reload that changes a policy's http block:
// the middleware built from it holds its key func and headers for good.
func (s *Set) checkHTTPUnchanged(next *Config) error {
	l := &errorList{}
	for _, p := range next.Policies {
		if !sameHTTP(p.HTTP, s.http[p.Name]) {
			l.add(next.fieldError("policies."+p.Name+".http", errors.New(
				"changed; a reload changes limits only, and the HTTP middleware keeps the settings it was built with: restart to change them")))
		}
	}
	return l.err()
}
