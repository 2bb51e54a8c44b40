package modeltest

// Stalls driven through fallback stacks: the primary (the memory store, or
// Redis through either client) answers, then fails for a while, then
// answers again, at random; requests of random cost, Peeks, GiveBacks and
// TakeAlls over a few keys at random times that cross windows, under
// LocalPolicy(n) for a random n. The bound checked at every degraded
// admission: while the key's last primary answer (r left at time at, full
// again at reset) binds (at <= now < reset), the units admitted by policy
// since that answer, less those given back by policy, are at most
// floor(avail/n), avail being r (for gcra, r plus the refill since at). A
// key the primary never answered for is admitted its policy's share
// (ceil(limit/n)), the control that local limiting still works. The
// control run without baselines (fallback.WithBaselines(0)) is caught by
// the same bound.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
)

// switchable is a primary that fails every call while down is set, as a
// stalled Redis does once its calls miss their deadline.
type switchable struct {
	backend.Store
	down atomic.Bool
}

var errStalled = errors.New("modeltest: primary stalled")

func (s *switchable) Unwrap() backend.Store { return s.Store }

func (s *switchable) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errStalled
	}
	return s.Store.Take(ctx, req)
}

func (s *switchable) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errStalled
	}
	return s.Store.Peek(ctx, req)
}

func (s *switchable) TakeAll(ctx context.Context, reqs []backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errStalled
	}
	return s.Store.TakeAll(ctx, reqs)
}

// TakeEach passes on how each request stands, as a Redis store says: a
// wrapper that is no backend.EachTaker hides it, and fallback then
// records only the binding request's answer as a baseline.
func (s *switchable) TakeEach(ctx context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, nil, errStalled
	}
	return backend.TakeEach(ctx, s.Store, reqs)
}

func (s *switchable) GiveBack(ctx context.Context, req backend.Request) (backend.Result, error) {
	if s.down.Load() {
		return backend.Result{}, errStalled
	}
	return s.Store.(backend.UnitRefunder).GiveBack(ctx, req)
}

// blipKey is what the driver knows of one key: the primary's last answer
// and what the policy admitted since.
type blipKey struct {
	answered          bool
	at, left, resetAt int64
	policyNet         int64 // admitted by policy since the answer, less given back
}

// blipRun drives one algorithm over one stack.
type blipRun struct {
	rng     *rand.Rand
	primary *switchable
	fb      *fallback.Store
	rule    algorithms.Rule
	n       int64
	prefix  string
	keys    []blipKey
	now     int64
	freshOK int // stalls whose never-seen key was admitted its share
}

func (r *blipRun) key(i int) backend.Key {
	return backend.Key{Prefix: r.prefix, ID: fmt.Sprintf("k%d", i)}
}

// answered records a primary answer for key i.
func (r *blipRun) answered(i int, res backend.Result) {
	k := &r.keys[i]
	if k.answered && (r.now < k.at || (r.now == k.at && res.Remaining >= k.left)) {
		return // as the store keeps it: older news, or more left in the same ms
	}
	*k = blipKey{answered: true, at: r.now, left: res.Remaining,
		resetAt: r.now + res.ResetAfter.Milliseconds()}
}

// bound is floor(avail/n) for key i at now, and whether the answer binds.
func (r *blipRun) bound(i int) (int64, bool) {
	k := &r.keys[i]
	if !k.answered || r.now >= k.resetAt || r.now < k.at {
		return 0, false
	}
	avail := k.left
	if algorithms.Lookup(r.rule.Algorithm).Refills {
		avail = min(r.rule.Limit, avail+(r.now-k.at)*r.rule.Limit/r.rule.Window.Milliseconds())
	}
	return max(avail, 0) / r.n, true
}

// degraded checks a degraded answer for key i of cost (admitted, or given
// back when giveBack).
func (r *blipRun) degraded(i int, res backend.Result, cost int64, giveBack bool) error {
	k := &r.keys[i]
	b, binds := r.bound(i)
	if !binds {
		if k.answered && r.now >= k.resetAt {
			k.answered = false // the answer no longer binds: the local store decides
		}
		return nil
	}
	if giveBack {
		k.policyNet = max(k.policyNet-cost, 0)
		return nil
	}
	if !res.Allowed {
		return nil
	}
	k.policyNet += cost
	if k.policyNet > b {
		return fmt.Errorf("%s key %d at %d: %d units admitted by policy since the primary's answer (%d left at %d, reset at %d), more than floor(avail/%d) = %d",
			r.rule.Algorithm, i, r.now, k.policyNet, k.left, k.at, k.resetAt, r.n, b)
	}
	return nil
}

func (r *blipRun) steps(ctx context.Context, n int) error {
	down := 0
	for step := range n {
		if down > 0 {
			down--
			if down == 0 {
				r.primary.down.Store(false)
			}
		} else if r.rng.IntN(25) == 0 {
			down = 5 + r.rng.IntN(40)
			r.primary.down.Store(true)
			if err := r.freshShare(ctx, step); err != nil {
				return err
			}
		}
		w := r.rule.Window.Milliseconds()
		switch r.rng.IntN(30) {
		case 0:
			r.now += w/2 + r.rng.Int64N(w) // across a window
		default:
			r.now += r.rng.Int64N(w / 40)
		}
		i := r.rng.IntN(len(r.keys))
		cost := 1 + r.rng.Int64N(3)
		req := backend.Request{Key: r.key(i), Rule: r.rule, Now: time.UnixMilli(r.now), Cost: cost, OnFailure: backend.LocalPolicy(int(r.n))}
		var res backend.Result
		var err error
		op := r.rng.IntN(10)
		switch {
		case op < 6:
			res, err = r.fb.Take(ctx, req)
		case op < 7:
			res, err = r.fb.Peek(ctx, req)
			cost = 0
		case op < 8:
			res, err = r.fb.GiveBack(ctx, req)
		default:
			j := (i + 1 + r.rng.IntN(len(r.keys)-1)) % len(r.keys)
			req2 := req
			req2.Key = r.key(j)
			var each []backend.Result
			res, each, err = r.fb.TakeEach(ctx, []backend.Request{req, req2})
			if err != nil {
				return fmt.Errorf("step %d: TakeAll: %w", step, err)
			}
			for x, idx := range []int{i, j} {
				switch {
				case !res.Degraded && each != nil:
					r.answered(idx, each[x])
				case res.Degraded:
					if err := r.degraded(idx, res, cost, false); err != nil {
						return fmt.Errorf("step %d (TakeAll): %w", step, err)
					}
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if !res.Degraded {
			r.answered(i, res)
			continue
		}
		if cost == 0 {
			continue // a Peek admits nothing
		}
		if err := r.degraded(i, res, cost, op == 7); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return nil
}

// freshShare is the control that local limiting works: a key the primary
// never answered for is admitted exactly its policy's share, ceil(limit/n),
// at one instant.
func (r *blipRun) freshShare(ctx context.Context, step int) error {
	share := (r.rule.Limit + r.n - 1) / r.n
	req := backend.Request{Key: backend.Key{Prefix: r.prefix, ID: fmt.Sprintf("fresh%d", step)}, Rule: r.rule,
		Now: time.UnixMilli(r.now), Cost: 1, OnFailure: backend.LocalPolicy(int(r.n))}
	for j := range share + 1 {
		res, err := r.fb.Take(ctx, req)
		if err != nil {
			return err
		}
		if !res.Degraded || res.Allowed != (j < share) {
			return fmt.Errorf("step %d: a never-seen key's Take %d of its share %d: allowed %v, degraded %v", step, j+1, share, res.Allowed, res.Degraded)
		}
	}
	r.freshOK++
	return nil
}

func newBlipRun(t *testing.T, primary backend.Store, alg algorithms.Name, seed uint64, opts ...fallback.Option) *blipRun {
	rng := rand.New(rand.NewPCG(seed, 32))
	sw := &switchable{Store: primary}
	fb, err := fallback.New(sw, append([]fallback.Option{fallback.WithOpenTimeout(time.Millisecond), fallback.WithTimeout(time.Minute),
		fallback.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &blipRun{
		rng: rng, primary: sw, fb: fb,
		rule:   algorithms.Rule{Algorithm: alg, Limit: 6 + rng.Int64N(20), Window: time.Minute},
		n:      1 + rng.Int64N(3),
		prefix: fmt.Sprintf("blipmodel:%d:%d:%s:", time.Now().UnixNano(), seed, alg),
		keys:   make([]blipKey, 4),
		now:    time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(),
	}
}

// blipPrimaries are the primaries the stalls are driven over: the memory
// store, and Redis through each client when redis-server is installed.
func blipPrimaries(t *testing.T) map[string]backend.Store {
	out := map[string]backend.Store{"memory": newMemory(t)}
	gc, rc, ok := redisClients(t)
	if !ok {
		return out
	}
	gs, err := goredisstore.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rueidisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	out["goredis"], out["rueidis"] = gs, rs
	return out
}

// TestBlipModel drives stalls through fallback over every primary, for
// every rate algorithm of the registry (a bucket's bound counts its refill:
// algorithms.Algorithm.Refills), and checks the bound at every degraded
// admission.
func TestBlipModel(t *testing.T) {
	base := seed(t)
	n := steps(t, 800)
	t.Logf("seed %d (LIMITKIT_MODEL_SEED=%d replays it), %d steps per algorithm and primary", base, base, n)
	for name, primary := range blipPrimaries(t) {
		t.Run(name, func(t *testing.T) {
			fresh := 0
			for ai, alg := range rateAlgorithms(nil) {
				r := newBlipRun(t, primary, alg, base+uint64(ai))
				if err := r.steps(t.Context(), n); err != nil {
					t.Errorf("seed %d: %v", base+uint64(ai), err)
				}
				fresh += r.freshOK
			}
			if fresh == 0 {
				t.Errorf("no stall was driven: the run checked nothing")
			}
		})
	}
}

// TestBlipModelCatchesFreshStart is the control: the same runs without
// baselines (every stall starts each key at a fresh share, the defect the
// baselines fix) break the bound.
func TestBlipModelCatchesFreshStart(t *testing.T) {
	caught := 0
	const tries = 10
	for i := range tries {
		r := newBlipRun(t, newMemory(t), algorithms.FixedWindow, uint64(i), fallback.WithBaselines(0))
		if err := r.steps(t.Context(), 800); err != nil {
			caught++
			if caught == 1 {
				t.Logf("caught (seed %d): %v", i, err)
			}
		}
	}
	if caught < tries/2 {
		t.Fatalf("without baselines the bound held in %d of %d runs: the model cannot see a blip's fresh start", tries-caught, tries)
	}
}
