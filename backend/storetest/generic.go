package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

type genericCase struct {
	name string
	run  func(c *checker, rule algorithms.Rule)
}

// genericCases hold for every algorithm. They get a rule of 5 per 10 s.
func genericCases() []genericCase {
	return []genericCase{
		{"burst", burst},
		{"cost", costAllOrNothing},
		{"peek", peekDoesNotConsume},
		{"reset", reset},
		{"independent_keys", independentKeys},
		{"expiry", expiry},
		{"clock_back", clockBack},
		{"clock_forward", clockForward},
		{"hostile_ids", hostileIDs},
		{"large_values", largeValues},
		{"concurrency", concurrency},
		{"same_as_go_engine", sameAsGoEngine},
	}
}

// at is an offset inside a fixed window, so that no case leans on alignment.
const at = 3700 * time.Millisecond

// takeN takes cost 1 n times at one instant from a key with avail units left,
// and checks each decision and remaining allowance.
func (c *checker) takeN(id string, rule algorithms.Rule, when time.Duration, n, avail int64) bool {
	for i := range n {
		got, ok := c.take(id, rule, when, 1)
		if !ok {
			return false
		}
		wantRemain := max(avail-i-1, 0)
		if got.Allowed != (i < avail) || got.Remaining != wantRemain {
			c.r.Errorf("key %q request %d of %d at %v: got allowed=%v remaining=%d, want allowed=%v remaining=%d",
				short(id), i+1, n, when, got.Allowed, got.Remaining, i < avail, wantRemain)
			return false
		}
	}
	return true
}

func burst(c *checker, rule algorithms.Rule) {
	// Same-millisecond requests must each count.
	if !c.takeN("k", rule, at, rule.Limit+3, rule.Limit) {
		return
	}
	got, ok := c.take("k", rule, at+time.Millisecond, 1)
	if ok && (got.Allowed || got.RetryAfter <= 0 || got.ResetAfter < got.RetryAfter) {
		c.r.Errorf("after a full burst: got %+v, want a denial with 0 < RetryAfter <= ResetAfter", got)
	}
}

func costAllOrNothing(c *checker, rule algorithms.Rule) {
	want := func(what string, got backend.Result, allowed bool, remaining int64) bool {
		if got.Allowed != allowed || got.Remaining != remaining {
			c.r.Errorf("%s: got allowed=%v remaining=%d, want allowed=%v remaining=%d", what, got.Allowed, got.Remaining, allowed, remaining)
			return false
		}
		return true
	}
	steps := []struct {
		cost      int64
		allowed   bool
		remaining int64
	}{{3, true, 2}, {3, false, 2}, {2, true, 0}, {1, false, 0}}
	for _, st := range steps {
		got, ok := c.take("k", rule, at, st.cost)
		if !ok || !want(fmt.Sprintf("cost %d", st.cost), got, st.allowed, st.remaining) {
			return
		}
	}
	got, ok := c.take("whole", rule, at, rule.Limit)
	if ok {
		want("cost = limit on a new key", got, true, 0)
	}
}

func peekDoesNotConsume(c *checker, rule algorithms.Rule) {
	fresh := backend.Result{Allowed: true, Limit: rule.Limit, Remaining: rule.Limit}
	for i := range 10 {
		got, ok := c.peek("k", rule, at, 1)
		if !ok || !c.expect(fmt.Sprintf("peek %d on a new key", i), got, fresh) {
			return
		}
	}
	if !c.takeN("k", rule, at, rule.Limit, rule.Limit) {
		return
	}
	p, ok1 := c.peek("k", rule, at+time.Second, 1)
	t, ok2 := c.take("k", rule, at+time.Second, 1)
	if ok1 && ok2 {
		c.expect("Peek then Take on a full key", p, t)
	}
	p2, ok := c.peek("k", rule, at+time.Second, 2)
	if ok && (p2.Allowed || p2.RetryAfter < p.RetryAfter) {
		c.r.Errorf("Peek cost 2 on a full key: got %+v, want a denial no sooner than cost 1 (%v)", p2, p.RetryAfter)
	}
}

func reset(c *checker, rule algorithms.Rule) {
	if !c.takeN("k", rule, at, rule.Limit+1, rule.Limit) || !c.reset("k", rule, at) {
		return
	}
	if !c.takeN("k", rule, at, rule.Limit+1, rule.Limit) {
		return
	}
	c.reset("never-used", rule, at)
}

func independentKeys(c *checker, rule algorithms.Rule) {
	if !c.takeN("a", rule, at, rule.Limit+1, rule.Limit) {
		return
	}
	if !c.takeN("b", rule, at, 1, rule.Limit) || !c.takeN("a-", rule, at, 1, rule.Limit) || !c.takeN("A", rule, at, 1, rule.Limit) {
		return
	}
	other := *c
	other.prefix = c.prefix + "other:"
	if !other.takeN("a", rule, at, 1, rule.Limit) {
		return
	}
	for _, alg := range algorithms.Names() {
		if alg != rule.Algorithm {
			r2 := rule
			r2.Algorithm = alg
			if !c.takeN("a", r2, at, 1, rule.Limit) {
				return
			}
		}
	}
}

func expiry(c *checker, rule algorithms.Rule) {
	if !c.takeN("k", rule, at, rule.Limit, rule.Limit) {
		return
	}
	// Every algorithm has forgotten a key two windows after its last use.
	later := at + 2*rule.Window + time.Millisecond
	got, ok := c.peek("k", rule, later, 1)
	if ok && c.expect("two windows later", got, backend.Result{Allowed: true, Limit: rule.Limit, Remaining: rule.Limit}) {
		c.takeN("k", rule, later, rule.Limit+1, rule.Limit)
	}
}

func clockBack(c *checker, rule algorithms.Rule) {
	t := 20*time.Second + at
	if !c.takeN("full", rule, t, rule.Limit, rule.Limit) {
		return
	}
	if rule.PerWindow() {
		// A fixed window counts each request in the window holding its
		// time (one key per window in Redis, as envoyproxy/ratelimit
		// counts): 5 s back is the window before, counted apart.
		if c.takeN("full", rule, t-5*time.Second, rule.Limit+1, rule.Limit) {
			c.takeN("full", rule, t, 1, 0)
		}
		return
	}
	// Going back 5 s gives no extra allowance.
	if !c.takeN("full", rule, t-5*time.Second, 2, 0) {
		return
	}
	got, ok := c.peek("full", rule, t-5*time.Second, 1)
	if ok && (got.Allowed || got.Remaining != 0 || got.RetryAfter <= 0) {
		c.r.Errorf("peek after going back: got %+v, want a denial with remaining 0", got)
	}
	// Partly used: the total across the jump stays at the limit.
	if c.takeN("part", rule, t, 3, rule.Limit) {
		c.takeN("part", rule, t-5*time.Second, rule.Limit, rule.Limit-3)
	}
}

func clockForward(c *checker, rule algorithms.Rule) {
	if !c.takeN("k", rule, at, rule.Limit, rule.Limit) {
		return
	}
	hour := at + time.Hour
	if !c.takeN("k", rule, hour, 1, rule.Limit) {
		return
	}
	if rule.PerWindow() {
		// 5 s back is the window before, counted apart (see clockBack).
		c.takeN("k", rule, hour-5*time.Second, rule.Limit+1, rule.Limit)
		return
	}
	// Back 5 s from there: the request recorded an hour on still counts.
	c.takeN("k", rule, hour-5*time.Second, rule.Limit, rule.Limit-1)
}

// HostileIDs are key ids that stores must keep working and apart: Redis hash
// tag delimiters, empty-looking tags, unicode, binary bytes and huge ids that
// differ only at the end.
func HostileIDs() []string {
	huge := strings.Repeat("a", 1<<20)
	return []string{
		"{", "}", "{}", "}{", "{{}}", "a{b}c", "}a{", "{a}", "a}", "x}:sl", ":sl", "k}:sc",
		"ключ🔑", "\x00", "\x00\xff\xfe", " ", "\n",
		huge, huge + "b", huge[:1<<19] + "{}" + huge[:1<<19],
	}
}

func hostileIDs(c *checker, rule algorithms.Rule) {
	// Each id takes the full limit in turn: if two ids shared state, the
	// later one would be denied early.
	for _, id := range HostileIDs() {
		if !c.takeN(id, rule, at, rule.Limit+1, rule.Limit) {
			return
		}
	}
	for _, id := range HostileIDs() {
		got, ok := c.peek(id, rule, at, 1)
		if !ok || got.Remaining != 0 {
			c.r.Errorf("peek %q: remaining %d, want 0", short(id), got.Remaining)
			return
		}
		if !c.reset(id, rule, at) {
			return
		}
	}
}

func largeValues(c *checker, rule algorithms.Rule) {
	rule.Limit = algorithms.MaxLimit
	rule.Window = algorithms.MaxWindow
	if bound := rule.LimitBound(); bound < rule.Limit {
		// The logs' memory and GCRA's arithmetic bound their limits.
		rule.Limit = bound
	}
	got, ok := c.take("k", rule, at, rule.Limit-1)
	if !ok || got.Remaining != 1 || !got.Allowed {
		c.r.Errorf("cost limit-1 (%d): got %+v, want allowed with remaining 1", rule.Limit-1, got)
		return
	}
	if c.takeN("k", rule, at+time.Millisecond, 2, 1) {
		got, ok := c.take("k", rule, at+2*time.Millisecond, 1)
		if ok && (got.Allowed || got.RetryAfter <= 0 || got.RetryAfter > 2*rule.Window) {
			c.r.Errorf("after the limit: got %+v, want a denial with 0 < RetryAfter <= 2 windows", got)
		}
	}
}

// concurrency has 16 callers race for one key of limit 100 at one instant:
// exactly 100 must be admitted.
func concurrency(c *checker, rule algorithms.Rule) {
	rule.Limit = 100
	const callers, each = 16, 20
	var admitted atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				res, err := c.store.Take(c.ctx, c.request("hot", rule, at, 1))
				if err != nil {
					failed.Store(true)
					c.r.Errorf("concurrent Take: %v", err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if !failed.Load() && admitted.Load() != rule.Limit {
		c.r.Errorf("%d callers x %d requests on one key: %d admitted, want exactly %d", callers, each, admitted.Load(), rule.Limit)
	}
}

// sameAsGoEngine replays a random sequence (three keys, random costs, Peek,
// Reset, the clock standing still, creeping, jumping back up to 5 s and
// forward an hour, the limit and the window changing) and compares every
// result with the algorithms' Go engine.
func sameAsGoEngine(c *checker, rule algorithms.Rule) {
	rng := rand.New(rand.NewPCG(uint64(len(rule.Algorithm)), 42))
	rule.Window = 2 * time.Second
	rule.Limit = 7
	w := &goEngineWalk{c: c, rng: rng, rule: rule, states: map[string]*algorithms.State{}, leases: map[string][]int64{},
		now: 5 * time.Second, latest: 5 * time.Second}
	for i := range 600 {
		w.advance()
		if !w.step(i) {
			return
		}
	}
}

// goEngineWalk is the state of sameAsGoEngine's random walk: the Go
// engine's state per id beside the store's.
type goEngineWalk struct {
	c             *checker
	rng           *rand.Rand
	rule          algorithms.Rule
	states        map[string]*algorithms.State
	leases        map[string][]int64 // the leases granted per id
	now, latest   time.Duration
	windowChanged bool
}

// goEngineIDs are the walk's ids, two with braces.
var goEngineIDs = []string{"x", "y{", "}z"}

// advance moves the clock (mostly forward, sometimes back or an hour
// ahead) or changes the rule.
func (w *goEngineWalk) advance() {
	switch p := w.rng.IntN(100); {
	case p < 30:
	case p < 90:
		w.now += time.Duration(w.rng.IntN(400)) * time.Millisecond
	case p < 97:
		w.now -= time.Duration(w.rng.IntN(5000)) * time.Millisecond
	case p < 98:
		w.now += time.Hour
	case p < 99:
		w.rule.Limit = int64(3 + w.rng.IntN(8))
	default:
		w.rule.Window = time.Duration(700+w.rng.IntN(3000)) * time.Millisecond
		w.windowChanged = true
	}
	w.now = max(w.now, 0)
	floorRule := w.rule
	if w.windowChanged {
		floorRule.Window = 0 // the window changed: never back again
	}
	w.now, w.latest = floorFixed(w.now, w.latest, floorRule)
}

// step runs one random call on the store and the Go engine, and reports
// whether they agreed (false: reported, stop).
func (w *goEngineWalk) step(i int) bool {
	c, rule, now := w.c, w.rule, w.now
	id := goEngineIDs[w.rng.IntN(len(goEngineIDs))]
	st := w.states[id]
	if st == nil {
		st = &algorithms.State{}
		w.states[id] = st
	}
	cost := int64(1 + w.rng.IntN(int(rule.Limit)))
	if w.rng.IntN(2) == 0 {
		cost = 1
	}
	nowMs := base.Add(now).UnixMilli()
	leases := w.leases[id]
	switch p := w.rng.IntN(100); {
	case p < 4:
		delete(w.states, id)
		return c.reset(id, rule, now)
	case p < 20:
		want := rule.Peek(st, nowMs, cost)
		got, ok := c.peek(id, rule, now, cost)
		return w.expect(i, "Peek", id, st, cost, want, got, ok)
	case p < 35 && rule.HoldsLeases() && len(leases) > 0:
		// Release a lease granted earlier (held, expired or released).
		lease := leases[w.rng.IntN(len(leases))]
		wantHeld := rule.Release(st, nowMs, lease)
		held, ok := c.release(id, rule, now, cost, lease)
		if ok && held != wantHeld {
			c.r.Errorf("step %d: Release(%q, lease %d) at %v: held %v, want %v", i, id, lease, now, held, wantHeld)
		}
		return ok && held == wantHeld
	case p < 45 && rule.HoldsLeases() && len(leases) > 0:
		lease := leases[w.rng.IntN(len(leases))]
		want := rule.Renew(st, nowMs, lease, cost)
		got, ok := c.renew(id, rule, now, cost, lease)
		return w.expect(i, "Renew", id, st, cost, want, got, ok)
	default:
		want := rule.Take(st, nowMs, cost)
		got, ok := c.take(id, rule, now, cost)
		return w.expect(i, "Take", id, st, cost, want, got, ok)
	}
}

// expect checks the store's answer got (ok: it answered) to op of step i
// is the Go engine's, want, and records a lease it granted.
func (w *goEngineWalk) expect(i int, op, id string, st *algorithms.State, cost int64, want algorithms.Outcome, got backend.Result, ok bool) bool {
	rule := w.rule
	what := fmt.Sprintf("step %d: %s(%q, limit %d, cost %d) at %v", i, op, id, rule.Limit, cost, w.now)
	wantRes := backend.ResultOf(rule, want)
	if want.Allowed && op != "Peek" && rule.HoldsLeases() {
		wantRes.Lease = rule.ChargedAt(st, base.Add(w.now).UnixMilli())
		w.leases[id] = append(w.leases[id], wantRes.Lease)
	}
	return ok && w.c.expect(what, got, wantRes)
}

// invalidInput checks that bad requests are errors wrapping the sentinels.
func invalidInput(c *checker) {
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Second}
	good := c.request("k", rule, at, 1)
	bad := map[string]struct {
		req  backend.Request
		want error
	}{}
	add := func(name string, want error, edit func(r *backend.Request)) {
		r := good
		edit(&r)
		bad[name] = struct {
			req  backend.Request
			want error
		}{r, want}
	}
	add("cost 0", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Cost = 0 })
	add("cost -1", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Cost = -1 })
	add("cost above limit", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Cost = 6 })
	add("empty id", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Key.ID = "" })
	add("brace in prefix", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Key.Prefix = "api{x}:" })
	add("before the epoch", algorithms.ErrInvalidRequest, func(r *backend.Request) { r.Now = time.Unix(-1, 0) })
	add("limit 0", algorithms.ErrInvalidRule, func(r *backend.Request) { r.Rule.Limit = 0 })
	add("window 0", algorithms.ErrInvalidRule, func(r *backend.Request) { r.Rule.Window = 0 })
	add("unknown algorithm", algorithms.ErrInvalidRule, func(r *backend.Request) { r.Rule.Algorithm = "leaky" })
	for name, b := range bad {
		if _, err := c.store.Take(c.ctx, b.req); !errors.Is(err, b.want) {
			c.r.Errorf("Take with %s: got error %v, want one wrapping %v", name, err, b.want)
		}
		if _, err := c.store.Peek(c.ctx, b.req); !errors.Is(err, b.want) {
			c.r.Errorf("Peek with %s: got error %v, want one wrapping %v", name, err, b.want)
		}
	}
	if err := c.store.Reset(c.ctx, backend.Key{Prefix: c.prefix}, rule, base); !errors.Is(err, algorithms.ErrInvalidRequest) {
		c.r.Errorf("Reset with an empty id: got error %v, want one wrapping %v", err, algorithms.ErrInvalidRequest)
	}
}
