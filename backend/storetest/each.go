package storetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// takeAllEach replays random TakeAll calls of 2 or 3 rules (every
// algorithm; costs above 1; the clock creeping and going back) and checks
// the each it hands back (backend.TakeEach): one result per request, in request order, each what the Go
// engine decided for that request (its take when all were admitted, its
// check when not), and each equal to what a Peek reports right after: a
// Peek of the request's cost after a denial (nothing was consumed), the
// Remaining of a Peek of one unit after an admission (what is left).
func takeAllEach(c *checker) {
	rng := rand.New(rand.NewPCG(3, 5))
	pool := eachPool(rng)
	states := map[string]*algorithms.State{}
	now := 5 * time.Second
	latest := now
	admitted, denied := 0, 0
	for step := range 300 {
		var parts []part
		var cost int64
		now, parts, cost = replay{stay: 40, creep: 95, maxCreep: 250, maxBack: 2000, minParts: 2, moreParts: 2, anyCostOneIn: 3}.next(rng, pool, now)
		now, latest = floorFixed(now, latest, poolRules(pool)...)
		want, all := goEngineTakeAll(states, parts, base.Add(now).UnixMilli(), cost)
		_, each, ok := c.takeEach(parts, now, cost)
		if !ok {
			return
		}
		what := fmt.Sprintf("step %d: TakeEach(%v, cost %d) at %v", step, parts, cost, now)
		if len(each) != len(parts) {
			c.r.Errorf("%s: each has %d results, want one per request (%d)", what, len(each), len(parts))
			return
		}
		if all {
			admitted++
		} else {
			denied++
		}
		if !checkEach(c, what, parts, each, want, all, now, cost) {
			return
		}
	}
	if admitted == 0 || denied == 0 {
		c.r.Errorf("take_all/each: %d admitted and %d denied calls; the sequence must exercise both", admitted, denied)
	}
}

// eachPool is a part per rate algorithm, of random limits and windows.
func eachPool(rng *rand.Rand) []part {
	var pool []part
	for i, alg := range algorithms.Names() {
		if algorithms.Lookup(alg).HoldsLeases() {
			continue // a lease's Remaining counts leases, and one call holds one
		}
		pool = append(pool, part{
			prefix: fmt.Sprintf("each:%s:", alg),
			id:     fmt.Sprint("id", i%2),
			rule:   algorithms.Rule{Algorithm: alg, Limit: int64(3 + rng.IntN(4)), Window: time.Duration(1000+rng.IntN(1000)) * time.Millisecond},
		})
	}
	return pool
}

// goEngineTakeAll is TakeAll of parts on the Go engine's states: each
// part's result, and whether all admitted (then all took cost).
func goEngineTakeAll(states map[string]*algorithms.State, parts []part, nowMs, cost int64) ([]backend.Result, bool) {
	want := make([]backend.Result, len(parts))
	all := true
	for k, p := range parts {
		s := states[p.prefix+p.id]
		if s == nil {
			s = &algorithms.State{}
			states[p.prefix+p.id] = s
		}
		want[k] = backend.ResultOf(p.rule, p.rule.Peek(s, nowMs, cost))
		all = all && want[k].Allowed
	}
	if all {
		for k, p := range parts {
			want[k] = backend.ResultOf(p.rule, p.rule.Take(states[p.prefix+p.id], nowMs, cost))
		}
	}
	return want, all
}

// checkEach checks each result of a TakeAll (what) against the Go
// engine's (want) and against a Peek right after: admitted (all), what is
// left; refused, what a request of its cost would get. It reports whether
// all agreed (false: reported, stop).
func checkEach(c *checker, what string, parts []part, each, want []backend.Result, all bool, now time.Duration, cost int64) bool {
	for k, p := range parts {
		e := each[k]
		if !c.expect(fmt.Sprintf("%s: Each[%d] against the Go engine", what, k), e, want[k]) {
			return false
		}
		peekCost := cost
		if all {
			peekCost = 1
		}
		sub := *c
		sub.prefix = c.prefix + p.prefix
		peek, ok := sub.peek(p.id, p.rule, now, peekCost)
		if !ok {
			return false
		}
		if all && e.Remaining != peek.Remaining {
			c.r.Errorf("%s: admitted, Each[%d].Remaining %d, but a Peek right after reports %d", what, k, e.Remaining, peek.Remaining)
			return false
		}
		if !all && !c.expect(fmt.Sprintf("%s: denied, Each[%d] against a Peek of its cost", what, k), e, peek) {
			return false
		}
	}
	return true
}
