package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// The TakeAll cases: several rules on several keys, all or nothing.
func multiCases() []testCase {
	return []testCase{
		{"take_all/guard", takeAllGuard},
		{"take_all/same_as_go_engine", takeAllSameAsGoEngine},
		{"take_all/each", takeAllEach},
		{"take_all/concurrency", takeAllConcurrency},
		{"take_all/invalid_input", takeAllInvalid},
	}
}

// part is one rule of a TakeAll call, on its own prefix.
type part struct {
	prefix, id string
	rule       algorithms.Rule
}

func (c *checker) takeAll(parts []part, at time.Duration, cost int64) (backend.Result, bool) {
	res, err := c.store.TakeAll(c.ctx, c.requests(parts, at, cost))
	if err != nil {
		c.r.Errorf("TakeAll(%v, at %v, cost %d): unexpected error: %v", parts, at, cost, err)
		return res, false
	}
	return res, true
}

// takeEach is takeAll by backend.TakeEach: the result and every part's.
func (c *checker) takeEach(parts []part, at time.Duration, cost int64) (backend.Result, []backend.Result, bool) {
	res, each, err := backend.TakeEach(c.ctx, c.store, c.requests(parts, at, cost))
	if err != nil {
		c.r.Errorf("TakeEach(%v, at %v, cost %d): unexpected error: %v", parts, at, cost, err)
		return res, nil, false
	}
	return res, each, true
}

// requests are parts' requests at at of cost each.
func (c *checker) requests(parts []part, at time.Duration, cost int64) []backend.Request {
	reqs := make([]backend.Request, len(parts))
	for i, p := range parts {
		reqs[i] = backend.Request{Key: backend.Key{Prefix: c.prefix + p.prefix, ID: p.id}, Rule: p.rule, Now: base.Add(at), Cost: cost}
	}
	return reqs
}

func (c *checker) peekPart(p part, at time.Duration) (backend.Result, bool) {
	sub := *c
	sub.prefix = c.prefix + p.prefix
	return sub.peek(p.id, p.rule, at, 1)
}

// takeAllGuard is a limiter with a guard: 3 per 10 s (sliding log) and 4
// per hour (fixed window) on one id. A denial by either consumes nothing
// from the other, and the Result names the rule it describes.
func takeAllGuard(c *checker) {
	main := part{"main:", "u", algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 3, Window: 10 * time.Second}}
	guard := part{"guard:", "u", algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 4, Window: time.Hour}}
	both := []part{main, guard}
	type step struct {
		at        time.Duration
		allowed   bool
		rule      int
		remaining int64
		retry     time.Duration
	}
	steps := []step{
		{at, true, 0, 2, 0},
		{at, true, 0, 1, 0},
		{at + time.Second, true, 0, 0, 0},
		{at + 2*time.Second, false, 0, 0, 8 * time.Second}, // the main limit denies
		{at + 10*time.Second, true, 1, 0, 0},               // the guard has the least left
		{at + 11*time.Second, false, 1, 0, time.Hour - at - 11*time.Second},
	}
	for i, st := range steps {
		got, ok := c.takeAll(both, st.at, 1)
		if !ok {
			return
		}
		if got.Allowed != st.allowed || got.Rule != st.rule || got.Remaining != st.remaining || got.RetryAfter != st.retry {
			c.r.Errorf("step %d at %v: got allowed=%v rule=%d remaining=%d retry=%v, want allowed=%v rule=%d remaining=%d retry=%v",
				i, st.at, got.Allowed, got.Rule, got.Remaining, got.RetryAfter, st.allowed, st.rule, st.remaining, st.retry)
			return
		}
	}
	// The guard's denial took nothing from the main limit: only the entry
	// of at+10s is live at at+11s.
	if got, ok := c.peekPart(main, at+11*time.Second); ok && got.Remaining != 2 {
		c.r.Errorf("main limit after the guard denied: remaining %d, want 2 (the denial must not consume it)", got.Remaining)
	}
	// The main limit's denial took nothing from the guard: 4 admissions.
	if got, ok := c.peekPart(guard, at+11*time.Second); ok && got.Remaining != 0 {
		c.r.Errorf("guard after 4 admissions: remaining %d, want 0", got.Remaining)
	}
}

// takeAllSameAsGoEngine replays random TakeAll calls over a pool of rules
// (every algorithm, per user, per tenant and global keys; the clock
// creeping, standing still and going back) and compares each Result with
// the Go engine: check every rule, take all only when all admit.
func takeAllSameAsGoEngine(c *checker) {
	rng := rand.New(rand.NewPCG(7, 11))
	names := algorithms.Names()
	var pool []part
	for i, scope := range []string{"user:", "tenant:", "global:"} {
		for j := range 2 {
			alg := names[(i*2+j)%len(names)]
			pool = append(pool, part{
				prefix: fmt.Sprintf("%s%s:", scope, alg),
				id:     fmt.Sprintf("id%d", j),
				rule:   algorithms.Rule{Algorithm: alg, Limit: int64(4 + rng.IntN(6)), Window: time.Duration(1000+rng.IntN(2000)) * time.Millisecond},
			})
		}
	}
	states := map[string]*algorithms.State{}
	state := func(p part) *algorithms.State {
		k := p.prefix + p.id
		if states[k] == nil {
			states[k] = &algorithms.State{}
		}
		return states[k]
	}
	now := 5 * time.Second
	latest := now
	for i := range 400 {
		var parts []part
		var cost int64
		now, parts, cost = replay{stay: 30, creep: 92, maxCreep: 300, maxBack: 3000, minParts: 1, moreParts: 3, anyCostOneIn: 4}.next(rng, pool, now)
		now, latest = floorFixed(now, latest, poolRules(pool)...)
		nowMs := base.Add(now).UnixMilli()
		results := make([]backend.Result, len(parts))
		all := true
		for k, p := range parts {
			out := p.rule.Peek(state(p), nowMs, cost)
			results[k] = backend.ResultOf(p.rule, out)
			all = all && out.Allowed
		}
		if all {
			for k, p := range parts {
				results[k] = backend.ResultOf(p.rule, p.rule.Take(state(p), nowMs, cost))
			}
		}
		want := backend.Combine(results)
		got, ok := c.takeAll(parts, now, cost)
		if !ok || !c.expect(fmt.Sprintf("step %d: TakeAll(%v, cost %d) at %v", i, parts, cost, now), got, want) {
			return
		}
	}
}

// takeAllConcurrency has 16 callers of 4 users race through a per-user
// limit of 30 and a global limit of 100: exactly 100 are admitted, no user
// gets more than 30, and every key holds exactly what was admitted on it
// (a denial by one rule took nothing from the other).
func takeAllConcurrency(c *checker) {
	const users, callers, each = 4, 16, 20
	user := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 30, Window: 10 * time.Second}
	global := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 100, Window: 10 * time.Second}
	var admitted [users]atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := i % users
			parts := []part{{"user:", fmt.Sprint("u", u), user}, {"global:", "all", global}}
			for range each {
				res, ok := c.takeAll(parts, at, 1)
				if !ok {
					failed.Store(true)
					return
				}
				if res.Allowed {
					admitted[u].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	total := int64(0)
	for u := range users {
		n := admitted[u].Load()
		total += n
		got, ok := c.peekPart(part{"user:", fmt.Sprint("u", u), user}, at)
		if !ok {
			return
		}
		if n > user.Limit || got.Remaining != user.Limit-n {
			c.r.Errorf("user %d: %d admitted, key has %d left; want at most %d admitted and %d left",
				u, n, got.Remaining, user.Limit, user.Limit-n)
		}
	}
	if total != global.Limit {
		c.r.Errorf("%d callers x %d requests: %d admitted, want exactly %d (the global limit)", callers, each, total, global.Limit)
	}
	if got, ok := c.peekPart(part{"global:", "all", global}, at); ok && got.Remaining != global.Limit-total {
		c.r.Errorf("global key has %d left after %d admissions, want %d", got.Remaining, total, global.Limit-total)
	}
}

// takeAllInvalid checks TakeAll's bad input.
func takeAllInvalid(c *checker) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Second}
	good := c.request("k", rule, at, 1)
	other := c.request("other", rule, at, 1)
	later := other
	later.Now = later.Now.Add(time.Millisecond)
	bad := good
	bad.Cost = 6
	many := make([]backend.Request, backend.MaxRequests+1)
	for i := range many {
		many[i] = c.request(fmt.Sprint("k", i), rule, at, 1)
	}
	for name, reqs := range map[string][]backend.Request{
		"no requests":        nil,
		"too many":           many,
		"same key twice":     {good, good},
		"different times":    {good, later},
		"cost above a limit": {other, bad},
	} {
		if _, err := c.store.TakeAll(c.ctx, reqs); !errors.Is(err, algorithms.ErrInvalidRequest) {
			c.r.Errorf("TakeAll with %s: got error %v, want one wrapping %v", name, err, algorithms.ErrInvalidRequest)
		}
	}
	// Nothing was taken by the rejected calls.
	if got, ok := c.peek("other", rule, at, 1); ok && got.Remaining != rule.Limit {
		c.r.Errorf("after rejected TakeAll calls: remaining %d, want %d", got.Remaining, rule.Limit)
	}
}

// replay is how a random TakeAll replay steps: the clock stands still (p <
// stay of 100), creeps up to maxCreep ms (p < creep) or goes back up to
// maxBack ms; minParts plus up to moreParts-1 distinct parts of the pool;
// cost 1, or one time in anyCostOneIn any cost the smallest limit allows.
type replay struct {
	stay, creep, maxCreep, maxBack int
	minParts, moreParts            int
	anyCostOneIn                   int
}

func (r replay) next(rng *rand.Rand, pool []part, now time.Duration) (time.Duration, []part, int64) {
	switch p := rng.IntN(100); {
	case p < r.stay:
	case p < r.creep:
		now += time.Duration(rng.IntN(r.maxCreep)) * time.Millisecond
	default:
		now = max(now-time.Duration(rng.IntN(r.maxBack))*time.Millisecond, 0)
	}
	perm := rng.Perm(len(pool))[:r.minParts+rng.IntN(r.moreParts)]
	parts := make([]part, len(perm))
	minLimit := algorithms.MaxLimit
	for k, idx := range perm {
		parts[k] = pool[idx]
		minLimit = min(minLimit, parts[k].rule.Limit)
	}
	cost := int64(1)
	if rng.IntN(r.anyCostOneIn) == 0 {
		cost = 1 + rng.Int64N(minLimit)
	}
	return now, parts, cost
}

// poolRules returns the rules of pool's parts.
func poolRules(pool []part) []algorithms.Rule {
	rules := make([]algorithms.Rule, len(pool))
	for i := range pool {
		rules[i] = pool[i].rule
	}
	return rules
}
