// Package transport is what limiter/httplimit and limiter/grpclimit share:
// key funcs and their composition, the admission of one request by a
// Limiter, a Composite or Plans (a unit, or a lease under a concurrency
// limit, chosen by the configuration that decides), the views of the
// configuration in force that answers are formatted from, the decision in
// the request's context, lease release and the logging of store failures.
// The transports differ only in how they read a key and how they say no.
//
// The exemptions and deny lists are limiter.Config's (Exempt, Deny): a key
// func's Key says whether its value came from the client's address, so
// that address entries apply to client addresses only.
//
// It is public because limiter/grpclimit, a module of its own, is built on
// it, and a module importing another module's internal package breaks
// when the two are built at different versions.
//
// Stability: this package is the shared core of httplimit and grpclimit,
// not an API for applications. Before v1 any of its names may change in a
// minor release; grpclimit of the same version is kept in step. Use
// httplimit or grpclimit instead.
package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitkit/limitkit/internal/option"
	"github.com/limitkit/limitkit/limiter"
)

// Verdict is what became of a request.
type Verdict uint8

// The verdicts.
const (
	// Admitted: serve it, with the rate-limit fields of the decision.
	Admitted Verdict = iota
	// Exempt: on an exemption list; serve it without fields or decision.
	Exempt
	// Denied: over the limit; answer "too many", with the fields.
	Denied
	// DenyListed: on a deny list; answer "forbidden".
	DenyListed
	// NoKey: the request does not say who makes it; answer "bad request".
	NoKey
	// Failed: the store (or a plan's resolver) failed; apply the error
	// policy to Err.
	Failed
)

// Outcome is the admission of one request.
type Outcome struct {
	Verdict  Verdict
	Decision limiter.Decision
	// Lease is held until the request ends (release it with Release);
	// nil unless a concurrency limit granted one.
	Lease *limiter.Lease
	// View describes the configuration in force; nil when none was
	// reached (NoKey, a plan not resolved).
	View *View
	// Err is the failure of a Failed request.
	Err error
}

// source is what a Core serves: a Limiter, a Composite or Plans.
type source interface {
	admit(ctx context.Context, req limiter.Request) (*limiter.Lease, limiter.Decision, *View, error)
}

// Core admits the requests of one transport, of type R (an *http.Request,
// a gRPC call). It is safe for concurrent use once built.
type Core[R any] struct {
	src  source
	keys []func(R) Key // one per limit; keys[0] also for lists and plans
}

// ForLimiter serves lim, keyed by key; its policy is called name (its guard
// name + "-guard"). extra, when not nil, derives the transport's own part
// of each View.
func ForLimiter[R any](lim *limiter.Limiter, key func(R) Key, name string, extra func(*View) any) (*Core[R], error) {
	if lim == nil {
		return nil, errors.New("limiter is nil; build one with limiter.New")
	}
	s := &oneSource{a: lim}
	s.views = newViews(lim.Generation, func(gen uint64) (*View, error) {
		return limiterView(gen, name, lim.Config()), nil
	}, extra)
	return &Core[R]{src: s, keys: []func(R) Key{key}}, nil
}

// ForComposite serves c, keys[i] and names[i] keying and naming its limit i.
func ForComposite[R any](c *limiter.Composite, keys []func(R) Key, names []string, extra func(*View) any) (*Core[R], error) {
	if c == nil {
		return nil, errors.New("composite is nil; build one with limiter.NewComposite")
	}
	if n := len(c.Configs()); len(keys) != n || len(names) != n {
		return nil, fmt.Errorf("%d limits described for a composite of %d; describe each of its limits", len(keys), n)
	}
	for i, k := range keys {
		if k == nil {
			return nil, fmt.Errorf("limit %d has no key func", i)
		}
	}
	s := &oneSource{a: c}
	s.views = newViews(c.Generation, func(gen uint64) (*View, error) {
		return compositeView(gen, names, c.Configs())
	}, extra)
	if _, err := s.views.make(c.Generation()); err != nil {
		return nil, err
	}
	return &Core[R]{src: s, keys: keys}, nil
}

// ForPlans serves p, keyed by key (the key the resolver sees); every plan's
// policy is called name.
func ForPlans[R any](p *limiter.Plans, key func(R) Key, name string, extra func(*View) any) (*Core[R], error) {
	if p == nil {
		return nil, errors.New("plans are nil; build them with limiter.NewPlans")
	}
	s := &plansSource{p: p, views: map[string]*views{}}
	for _, plan := range p.Names() {
		lim, err := p.Plan(plan)
		if err != nil {
			return nil, err
		}
		s.views[plan] = newViews(lim.Generation, func(gen uint64) (*View, error) {
			return limiterView(gen, name, lim.Config()), nil
		}, extra)
	}
	return &Core[R]{src: s, keys: []func(R) Key{key}}, nil
}

func newViews(gen func() uint64, mk func(uint64) (*View, error), extra func(*View) any) *views {
	v := &views{gen: gen, make: mk, extra: extra}
	v.current()
	return v
}

// Admit keys r and admits it.
func (c *Core[R]) Admit(ctx context.Context, r R) Outcome {
	first := c.keys[0](r)
	if first.Value == "" {
		return Outcome{Verdict: NoKey}
	}
	var buf [1]string
	keys := buf[:]
	if len(c.keys) > 1 {
		keys = make([]string, len(c.keys))
	}
	keys[0] = first.Value
	for i := 1; i < len(keys); i++ {
		if keys[i] = c.keys[i](r).Value; keys[i] == "" {
			return Outcome{Verdict: NoKey}
		}
	}
	lease, d, v, err := c.src.admit(ctx, limiter.Request{Keys: keys, Client: first.Client})
	o := Outcome{Decision: d, Lease: lease, View: v}
	o.classify(err)
	return o
}

// classify sets the verdict of o from its decision and the admission's
// error.
func (o *Outcome) classify(err error) {
	d := o.Decision
	switch {
	case err != nil && errors.Is(err, limiter.ErrInvalidRequest):
		o.Verdict = NoKey
	case err != nil:
		o.Verdict, o.Err = Failed, err
	case d.Exempt:
		o.Verdict = Exempt
	case d.DenyListed && !d.Allowed:
		o.Verdict = DenyListed
	case !d.Allowed:
		o.Verdict = Denied
	}
}

// admitter is a Limiter or a Composite.
type admitter interface {
	Admit(ctx context.Context, req limiter.Request) (*limiter.Lease, limiter.Decision, error)
}

// oneSource serves a Limiter or a Composite: one configuration at a time.
type oneSource struct {
	a     admitter
	views *views
}

func (s *oneSource) admit(ctx context.Context, req limiter.Request) (*limiter.Lease, limiter.Decision, *View, error) {
	v := s.views.current()
	lease, d, err := s.a.Admit(ctx, req)
	return lease, d, v, err
}

type plansSource struct {
	p     *limiter.Plans
	views map[string]*views // by plan; never changed after ForPlans
}

func (s *plansSource) admit(ctx context.Context, req limiter.Request) (*limiter.Lease, limiter.Decision, *View, error) {
	lease, d, plan, err := s.p.Admit(ctx, req)
	var v *View
	if pv := s.views[plan]; pv != nil {
		v = pv.current()
	}
	return lease, d, v, err
}

// First is names[0], or def when there are none: the policy name a
// composite's logs use.
func First(names []string, def string) string {
	if len(names) == 0 {
		return def
	}
	return names[0]
}

// Build applies opts, in order, to o, a transport's options with their
// defaults set (a nil option is skipped), and makes its core with newCore;
// pkg prefixes the errors.
func Build[T any, O ~func(*T) error, R any](pkg string, o *T, opts []O, newCore func(*T) (*Core[R], error)) (*Core[R], error) {
	if err := option.Apply(o, opts); err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	core, err := newCore(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	return core, nil
}
