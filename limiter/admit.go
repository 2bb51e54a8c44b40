package limiter

import (
	"context"
	"fmt"
	"net/netip"
)

// Request is one request of one unit as a transport (limiter/httplimit,
// limiter/grpclimit) hands it to Admit.
type Request struct {
	// Keys are the request's keys: one for a Limiter or Plans, one per
	// limit for a Composite.
	Keys []string
	// Client is the client's address when the first key was derived from
	// it (the transport's key func says so); only then do the address
	// entries of Config.Exempt and Config.Deny apply, and to Client, not
	// to the key. The zero Addr: only the exact key entries apply, so a
	// key a client writes itself (a header holding "10.9.9.9") never
	// matches an address entry.
	Client netip.Addr
}

// Admit decides req as one unit: under a concurrency limit it takes a
// lease (as Acquire), under any other it takes a unit (as Allow). Both the
// choice and the decision are made from one configuration, so a SetConfig
// to or from "concurrency" never fails a request in flight. The Lease is
// nil unless one was granted; release it as Acquire's.
func (l *Limiter) Admit(ctx context.Context, req Request) (*Lease, Decision, error) {
	if len(req.Keys) != 1 {
		return nil, Decision{}, fmt.Errorf("%w: %d keys for one limit; give one", ErrInvalidRequest, len(req.Keys))
	}
	c := l.current()
	key := req.Keys[0]
	if c.lists != nil {
		if d, ok := c.listedClient(key, req.Client); ok {
			if c.lease < 0 || !d.Allowed {
				return nil, d, nil
			}
			return newLease(l, l.store, l.clock, key, 1, c.all[c.lease], 0, l.clock.Now()), d, nil
		}
	}
	if c.lease >= 0 {
		return acquire(ctx, l, l.store, l.clock, c, req.Keys, 1, l.clock.Now())
	}
	if c.simple && key != "" {
		d, err := l.store.Take(ctx, c.all[0].request(req.Keys, 1, l.clock.Now()))
		return nil, d, err
	}
	d, err := decide(ctx, l.store, l.clock, c, req.Keys, 1)
	return nil, d, err
}

// Admit decides req as one unit of every limit, as Limiter.Admit: with a
// concurrency limit among them it takes a lease (as Acquire), otherwise a
// unit of each (as Allow), chosen from the configurations that decide.
// A Composite has no lists: req.Client is not read.
func (c *Composite) Admit(ctx context.Context, req Request) (*Lease, Decision, error) {
	cc := c.cur.Load()
	if err := checkKeys(cc, req.Keys); err != nil {
		return nil, Decision{}, err
	}
	if cc.lease >= 0 {
		return acquire(ctx, c, c.store, c.clock, cc, req.Keys, 1, c.clock.Now())
	}
	d, err := decide(ctx, c.store, c.clock, cc, req.Keys, 1)
	return nil, d, err
}

// Generation counts the configurations the composite has had, as
// Limiter.Generation: 1 after NewComposite, one more after each
// SetConfigs.
func (c *Composite) Generation() uint64 { return c.cur.Load().gen }

// Admit decides req under the plan the resolver chooses for its key (see
// Limiter.Admit), and returns the plan's name with it.
func (p *Plans) Admit(ctx context.Context, req Request) (*Lease, Decision, string, error) {
	if len(req.Keys) != 1 {
		return nil, Decision{}, "", fmt.Errorf("%w: %d keys for a plan's limit; give one", ErrInvalidRequest, len(req.Keys))
	}
	name, l, err := p.Resolve(ctx, req.Keys[0])
	if err != nil {
		return nil, Decision{}, name, err
	}
	lease, d, err := l.Admit(ctx, req)
	return lease, d, name, err
}
