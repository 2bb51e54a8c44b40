package limiter

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/limiter/internal/ipmask"
)

// The compiled engine: what a checked Config (or a Composite's configs)
// becomes, and how it decides. Its rules, keys and lists are resolved once,
// when the configuration is set; a call brings only its keys, its cost and
// the time.

// compiled is a configuration ready to decide with. It is never changed
// once published, so a request reads one whole configuration.
type compiled struct {
	config  Config   // a Limiter's, with defaults
	configs []Config // a Composite's, with defaults
	all     []part   // every rule, in Decision.Rule order
	enforce []part   // the rules in Enforce mode, in order
	shadow  []part   // the rules in Shadow mode, in order
	// simple is one enforced rule: Allow takes its shortest path; hot
	// says that its rule is resolved, for a store's direct Take.
	simple, hot bool
	// lists is a Limiter's exemptions and deny list; nil when it has none.
	lists *lists
	gen   uint64
	// lease is the index in all of the concurrency rule, -1 when there is
	// none (Allow serves; Acquire refuses).
	lease int
	// maxCost is the largest cost every enforced rule accepts (the least
	// of their limits); 0 without enforced rules, whose costs are not
	// errors (see decide).
	maxCost int64
	// shadowFit is the largest cost every shadow rule can admit.
	shadowFit int64
}

// compile checks cfg and prepares it for a Limiter.
func compile(cfg Config) (*compiled, error) {
	cfg, ls, err := cfg.checked()
	if err != nil {
		return nil, err
	}
	cfg.Exempt, cfg.Deny = slices.Clone(cfg.Exempt), slices.Clone(cfg.Deny)
	c := &compiled{config: cfg, lists: ls}
	c.setParts(partsOf(cfg, 0))
	return c, nil
}

// partsOf returns the rules a limiter with cfg (checked) applies to the key
// at index key of a call: the main one, then the guard's.
func partsOf(cfg Config, key int) []part {
	ps := []part{{key: key, prefix: cfg.Prefix, rule: resolved(cfg.rule()), onFailure: cfg.OnFailure, shadow: cfg.Mode == Shadow}}
	if g := cfg.Guard; g != nil {
		ps = append(ps, part{key: key, prefix: cfg.Prefix + guardPrefix, rule: resolved(g.rule()), onFailure: g.OnFailure,
			shadow: g.Mode == Shadow, store: g.Store})
	}
	return ps
}

// resolved returns r (checked) resolved once, so that the stores decide
// it without looking its algorithm up or validating it again.
func resolved(r algorithms.Rule) algorithms.Rule {
	if rr, err := r.Resolve(); err == nil {
		return rr
	}
	return r // not reached: the config was checked; a store reports the error
}

func (c *compiled) setParts(ps []part) {
	c.lease = -1
	for i := range ps {
		p := &ps[i]
		p.index = i
		if p.rule.HoldsLeases() {
			c.lease = i
		}
		if p.shadow {
			c.shadow = append(c.shadow, *p)
			c.shadowFit = minLimit(c.shadowFit, p.rule.Limit)
		} else {
			c.enforce = append(c.enforce, *p)
			c.maxCost = minLimit(c.maxCost, p.rule.Limit)
		}
	}
	c.all = ps
	c.simple = len(ps) == 1 && !ps[0].shadow && c.lease < 0
	c.hot = c.simple && ps[0].rule.Resolved()
}

// minLimit is the lesser of two limits, where 0 is none yet.
func minLimit(least, limit int64) int64 {
	if least == 0 {
		return limit
	}
	return min(least, limit)
}

// part is one rule a compiled configuration applies, to the key at index
// key of a call.
type part struct {
	key       int
	prefix    string
	rule      algorithms.Rule
	onFailure backend.FailurePolicy
	// shadow marks a rule in shadow mode; index is the rule's position
	// among all of the rules (Decision.Rule).
	shadow bool
	index  int
	// store is the part's own store (a guard's Guard.Store); nil for the
	// store of the call.
	store backend.Store
}

// storeOf returns the store p's state lives in.
func (p *part) storeOf(store backend.Store) backend.Store {
	if p.store != nil {
		return p.store
	}
	return store
}

// request builds p's request of n units at now for keys, which passed
// checkRequest.
func (p *part) request(keys []string, n int64, now time.Time) backend.Request {
	return backend.Request{
		Key:       backend.Key{Prefix: p.prefix, ID: keys[p.key]},
		Rule:      p.rule,
		Now:       now,
		Cost:      n,
		OnFailure: p.onFailure,
		Shadow:    p.shadow,
	}
}

// errEmptyKey refuses a call with an empty key.
var errEmptyKey = invalidf(ErrInvalidRequest, "key is empty; pass the id to limit (a user, an address, a token)")

// checkRequest is the entrance check of a call: its keys must not be empty,
// and its cost n must be one every enforced rule can admit. Every entrance
// (Allow, AllowN, Admit, Acquire, a Composite's and Plans' calls) runs it
// once, and nothing below it checks again: the rules, the prefixes and the
// number of keys come from a configuration checked when it was set
// (Config.checked), so only what arrives with the call is checked. Stores
// keep their own checks, as backend.Store is also called directly.
func (c *compiled) checkRequest(keys []string, n int64) error {
	for _, k := range keys {
		if k == "" {
			return errEmptyKey
		}
	}
	if (n >= 1 && n <= c.maxCost) || len(c.enforce) == 0 {
		return nil
	}
	for i := range c.enforce {
		if err := c.enforce[i].rule.ValidateCost(n); err != nil {
			return restate(ErrInvalidRequest, err) // the first rule the cost does not fit, as it says
		}
	}
	return nil
}

// decide decides a request of n units for keys under c at now: the
// enforced rules decide; the shadow rules are decided and counted after
// them (when the enforced ones admitted), and their denial only sets
// ShadowDenied. The request passed checkRequest.
//
// A shadow rule the cost exceeds is a shadow denial without a store call.
// With enforced rules, a store error on the shadow rules is not returned
// (the request was decided; an observer still sees the error); with shadow
// rules only, it is, as it would be for enforced ones. A concurrency
// rule's lease id is in the Decision's Lease, whichever call (enforced or
// shadow) took it.
func (c *compiled) decide(ctx context.Context, store backend.Store, keys []string, n int64, now time.Time) (Decision, error) {
	if len(c.shadow) == 0 {
		return take(ctx, store, c.enforce, keys, n, now)
	}
	shadow, over := c.shadow, false
	if n < 1 || n > c.shadowFit {
		var buf [backend.MaxRequests]part
		shadow, over = fitting(c.shadow, n, buf[:0])
	}
	if len(c.enforce) > 0 {
		d, err := take(ctx, store, c.enforce, keys, n, now)
		if err != nil || !d.Allowed {
			return d, err
		}
		if len(shadow) > 0 {
			s, err := take(ctx, store, shadow, keys, n, now)
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
	d, err := take(ctx, store, shadow, keys, n, now)
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
func fitting(shadow []part, n int64, buf []part) ([]part, bool) {
	over := false
	for i := range shadow {
		if shadow[i].rule.ValidateCost(n) != nil {
			over = true
			continue
		}
		buf = append(buf, shadow[i])
	}
	return buf, over
}

// take decides a request of n units for keys against every part at now,
// through Take for one part and TakeAll for several. The Decision's Rule is
// the deciding part's index.
func take(ctx context.Context, store backend.Store, parts []part, keys []string, n int64, now time.Time) (Decision, error) {
	if len(parts) == 1 {
		// The request is built in the call, not returned by request:
		// copying it (120 bytes) is a good part of a memory store's cost.
		p := &parts[0]
		d, err := p.storeOf(store).Take(ctx, p.request(keys, n, now))
		d.Rule = p.index
		return d, err
	}
	// Made to measure: a slice handed to a Store escapes, and an array of
	// MaxRequests would cost its full size on every call.
	reqs := make([]backend.Request, len(parts))
	split := false
	for i := range parts {
		reqs[i] = parts[i].request(keys, n, now)
		split = split || parts[i].store != nil
	}
	var d Decision
	var err error
	if split {
		d, err = takeSplit(ctx, store, parts, reqs)
	} else {
		d, err = store.TakeAll(ctx, reqs)
	}
	if err == nil && d.Rule >= 0 && d.Rule < len(parts) {
		d.Rule = parts[d.Rule].index
	}
	return d, err
}

// takeSplit decides a main rule (reqs[0], on store) and a guard on a
// store of its own (reqs[1]), all or nothing without a script spanning
// both: peek the guard, take the main rule, take the guard. A main denial
// touches the guard not at all; the guard's counts outlive the main
// store's.
func takeSplit(ctx context.Context, store backend.Store, parts []part, reqs []backend.Request) (Decision, error) {
	guard := parts[1].storeOf(store)
	var results [2]Decision
	var err error
	if results[1], err = guard.Peek(ctx, reqs[1]); err != nil {
		return Decision{}, err
	}
	if !results[1].Allowed {
		// Report whichever rule makes the caller wait longest.
		if results[0], err = store.Peek(ctx, reqs[0]); err != nil {
			return Decision{}, err
		}
		return backend.Combine(results[:]), nil
	}
	if results[0], err = store.Take(ctx, reqs[0]); err != nil {
		return Decision{}, err
	}
	if !results[0].Allowed {
		return backend.Combine(results[:]), nil
	}
	results[1], err = guard.Take(ctx, reqs[1])
	if lease := results[0].Lease; lease != 0 {
		if err != nil || !results[1].Allowed {
			// A lease is given back at once, unlike a rate unit.
			giveBack(ctx, store, reqs[0], lease)
		}
	}
	if err != nil {
		return Decision{}, err
	}
	return backend.Combine(results[:]), nil // the lease, when admitted
}

// peek reports what decide would decide for one unit, without counting.
// keys passed checkRequest (one unit fits every rule).
func (c *compiled) peek(ctx context.Context, store backend.Store, keys []string, now time.Time) (Decision, error) {
	if len(c.shadow) == 0 {
		return peekParts(ctx, store, c.enforce, keys, now)
	}
	s, err := peekParts(ctx, store, c.shadow, keys, now)
	if err != nil {
		return Decision{}, err
	}
	d := s
	if len(c.enforce) > 0 {
		if d, err = peekParts(ctx, store, c.enforce, keys, now); err != nil {
			return Decision{}, err
		}
	} else if !d.Allowed {
		d.Allowed, d.RetryAfter = true, 0
	}
	d.ShadowDenied = !s.Allowed
	return d, nil
}

// peekParts reports what take would decide for one unit at now, without
// consuming.
func peekParts(ctx context.Context, store backend.Store, parts []part, keys []string, now time.Time) (Decision, error) {
	if len(parts) == 1 {
		// Most limits have one rule: spare zeroing MaxRequests results.
		var one [1]Decision
		return peekInto(ctx, store, parts, keys, now, one[:])
	}
	var buf [backend.MaxRequests]Decision
	return peekInto(ctx, store, parts, keys, now, buf[:len(parts)])
}

// peekInto is peekParts with a result per part in results.
func peekInto(ctx context.Context, store backend.Store, parts []part, keys []string, now time.Time, results []Decision) (Decision, error) {
	for i := range parts {
		var err error
		p := &parts[i]
		if results[i], err = p.storeOf(store).Peek(ctx, p.request(keys, 1, now)); err != nil {
			return Decision{}, err
		}
	}
	d := backend.Combine(results)
	d.Rule = parts[d.Rule].index
	return d, nil
}

// reset forgets what every rule counted for keys (checked).
func (c *compiled) reset(ctx context.Context, store backend.Store, keys []string, now time.Time) error {
	for i := range c.all {
		p := &c.all[i]
		if err := p.storeOf(store).Reset(ctx, backend.Key{Prefix: p.prefix, ID: keys[p.key]}, p.rule, now); err != nil {
			return err
		}
	}
	return nil
}

// lists is a limit's exemptions and deny list, parsed (lists.go). A limit
// without either has none (compiled.lists is nil), so the hot path pays one
// pointer check.
type lists struct {
	exemptKeys, denyKeys map[string]struct{}
	exemptNets, denyNets []netip.Prefix
}

// verdict is what the lists say of a key.
type verdict uint8

const (
	unlisted   verdict = iota // decide it
	exempted                  // never limited
	denyListed                // always denied
)

// listed returns the decision for a listed key under c without a store
// call: exempt, an admission; deny-listed, a denial with no retry time (or,
// for a limit in Shadow mode, an admission that says it would have been
// denied). ok is false for a key on no list, or a limit without lists.
func (c *compiled) listed(key string) (d Decision, ok bool) {
	if c.lists == nil || key == "" {
		return Decision{}, false
	}
	return c.verdictDecision(c.lists.check(key))
}

// listedClient is listed for a transport's request: the address entries
// apply to client only (see Request.Client), never to the key.
func (c *compiled) listedClient(key string, client netip.Addr) (d Decision, ok bool) {
	if c.lists == nil || key == "" {
		return Decision{}, false
	}
	var p netip.Prefix
	if client.IsValid() {
		a := ipmask.Normalize(client)
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return c.verdictDecision(c.lists.checkClient(key, p))
}

// check says what the lists say of key. A deny entry wins over an
// exemption. The address entries apply to the key itself, when it is an
// address or a network (Allow's callers choose their keys).
func (l *lists) check(key string) verdict {
	if len(l.denyNets)+len(l.exemptNets) == 0 {
		return l.checkClient(key, netip.Prefix{})
	}
	p, _ := ipmask.KeyPrefix(key)
	return l.checkClient(key, p)
}

// checkClient says what the lists say of key from the client at p: the
// key entries apply to key, the address entries to p only (none when p is
// not valid).
func (l *lists) checkClient(key string, p netip.Prefix) verdict {
	if _, ok := l.denyKeys[key]; ok {
		return denyListed
	}
	_, exempt := l.exemptKeys[key]
	if p.IsValid() && len(l.denyNets)+len(l.exemptNets) > 0 {
		if ipmask.Contains(l.denyNets, p) {
			return denyListed
		}
		exempt = exempt || ipmask.Contains(l.exemptNets, p)
	}
	if exempt {
		return exempted
	}
	return unlisted
}

// verdictDecision is the decision for a listed key; ok is false for an
// unlisted one.
func (c *compiled) verdictDecision(v verdict) (d Decision, ok bool) {
	limit := c.config.Limit
	switch v {
	case exempted:
		return Decision{Allowed: true, Exempt: true, Limit: limit, Remaining: limit}, true
	case denyListed:
		if c.config.Mode == Shadow {
			return Decision{Allowed: true, DenyListed: true, ShadowDenied: true, Limit: limit, Remaining: limit}, true
		}
		return Decision{DenyListed: true, Limit: limit}, true
	}
	return Decision{}, false
}
