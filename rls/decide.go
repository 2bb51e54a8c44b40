package rls

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// group is one limit state a request touches: one rule on one key. The
// same descriptor twice in a request is one group of twice the cost.
type group struct {
	rule   *rule
	req    backend.Request
	check  bool // decided without consuming (hits 0, or negative hits)
	refund bool // negative hits: req.Cost units to give back (backend.UnitRefunder)
	descs  []int
	stat   string
	res    backend.Result
	denied bool // this limit refused (or would refuse, for shadow and checks)
	held   bool // admitted, but the request was refused: nothing consumed
	// charged: the limit is charged after the response (WithChargedDomains):
	// its hits are a charge (req.Charge), its checks refuse a spent key.
	charged bool
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer. It answers an
// error only for a request it cannot read (codes.InvalidArgument), before
// any configuration (codes.Unavailable), for a cancelled call, and, with
// WithErrorOnFailure, when the store could not decide; a refusal is an
// answer with overall_code OVER_LIMIT.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	rules := s.rules.Load()
	if rules == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if err := checkDescriptors(req); err != nil {
		return nil, err
	}
	now := s.opts.clock.Now()
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	groups, err := s.groups(rules, req, now, resp)
	if err != nil {
		return nil, err
	}
	if err := checkFanOut(groups); err != nil {
		return nil, err
	}
	refused, err := s.decide(ctx, groups)
	if err != nil {
		return nil, err
	}
	s.answer(req, groups, refused, resp)
	return resp, nil
}

// candidate is one limit a descriptor of the request matched.
type candidate struct {
	desc int
	rule *rule
	hits uint64
	neg  bool
	m    match
	// fixed is the number of fixed windows among the descriptor's
	// limits (sharesReferenceKey).
	fixed int
}

// groups matches every descriptor, fills the statuses of those with no
// limit to check, and returns the limit states to decide.
func (s *Service) groups(rules *Rules, req *rlsv3.RateLimitRequest, now time.Time, resp *rlsv3.RateLimitResponse) ([]*group, error) {
	cands, replaced, err := candidates(rules, req, resp)
	if err != nil {
		return nil, err
	}
	var groups []*group
	byState := map[string]*group{}
	var id []byte
	for _, c := range cands {
		if c.rule.limit.Name != "" && replaced[c.rule.limit.Name] {
			continue
		}
		d := req.GetDescriptors()[c.desc]
		id = id[:0]
		prefix := c.rule.prefix
		if c.rule.override {
			// The window goes in the id: prefixes name limits in metrics.
			id = append(id, prefix...)
			prefix = overridePrefix
		}
		entries := sharedEntries(d.GetEntries(), c.m.shared)
		id = appendID(id, req.GetDomain(), entries)
		key := backend.Key{Prefix: s.opts.prefix + prefix, ID: string(id)}
		check := c.hits == 0 || c.neg
		state := key.Prefix + "\x00" + string(c.rule.alg.Algorithm) + "\x00" + strconv.FormatBool(check) +
			strconv.FormatBool(c.neg) + "\x00" + key.ID
		if g := byState[state]; g != nil {
			g.req.Cost = addCost(g.req.Cost, c.hits)
			g.descs = append(g.descs, c.desc)
			continue
		}
		g := s.newGroup(c, key, check, now, req.GetDomain(), entries)
		if s.opts.stats != nil {
			g.stat = s.statKey(c, req.GetDomain(), d)
		}
		byState[state] = g
		groups = append(groups, g)
	}
	return groups, nil
}

// candidates returns the limits the request's descriptors match, and the
// names of limits they replace. It fills the statuses of descriptors
// with no limit to check (OK; unlimited ones with all remaining).
func candidates(rules *Rules, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) ([]candidate, map[string]bool, error) {
	var cands []candidate
	replaced := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		hits := uint64(max(req.GetHitsAddend(), 1))
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		if o := d.GetLimit(); o != nil {
			// As the reference: a domain with no configuration limits
			// nothing, overrides included.
			if rules.domains[req.GetDomain()] == nil {
				continue
			}
			r, err := overrideRule(req.GetDomain(), d, o)
			if err != nil {
				return nil, nil, err
			}
			r.override = true
			cands = append(cands, candidate{i, r, hits, d.GetIsNegativeHits(), match{}, 1})
			continue
		}
		m := rules.lookup(req.GetDomain(), d)
		n := m.node
		if n == nil {
			continue
		}
		if n.unlimited {
			resp.Statuses[i].LimitRemaining = math.MaxUint32
			continue
		}
		fixed := 0
		for _, r := range n.limits {
			if r.alg.PerWindow() {
				fixed++
			}
		}
		for _, r := range n.limits {
			for _, name := range r.limit.Replaces {
				replaced[name] = true
			}
			cands = append(cands, candidate{i, r, hits, d.GetIsNegativeHits(), m, fixed})
		}
	}
	return cands, replaced, nil
}

// newGroup is the limit state of candidate c at key, check-only or not.
func (s *Service) newGroup(c candidate, key backend.Key, check bool, now time.Time, domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) *group {
	policy := c.rule.onFailure
	if policy.Mode() == backend.ModeUnset {
		policy = s.opts.onFailure
	}
	g := &group{
		rule:   c.rule,
		check:  check,
		refund: c.neg,
		descs:  []int{c.desc},
		req: backend.Request{Key: key, Rule: c.rule.alg, Now: now, Cost: addCost(0, c.hits),
			OnFailure: policy, Shadow: c.rule.shadow},
	}
	if sharesReferenceKey(c.rule, c.fixed) {
		// Counted where envoyproxy/ratelimit counts it (keys.go),
		// unless the values make that key longer than a store takes:
		// then in limitkit's key, whose id is bounded.
		if base := referenceKey(s.opts.prefix, domain, entries); len(base) <= backend.MaxExactKey {
			g.req.Exact = backend.ExactKey{Base: base, Expiry: referenceExpiry(c.rule)}
		}
	}
	g.charged = s.opts.chargedDomain(domain) && c.rule.alg.CheckCharge() == nil
	g.req.Charge = g.charged && !check
	if check {
		g.req.Cost = 1
		if g.refund {
			g.req.Cost = addCost(0, c.hits) // 0: nothing to give back
		}
	}
	return g
}

// statKey is the statistics key of candidate c of descriptor d: the
// rule's, or with WithStats a value the configuration chose to show
// (value_to_metric) or, for detailed_metric, the request's full key.
func (s *Service) statKey(c candidate, domain string, d *ratelimitv3.RateLimitDescriptor) string {
	switch {
	case c.m.statKey != "" && !c.rule.detailed:
		// value_to_metric: values the configuration chose to show.
		if s.stats.admit(c.m.statKey) {
			return c.m.statKey
		}
	case c.rule.detailed:
		full := c.m.statKey
		if full == "" {
			full = fullKey(domain, d.GetEntries())
		}
		if s.stats.admit(full) {
			return full
		}
	}
	return c.rule.statKey
}

// overridePrefix is the key prefix of every limit override, whatever its
// window (which goes in the key id): one value of limitkit's policy label.
const overridePrefix = "rls:override:"

// sharedEntries returns entries with the shared wildcard values in place of
// the request's (share_threshold), or entries when none is shared.
func sharedEntries(entries []*ratelimitv3.RateLimitDescriptor_Entry, shared []string) []*ratelimitv3.RateLimitDescriptor_Entry {
	if shared == nil {
		return entries
	}
	out := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(entries))
	for i, e := range entries {
		out[i] = e
		if i < len(shared) && shared[i] != "" {
			out[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.GetKey(), Value: shared[i]}
		}
	}
	return out
}

// addCost adds hits to a cost, saturating far above any limit.
func addCost(cost int64, hits uint64) int64 {
	const most = algorithms.MaxLimit + 1
	if hits >= uint64(most) || cost+int64(hits) > most {
		return most
	}
	return cost + int64(hits)
}

// possible reports whether a request of g's cost can ever pass its limit.
func (g *group) possible() bool {
	return g.rule.alg.Limit > 0 && g.req.Cost <= g.rule.alg.Limit
}

// decide decides every group: the checks (peeks), then the enforced
// limits all or nothing in one TakeAll, then the shadow limits. It
// reports whether the request is refused.
func (s *Service) decide(ctx context.Context, groups []*group) (bool, error) {
	enforced, shadow, refused, quotas, err := s.sortGroups(ctx, groups)
	if err != nil {
		return false, err
	}
	if len(enforced) > backend.MaxRequests {
		return false, status.Errorf(codes.InvalidArgument, "the request has %d limits to check; at most %d in one request", len(enforced), backend.MaxRequests)
	}
	refused = refused || quotas.allDenied()
	pending, refused, err := s.takeEnforced(ctx, enforced, refused, &quotas)
	if err != nil {
		return false, err
	}
	if refused {
		if err := s.peekHeld(ctx, pending); err != nil {
			return false, err
		}
	}
	if err := s.decideShadow(ctx, shadow, refused); err != nil {
		return false, err
	}
	return refused, nil
}

// quotaCount counts a request's quota-mode limits (quota_mode), and those
// that refuse it: they refuse the request only when every one of them
// refuses, as in the reference; the others refuse alone.
type quotaCount struct{ all, denied int }

func (q quotaCount) allDenied() bool { return q.all > 0 && q.denied == q.all }

// sortGroups gives back the refunds and decides the checks, and returns
// the enforced and shadow groups left to decide, whether a check (or a
// limit no request can pass) already refuses the request, and the
// quota-mode limits counted so far.
func (s *Service) sortGroups(ctx context.Context, groups []*group) (enforced, shadow []*group, refused bool, q quotaCount, err error) {
	// Consecutive charges go to the store together (takeCharges), before
	// the next call that is not one: the order of the calls is kept.
	var charges []*group
	for _, g := range groups {
		quota := s.quotaMode(g)
		if quota {
			q.all++
		}
		if charges, err = s.flushCharges(ctx, charges, g); err != nil {
			return nil, nil, false, q, err
		}
		switch {
		case g.refund:
			err = s.giveBack(ctx, g)
		case isCharge(g):
			// Recorded whatever is left, and never refuses the request.
			g.req.Cost = min(g.req.Cost, g.rule.alg.ChargeBound())
			charges = append(charges, g)
		case g.check:
			err = s.checkOnly(ctx, g)
			if g.denied && quota {
				q.denied++
			}
			refused = refused || (g.denied && !g.rule.shadow && !quota)
		case g.rule.shadow:
			shadow = append(shadow, g)
		default:
			if !g.possible() {
				g.refuseImpossible()
				if quota {
					q.denied++
					continue
				}
				refused = true
			}
			enforced = append(enforced, g)
		}
		if err != nil {
			return nil, nil, false, q, err
		}
	}
	if _, err = s.flushCharges(ctx, charges, nil); err != nil {
		return nil, nil, false, q, err
	}
	return enforced, shadow, refused, q, nil
}

// quotaMode reports whether g is a quota-mode limit (quota_mode) that
// refuses only with the others.
func (s *Service) quotaMode(g *group) bool {
	return (g.rule.quota || s.opts.quota) && !g.rule.shadow && !g.refund && !g.req.Charge
}

// isCharge reports whether g records a charge (not a give back).
func isCharge(g *group) bool { return g.req.Charge && !g.refund }

// flushCharges takes the pending charges unless next is one more (nil:
// the request's last group was) and returns what is left pending.
func (s *Service) flushCharges(ctx context.Context, charges []*group, next *group) ([]*group, error) {
	if len(charges) == 0 || (next != nil && isCharge(next)) {
		return charges, nil
	}
	return charges[:0], s.takeCharges(ctx, charges)
}

// takeCharges records the charges gs. Several go in one TakeAll: a charge
// is never refused, so all or nothing decides as separate Takes would,
// in one round trip, as the reference sends a request's increments in one
// pipeline (issue 38.5). Charges on one key, or more than one TakeAll
// holds, are taken one by one.
func (s *Service) takeCharges(ctx context.Context, gs []*group) error {
	if len(gs) < 2 || len(gs) > backend.MaxRequests || sharedKey(gs) {
		for _, g := range gs {
			if err := s.take(ctx, g); err != nil {
				return err
			}
		}
		return nil
	}
	reqs := make([]backend.Request, len(gs))
	for i, g := range gs {
		reqs[i] = g.req
	}
	res, results, err := backend.TakeEach(ctx, s.store, reqs)
	each := len(results) == len(gs)
	for i, g := range gs {
		r := res
		if each && err == nil {
			r = results[i]
		}
		if err := s.settle(ctx, g, r, err); err != nil {
			return err
		}
	}
	if err != nil || each {
		return nil
	}
	// A store that did not say how each limit stands: the others are
	// read, as after an enforced TakeAll.
	return s.peekOthers(ctx, gs, res)
}

// sharedKey reports whether two of gs count one key with one algorithm
// (a TakeAll refuses them).
func sharedKey(gs []*group) bool {
	for i := range gs {
		for j := range i {
			if gs[j].req.Key == gs[i].req.Key && gs[j].req.Rule.Algorithm == gs[i].req.Rule.Algorithm {
				return true
			}
		}
	}
	return false
}

// refuseImpossible refuses g, whose cost is past its limit, without asking
// the store.
func (g *group) refuseImpossible() {
	g.denied = true
	g.res = backend.Result{Limit: g.rule.alg.Limit, RetryAfter: g.rule.alg.Window, ResetAfter: g.rule.alg.Window}
}

// takeEnforced decides the enforced groups pending all or nothing, unless
// the request is refused already. Quota-mode limits that refuse leave the
// request to the others (taken again without them) unless all refused.
// It returns the groups of the last TakeAll and whether it refused.
func (s *Service) takeEnforced(ctx context.Context, pending []*group, refused bool, q *quotaCount) ([]*group, bool, error) {
	for !refused && len(pending) > 0 {
		var err error
		if refused, err = s.takeAll(ctx, pending); err != nil {
			return nil, false, err
		}
		if !refused {
			break
		}
		rest, byQuota := s.quotaRefusals(pending, q)
		if !byQuota || q.allDenied() {
			break
		}
		for _, g := range rest {
			g.held, g.denied = false, false
		}
		pending, refused = rest, false
	}
	return pending, refused, nil
}

// quotaRefusals sorts a refused TakeAll's groups: it counts the refusing
// quota-mode limits in q, and returns the groups that did not refuse and
// whether quota-mode limits alone refused.
func (s *Service) quotaRefusals(pending []*group, q *quotaCount) (rest []*group, byQuota bool) {
	byQuota = true
	for _, g := range pending {
		switch {
		case g.denied && !g.rule.quota && !s.opts.quota:
			byQuota = false
		case g.denied:
			q.denied++
		default:
			rest = append(rest, g)
		}
	}
	return rest, byQuota
}

// peekHeld reads the groups of a refused request that admitted it and
// have no result yet: they hold what they have, unconsumed.
func (s *Service) peekHeld(ctx context.Context, pending []*group) error {
	for _, g := range pending {
		if g.res == (backend.Result{}) && !g.denied && g.possible() {
			if err := s.peek(ctx, g); err != nil {
				return err
			}
		}
		g.held = !g.denied
	}
	return nil
}

// decideShadow decides the shadow groups: taken when the request is
// admitted, read when it is refused.
func (s *Service) decideShadow(ctx context.Context, shadow []*group, refused bool) error {
	for _, g := range shadow {
		var err error
		switch {
		case !g.possible():
			g.refuseImpossible()
		case refused:
			err = s.peek(ctx, g)
			g.held = !g.denied
		default:
			err = s.take(ctx, g)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// takeAll decides the enforced groups in one TakeAll. Each group's status
// comes from the result's Each; a store that gives none has the groups it
// does not describe peeked. It reports whether the request was refused.
func (s *Service) takeAll(ctx context.Context, gs []*group) (bool, error) {
	reqs := make([]backend.Request, len(gs))
	for i, g := range gs {
		reqs[i] = g.req
	}
	res, each, err := backend.TakeEach(ctx, s.store, reqs)
	if err != nil {
		return s.takeAllFailed(ctx, gs, err)
	}
	if res.Degraded && s.opts.errorOnFailure {
		return false, status.Error(codes.Unavailable, "rls: the rate limit store is unavailable")
	}
	if len(each) == len(gs) {
		// Every limit's own result came with the decision: when admitted,
		// what it has left; when refused, what it holds unconsumed and
		// whether it alone would have let the request pass.
		for i, g := range gs {
			g.res = each[i]
			if i == res.Rule {
				g.res = res
			}
			g.denied = !g.res.Allowed
			g.held = !res.Allowed && !g.denied
		}
		return !res.Allowed, nil
	}
	decided := gs[res.Rule]
	decided.res, decided.denied = res, !res.Allowed
	if err := s.peekOthers(ctx, gs, res); err != nil {
		return false, err
	}
	return !res.Allowed, nil
}

// takeAllFailed decides the groups of a TakeAll the store failed (err),
// each by its failure policy. It reports whether the request was refused.
func (s *Service) takeAllFailed(ctx context.Context, gs []*group, err error) (bool, error) {
	if err := s.storeError(ctx, err); err != nil {
		return false, err
	}
	refused := false
	for _, g := range gs {
		s.onFailure(g)
		refused = refused || g.denied
	}
	for _, g := range gs {
		g.held = refused && !g.denied
	}
	return refused, nil
}

// peekOthers reads the groups a TakeAll decided as res without saying how
// each limit stands (a store or wrapper that is no backend.EachTaker): all
// but the deciding one, at once (a Redis store batches concurrent
// peeks). When admitted, a peek of one unit reads what is left after the
// request; when refused, a peek of its cost says whether this limit alone
// would have let it pass.
func (s *Service) peekOthers(ctx context.Context, gs []*group, res backend.Result) error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		if i == res.Rule {
			continue
		}
		cost := g.req.Cost
		if res.Allowed {
			cost = 1
		}
		peek := func() {
			errs[i] = s.peekCost(ctx, g, cost)
			if res.Allowed {
				g.denied = false // admitted; the peek read what is left
			}
			g.held = !res.Allowed && !g.denied
		}
		if len(gs) == 2 {
			peek()
			continue
		}
		wg.Go(peek)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// giveBack gives g's units back (negative hits) where its algorithm can
// (algorithms.Rule.CheckGiveBack: every rate algorithm) and the store can
// (backend.UnitRefunder, found under any wrappers), and otherwise reads g
// as a check does. Either way
// it never refuses the request: its status reports what is left.
func (s *Service) giveBack(ctx context.Context, g *group) error {
	g.res = backend.Result{Limit: g.rule.alg.Limit}
	if g.rule.alg.Limit > 0 {
		var res backend.Result
		var err error
		// Never more than the limit: a refund frees at most that.
		req := g.req
		req.Cost = min(req.Cost, g.rule.alg.Limit)
		u, ok := backend.As[backend.UnitRefunder](s.store)
		if ok && req.Cost > 0 && g.rule.alg.CheckGiveBack() == nil {
			res, err = u.GiveBack(ctx, req)
		} else {
			req.Cost = 1
			res, err = s.store.Peek(ctx, req)
		}
		if err := s.settle(ctx, g, res, err); err != nil {
			return err
		}
	}
	g.denied = false
	g.res.Allowed, g.res.RetryAfter = true, 0
	return nil
}

// checkOnly reads g for a check-only descriptor (hits 0): on a limit
// charged after the response (WithChargedDomains) it refuses a key with
// nothing left; otherwise, as the reference, it refuses only a key counted
// over its limit, so a key
// exactly at its limit passes (with 0 remaining). It peeks one unit
// against the limit plus one: admitted exactly when the count is at most
// the limit (for a bucket (gcra), whose window sets its rate, with the window grown
// in proportion, so that its emission interval stays). Where that is no
// valid rule, it peeks one unit against the limit itself.
func (s *Service) checkOnly(ctx context.Context, g *group) error {
	if g.charged {
		// A budget charged after the response: spent (or in debt) refuses.
		return s.peekCost(ctx, g, 1)
	}
	l := g.rule.alg.Limit
	req := g.req
	req.Cost = 1
	req.Rule.Limit = l + 1
	if a := algorithms.Lookup(req.Rule.Algorithm); a != nil && a.Refills && l > 0 {
		req.Rule.Window = req.Rule.Window / time.Duration(l) * time.Duration(l+1)
	}
	if req.Rule.Validate() != nil {
		return s.peekCost(ctx, g, 1)
	}
	res, err := s.store.Peek(ctx, req)
	if err == nil {
		res.Limit = l
		res.Remaining = min(max(res.Remaining-1, 0), l)
	}
	return s.settle(ctx, g, res, err)
}

// peek reads g without consuming, setting its result and denial.
func (s *Service) peek(ctx context.Context, g *group) error { return s.peekCost(ctx, g, g.req.Cost) }

// peekCost peeks g for a request of cost.
func (s *Service) peekCost(ctx context.Context, g *group, cost int64) error {
	if g.rule.alg.Limit <= 0 || cost > g.rule.alg.Limit {
		g.denied = true
		g.res = backend.Result{Limit: g.rule.alg.Limit, RetryAfter: g.rule.alg.Window, ResetAfter: g.rule.alg.Window}
		return nil
	}
	req := g.req
	req.Cost = cost
	res, err := s.store.Peek(ctx, req)
	return s.settle(ctx, g, res, err)
}

// take decides g alone (a shadow limit).
func (s *Service) take(ctx context.Context, g *group) error {
	res, err := s.store.Take(ctx, g.req)
	return s.settle(ctx, g, res, err)
}

func (s *Service) settle(ctx context.Context, g *group, res backend.Result, err error) error {
	if err != nil {
		if err := s.storeError(ctx, err); err != nil {
			return err
		}
		s.onFailure(g)
		return nil
	}
	if res.Degraded && s.opts.errorOnFailure {
		return status.Error(codes.Unavailable, "rls: the rate limit store is unavailable")
	}
	g.res, g.denied = res, !res.Allowed
	return nil
}

// storeError turns a store's error into the call's error, or nil when the
// limits' failure policies should answer instead.
func (s *Service) storeError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, algorithms.ErrInvalidRequest) || errors.Is(err, algorithms.ErrInvalidRule):
		return status.Errorf(codes.InvalidArgument, "rls: %v", err)
	case s.opts.errorOnFailure:
		return status.Errorf(codes.Unavailable, "rls: the rate limit store failed: %v", err)
	}
	return nil
}

// onFailure decides g by its failure policy, for a store that failed
// without a fallback store around it: fail_closed refuses, the others
// admit (a local policy needs package fallback's local store).
func (s *Service) onFailure(g *group) {
	l := g.rule.alg.Limit
	if g.req.OnFailure.Mode() == backend.ModeClosed {
		g.denied = true
		g.res = backend.Result{Limit: l, RetryAfter: time.Second, ResetAfter: time.Second, Degraded: true}
		return
	}
	g.denied = false
	g.res = backend.Result{Allowed: true, Limit: l, Remaining: l, Degraded: true}
}

// answer fills the statuses, the overall code, the headers and the stats.
func (s *Service) answer(req *rlsv3.RateLimitRequest, groups []*group, refused bool, resp *rlsv3.RateLimitResponse) {
	// Each descriptor reports the limit that refused, else the one with
	// the least remaining.
	chosen := make([]*group, len(resp.Statuses))
	for _, g := range groups {
		for _, i := range g.descs {
			c := chosen[i]
			if c == nil || (g.denied && !c.denied) || (g.denied == c.denied && g.res.Remaining < c.res.Remaining) {
				chosen[i] = g
			}
		}
	}
	for i, g := range chosen {
		if g == nil {
			continue
		}
		st := resp.Statuses[i]
		st.CurrentLimit = g.rule.current
		st.LimitRemaining = uint32(min(max(g.res.Remaining, 0), math.MaxUint32))
		wait := g.res.ResetAfter
		if g.denied {
			wait = g.res.RetryAfter
			if !g.rule.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		st.DurationUntilReset = durationpb.New(ceilSecond(wait))
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if refused && !s.opts.shadow {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.headers != nil {
		resp.ResponseHeadersToAdd = s.headers(resp.Statuses)
	}
	if s.opts.stats != nil {
		for _, g := range groups {
			st := Stat{Domain: req.GetDomain(), Key: g.stat, Outcome: s.outcome(g), Hits: hitsOf(g)}
			s.countHits(g, &st)
			s.opts.stats(st)
		}
	}
}

// countHits fills st's per-counter hits as the reference's base limiter
// does (checkOverLimitThreshold, checkNearLimitThreshold,
// increaseShadowModeStats), from the count before and after the hits:
// after an admission, the limit less what remains; for a refusal (which
// consumed nothing here), what the limit held plus the hits.
func (s *Service) countHits(g *group, st *Stat) {
	if st.Outcome == Held {
		return
	}
	limit := uint64(max(g.rule.alg.Limit, 0))
	hits := st.Hits
	used := limit - uint64(min(max(g.res.Remaining, 0), int64(limit)))
	// The reference's threshold, in its float32 arithmetic.
	near := uint64(math.Floor(float64(float32(limit) * float32(s.opts.nearRatio))))
	if st.Outcome == Over || st.Outcome == Shadow {
		before, after := used, used+hits
		over := hits
		// A refusal short of the limit (a failure policy's, or an
		// algorithm that counts otherwise) counts all its hits over.
		if before < limit && after > limit {
			over = after - limit
			st.NearLimit = limit - max(near, before)
		}
		st.OverLimit = over
		if st.Outcome == Shadow {
			st.ShadowMode = over
		}
		return
	}
	after := used
	before := after - min(hits, after)
	st.WithinLimit = hits
	if after > near {
		if before >= near {
			st.NearLimit = hits
		} else {
			st.NearLimit = after - near
		}
	}
}

func hitsOf(g *group) uint64 {
	if g.check {
		return 0
	}
	return uint64(g.req.Cost)
}

func (s *Service) outcome(g *group) Outcome {
	switch {
	case g.denied && g.rule.shadow:
		return Shadow
	case g.denied:
		return Over
	case g.held:
		return Held
	}
	l := g.rule.alg.Limit
	if float64(l-g.res.Remaining) > s.opts.nearRatio*float64(l) {
		return Near
	}
	return Within
}
