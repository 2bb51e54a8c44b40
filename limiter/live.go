package limiter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
)

// Mode says whether a limit's denials are enforced.
type Mode string

// The modes of a limit.
const (
	// Enforce denies what the limit denies. The default ("" means it).
	Enforce Mode = "enforce"
	// Shadow (a dry run) decides and counts every request exactly as
	// Enforce would, so its counts are those the enforced limit would
	// keep, but admits the requests it would deny and says so in
	// Decision.ShadowDenied. Use it to try a new limit on live traffic.
	Shadow Mode = "shadow"
)

func (m Mode) validate(field string) error {
	switch m {
	case "", Enforce, Shadow:
		return nil
	}
	s := string(m)
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return fmt.Errorf("%w: %s %q: write %q or %q", ErrInvalidConfig, field, s, Enforce, Shadow)
}

// compiled is a configuration ready to decide with. It is never changed
// once published, so a request reads one whole configuration.
type compiled struct {
	config  Config   // a Limiter's, with defaults
	configs []Config // a Composite's, with defaults
	all     []part   // every rule, in Decision.Rule order
	enforce []part   // the rules in Enforce mode, in order
	shadow  []part   // the rules in Shadow mode, in order
	// simple is one enforced rule: Allow takes its shortest path.
	simple bool
	// lists is a Limiter's exemptions and deny list; nil when it has none.
	lists *lists
	gen   uint64
	// lease is the index in all of the concurrency rule, -1 when there is
	// none (Allow serves; Acquire refuses).
	lease int
}

// compile prepares cfg (defaults set, validated) for a Limiter.
func compile(cfg Config) *compiled {
	cfg.Exempt, cfg.Deny = slices.Clone(cfg.Exempt), slices.Clone(cfg.Deny)
	c := &compiled{config: cfg}
	c.setParts(cfg.parts(0))
	c.lists, _ = parseLists(cfg.Exempt, cfg.Deny) // validated by the caller
	return c
}

func (c *compiled) setParts(ps []part) {
	for i := range ps {
		ps[i].index = i
		if ps[i].shadow {
			c.shadow = append(c.shadow, ps[i])
		} else {
			c.enforce = append(c.enforce, ps[i])
		}
	}
	c.all = ps
	c.simple = len(ps) == 1 && !ps[0].shadow
	c.lease = -1
	for i := range ps {
		if ps[i].rule.HoldsLeases() {
			c.lease = i
			c.simple = false
		}
	}
}

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

func (l *Limiter) current() *compiled { return (*l.src.cur.Load())[l.idx] }

// Generation counts the configurations the limiter has had: 1 after New,
// one more after each change by SetConfig or Group.SetConfigs. Reading it
// is one atomic load, for callers that cache what they derive from Config
// (package httplimit's header values).
func (l *Limiter) Generation() uint64 { return l.current().gen }

// SetConfig changes the limiter's configuration while it serves requests:
// cfg is validated first (an invalid one is refused with the error New
// would give, and nothing changes), then swapped in atomically: each
// request is decided wholly by the old configuration or wholly by the new
// one. The store, and what it counted, is kept; what a change does to the
// counts, by algorithm:
//
//   - limit: the logs and counters keep the units they counted and
//     measure them against the new limit (lowered below the count, the key
//     is denied until enough slides out; raised, the difference is
//     available at once: 3 of 4 become 3 of 8). GCRA keeps the time until
//     its bucket is full, in whole milliseconds rounded up, that is the
//     share of the bucket in use: 3 of 4 become 6 of 8.
//   - window: the logs (sliding_log, compact_log, a heavy two_level key)
//     keep their timestamps and read them under the new window; a longer
//     window finds only the timestamps the old one still kept (those
//     within two old windows). fixed_window and sliding_counter keep the
//     current window's start and count: the window in progress ends at
//     start + the new window, and the next ones are aligned to the new
//     length. GCRA caps its debt at a full bucket of the new window.
//   - algorithm or prefix: the state lives under another key (each
//     algorithm has its own key suffix), so counts start from zero; the
//     old keys expire on their own.
//   - guard: changed like the main limit; added, it starts from zero.
//   - mode: counts are the same in both modes, so a change keeps them.
//
// For a limiter built by a Group, SetConfig changes this one limiter (see
// Group.SetConfigs to change several at once).
func (l *Limiter) SetConfig(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	s := l.src
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := slices.Clone(*s.cur.Load())
	c := compile(cfg)
	c.gen = cs[l.idx].gen + 1
	cs[l.idx] = c
	s.cur.Store(&cs)
	return nil
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
		return nil, fmt.Errorf("%w: store is nil; pass a backend.Store such as memorystore.New()", ErrInvalidConfig)
	}
	cs, err := compileAll(configs)
	if err != nil {
		return nil, err
	}
	src := newSource(cs)
	g := &Group{}
	for i := range cs {
		l := &Limiter{store: store, clock: clock.System, src: src, idx: i}
		for _, opt := range opts {
			opt(l)
		}
		g.limiters = append(g.limiters, l)
	}
	return g, nil
}

func compileAll(configs []Config) ([]*compiled, error) {
	cs := make([]*compiled, len(configs))
	for i, cfg := range configs {
		cfg = cfg.withDefaults()
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		cs[i] = compile(cfg)
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
		return fmt.Errorf("%w: %d configs for a group of %d limiters; give one per limiter", ErrInvalidConfig, len(configs), len(g.limiters))
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

// decide decides a request of n units for keys under c: the enforced rules
// decide; the shadow rules are decided and counted after them (when the
// enforced ones admitted), and their denial only sets ShadowDenied.
//
// A shadow rule the cost exceeds is a shadow denial without a store call.
// With enforced rules, a store error on the shadow rules is not returned
// (the request was decided; an observer still sees the error); with shadow
// rules only, it is, as it would be for enforced ones.
func decide(ctx context.Context, store backend.Store, clk clock.Clock, c *compiled, keys []string, n int64) (Decision, error) {
	for i := range c.enforce {
		if err := c.enforce[i].check(keys, n); err != nil {
			return Decision{}, err
		}
	}
	return decideAt(ctx, store, c, keys, n, clk.Now())
}

// decideAt is decide at now, once the enforced rules' checks passed.
//
// A concurrency rule's lease id is in the Decision's Lease, whichever call
// (enforced or shadow) took it.
func decideAt(ctx context.Context, store backend.Store, c *compiled, keys []string, n int64, now time.Time) (Decision, error) {
	if len(c.shadow) == 0 {
		return allow(ctx, store, c.enforce, keys, n, now)
	}
	var buf [backend.MaxRequests]part
	shadow, over, err := fitting(c.shadow, keys, n, buf[:0])
	if err != nil {
		return Decision{}, err
	}
	if len(c.enforce) > 0 {
		d, err := allow(ctx, store, c.enforce, keys, n, now)
		if err != nil || !d.Allowed {
			return d, err
		}
		if len(shadow) > 0 {
			s, err := allow(ctx, store, shadow, keys, n, now)
			over = over || (err == nil && !s.Allowed)
			if err == nil && s.Allowed && d.Lease == 0 {
				d.Lease = s.Lease // a shadow concurrency rule's lease
			}
		}
		d.ShadowDenied = over
		return d, nil
	}
	if len(shadow) == 0 {
		// Every shadow rule is below the cost: enforced, each would
		// refuse the request as invalid.
		p := &c.shadow[0]
		return Decision{Allowed: true, ShadowDenied: true, Limit: p.rule.Limit, Rule: p.index}, nil
	}
	d, err := allow(ctx, store, shadow, keys, n, now)
	if err != nil {
		return d, err
	}
	if !d.Allowed || over {
		d.Allowed, d.ShadowDenied, d.RetryAfter = true, true, 0
	}
	return d, nil
}

// fitting appends to buf the shadow parts a request of n units can ever be
// admitted by, and reports whether some could not.
func fitting(shadow []part, keys []string, n int64, buf []part) ([]part, bool, error) {
	over := false
	for i := range shadow {
		p := &shadow[i]
		if keys[p.key] == "" {
			return nil, false, p.check(keys, n)
		}
		if p.rule.ValidateCost(n) != nil {
			over = true
			continue
		}
		buf = append(buf, *p)
	}
	return buf, over, nil
}

// peekAll reports what decide would decide for one unit, without counting.
func peekAll(ctx context.Context, store backend.Store, clk clock.Clock, c *compiled, keys []string) (Decision, error) {
	for i := range c.all {
		if err := c.all[i].check(keys, 1); err != nil {
			return Decision{}, err
		}
	}
	now := clk.Now()
	if len(c.shadow) == 0 {
		return peek(ctx, store, c.enforce, keys, now)
	}
	s, err := peek(ctx, store, c.shadow, keys, now)
	if err != nil {
		return Decision{}, err
	}
	d := s
	if len(c.enforce) > 0 {
		if d, err = peek(ctx, store, c.enforce, keys, now); err != nil {
			return Decision{}, err
		}
	} else if !d.Allowed {
		d.Allowed, d.RetryAfter = true, 0
	}
	d.ShadowDenied = !s.Allowed
	return d, nil
}
