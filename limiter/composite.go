package limiter

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
)

// Composite applies several limits at once, each to its own key, all or
// nothing: per user, per tenant and global, say. A request is admitted only
// when every limit admits it, and a denial consumes nothing from any.
//
//	c, err := limiter.NewComposite(store, []limiter.Config{
//		{Limit: 10, Window: time.Second, Prefix: "user:"},
//		{Limit: 100, Window: time.Second, Prefix: "tenant:"},
//		{Algorithm: "sliding_counter", Limit: 1000, Window: time.Second, Prefix: "global:"},
//	})
//	d, err := c.Allow(ctx, userID, tenantID, "all")
//	// d.Rule is the index of the limit the decision describes.
//
// How atomic that is depends on the store: the memory store and a
// single-master Redis decide all limits at once; on Redis Cluster, limits
// whose keys share a hash slot are decided by one script, and otherwise the
// limits are taken in order and refunded when a later one denies (see the
// Redis stores' TakeAll). A Composite is safe for concurrent use.
//
// A limit whose Mode is Shadow is decided and counted after the enforced
// ones admitted, and never denies (see Decision.ShadowDenied): a new limit
// can be tried beside those in force.
//
// One of the limits may be a concurrency limit: the composite is then used
// through Acquire, which takes the lease and the rate limits' units
// together (at most 2 uploads in flight and 100 a day per user, say).
type Composite struct {
	store backend.Store
	cur   atomic.Pointer[compiled]
	clock clock.Clock
}

// NewComposite returns a Composite of configs (1 to backend.MaxRequests of
// them, each with its own prefix; guards are not allowed inside a
// composite: add the guard as a limit of its own). opts are those of New.
func NewComposite(store backend.Store, configs []Config, opts ...Option) (*Composite, error) {
	if store == nil {
		return nil, errNilStore
	}
	cc, err := compileComposite(configs)
	if err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	cc.gen = 1
	c := &Composite{store: store, clock: o.clock}
	c.cur.Store(cc)
	return c, nil
}

// compileComposite checks a composite's configs and prepares them: limit
// i's rules read the key at index i of a call.
func compileComposite(configs []Config) (*compiled, error) {
	if len(configs) == 0 || len(configs) > backend.MaxRequests {
		return nil, invalidf(ErrInvalidConfig, "%d limits in a composite; give 1 to %d", len(configs), backend.MaxRequests)
	}
	cc := &compiled{}
	var parts []part
	for i, cfg := range configs {
		cfg, _, err := cfg.checked()
		if err != nil {
			return nil, within(err, fmt.Sprintf("limit %d", i))
		}
		if cfg.Guard != nil {
			return nil, invalidf(ErrInvalidConfig, "limit %d has a guard; in a composite, add the guard as a limit of its own", i)
		}
		if len(cfg.Exempt)+len(cfg.Deny) > 0 {
			return nil, invalidf(ErrInvalidConfig, "limit %d has exempt or deny entries; a composite has none (use them on a Limiter)", i)
		}
		if cfg.rule().HoldsLeases() {
			for j, prev := range cc.configs {
				if prev.rule().HoldsLeases() {
					return nil, invalidf(ErrInvalidConfig,
						"limits %d and %d are both concurrency limits; a composite holds one lease per decision", j, i)
				}
			}
		}
		for j, prev := range cc.configs {
			if prev.Prefix == cfg.Prefix {
				return nil, invalidf(ErrInvalidConfig, "limits %d and %d share the prefix %q; give each its own", j, i, cfg.Prefix)
			}
		}
		cc.configs = append(cc.configs, cfg)
		parts = append(parts, partsOf(cfg, i)...)
	}
	cc.setParts(parts)
	return cc, nil
}

// Configs returns the composite's limits in force, defaults filled in.
func (c *Composite) Configs() []Config { return append([]Config(nil), c.cur.Load().configs...) }

// SetConfigs changes the composite's limits while it serves, as
// Limiter.SetConfig does for one limit (counts kept as described there):
// configs are validated as NewComposite validates them, and must be as
// many as before (callers pass one key per limit); then all are swapped in
// one atomic step. When any is invalid, nothing changes.
func (c *Composite) SetConfigs(configs []Config) error {
	old := c.cur.Load()
	if len(configs) != len(old.configs) {
		return invalidf(ErrInvalidConfig, "%d limits for a composite of %d; keep the number (callers pass one key per limit)", len(configs), len(old.configs))
	}
	cc, err := compileComposite(configs)
	if err != nil {
		return err
	}
	for {
		cc.gen = old.gen + 1
		if c.cur.CompareAndSwap(old, cc) {
			return nil
		}
		old = c.cur.Load()
	}
}

// Allow decides one request: keys[i] is the key of limit i.
func (c *Composite) Allow(ctx context.Context, keys ...string) (Decision, error) {
	return c.AllowN(ctx, keys, 1)
}

// AllowN decides a request of n units: keys[i] is the key of limit i. n must
// be between 1 and the smallest limit. The arguments come in the order of
// Limiter.AllowN's, the keys before the cost.
func (c *Composite) AllowN(ctx context.Context, keys []string, n int64) (Decision, error) {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, keys); err != nil {
		return Decision{}, err
	}
	if cc.lease >= 0 {
		return Decision{}, errUseAcquire
	}
	if err := cc.checkRequest(keys, n); err != nil {
		return Decision{}, err
	}
	return cc.decide(ctx, c.store, keys, n, c.clock.Now())
}

// Peek reports what Allow would decide for keys, without counting anything.
func (c *Composite) Peek(ctx context.Context, keys ...string) (Decision, error) {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, keys); err != nil {
		return Decision{}, err
	}
	if err := cc.checkRequest(keys, 1); err != nil {
		return Decision{}, err
	}
	return cc.peek(ctx, c.store, keys, c.clock.Now())
}

// Reset forgets what every limit counted for its key in keys.
func (c *Composite) Reset(ctx context.Context, keys ...string) error {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, keys); err != nil {
		return err
	}
	if err := cc.checkRequest(keys, 1); err != nil {
		return err
	}
	return cc.reset(ctx, c.store, keys, c.clock.Now())
}

// checkKeyCount reports keys that are not one per limit: the part of a
// Composite's entrance check that a Limiter's calls need not make.
func checkKeyCount(cc *compiled, keys []string) error {
	if len(keys) != len(cc.configs) {
		return invalidf(ErrInvalidRequest, "%d keys for %d limits; give one key per limit", len(keys), len(cc.configs))
	}
	return nil
}

// Acquire takes a lease of one unit from the composite's concurrency limit
// together with one unit of each of its rate limits, all or nothing:
// keys[i] is the key of limit i, as for Allow. A denial by any limit
// consumes nothing from the others (a denied lease refunds the rate
// units). The Lease is on the concurrency limit's key. A composite without
// a concurrency limit returns an error wrapping ErrInvalidRequest.
func (c *Composite) Acquire(ctx context.Context, keys ...string) (*Lease, Decision, error) {
	return c.AcquireN(ctx, keys, 1)
}

// AcquireN is Acquire of n units of every limit; the arguments come in the
// order of Limiter.AcquireN's.
func (c *Composite) AcquireN(ctx context.Context, keys []string, n int64) (*Lease, Decision, error) {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, keys); err != nil {
		return nil, Decision{}, err
	}
	if cc.lease < 0 {
		return nil, Decision{}, invalidf(ErrInvalidRequest, "the composite has no concurrency limit; use Allow")
	}
	return acquire(ctx, c, c.store, c.clock, cc, keys, n, c.clock.Now())
}

// Release gives back the lease whose Lease.ID is leaseID, granted on key
// (the concurrency limit's key), as Limiter.Release does.
func (c *Composite) Release(ctx context.Context, key, leaseID string) error {
	return releaseByID(ctx, c.store, c.clock.Now(), c.cur.Load(), key, leaseID)
}

// Admit decides req as one unit of every limit, as Limiter.Admit: with a
// concurrency limit among them it takes a lease (as Acquire), otherwise a
// unit of each (as Allow), chosen from the configurations that decide.
// A Composite has no lists: req.Client is not read.
func (c *Composite) Admit(ctx context.Context, req Request) (*Lease, Decision, error) {
	cc := c.cur.Load()
	if err := checkKeyCount(cc, req.Keys); err != nil {
		return nil, Decision{}, err
	}
	if cc.lease >= 0 {
		return acquire(ctx, c, c.store, c.clock, cc, req.Keys, 1, c.clock.Now())
	}
	if err := cc.checkRequest(req.Keys, 1); err != nil {
		return nil, Decision{}, err
	}
	d, err := cc.decide(ctx, c.store, req.Keys, 1, c.clock.Now())
	return nil, d, err
}

// Generation counts the configurations the composite has had, as
// Limiter.Generation: 1 after NewComposite, one more after each
// SetConfigs.
func (c *Composite) Generation() uint64 { return c.cur.Load().gen }
