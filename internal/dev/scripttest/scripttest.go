// Package scripttest holds checks shared by the Redis stores' tests: a
// randomised comparison of a store with the algorithms' Go engine that goes
// beyond the conformance suite (huge limits and costs, year-long windows,
// windows that change under an existing key, times near the latest the
// scripts accept).
package scripttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// Reporter receives failures; *testing.T is one.
type Reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// Differential runs steps random requests against store and the Go engine
// and reports the first decision where they differ. Each call uses its own
// key prefix.
func Differential(ctx context.Context, r Reporter, store backend.Store, seed uint64, steps int) {
	r.Helper()
	DifferentialOf(ctx, r, store, seed, steps, algorithms.Names())
}

// DifferentialOf is Differential over the named algorithms only.
func DifferentialOf(ctx context.Context, r Reporter, store backend.Store, seed uint64, steps int, names []algorithms.Name) {
	r.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	run := fmt.Sprintf("scripttest:%d:%d:", seed, time.Now().UnixNano())
	windows := []time.Duration{
		time.Millisecond, 7 * time.Millisecond, time.Second, 1500 * time.Millisecond,
		time.Hour, 24 * time.Hour, algorithms.MaxWindow,
	}
	limits := []int64{1, 2, 3, 7, 100, 1 << 20, 1<<53 - 1, algorithms.MaxLimit}
	logLimits := []int64{1, 2, 5, 128, 2000, algorithms.MaxSlidingLogLimit}
	starts := []int64{
		0, 1, 1_767_225_600_000, 1_767_225_600_000 + 123_457,
		rediswire.MaxTime - 2*algorithms.MaxWindow.Milliseconds(),
	}
	ids := []string{"a", "b{", "}c"}
	pick := func(rule *algorithms.Rule) {
		rule.Window = windows[rng.IntN(len(windows))]
		if rule.LimitBound() <= algorithms.MaxSlidingLogLimit {
			rule.Limit = logLimits[rng.IntN(len(logLimits))]
		} else {
			rule.Limit = min(limits[rng.IntN(len(limits))], rule.LimitBound())
		}
	}
	// Each round has its own keys (Redis expires keys in real time, which
	// the Go engine does not model) and a burst of steps: the clock
	// creeping, jumping back and forward, and now and then the limit and
	// window changing under the same keys.
	for round, step := 0, 0; step < steps; round++ {
		prefix := fmt.Sprintf("%s%d:", run, round)
		rule := algorithms.Rule{Algorithm: names[rng.IntN(len(names))]}
		pick(&rule)
		states := map[string]*algorithms.State{}
		granted := map[string][]int64{} // lease ids, for the lease algorithms
		now := starts[rng.IntN(len(starts))] + rng.Int64N(3*rule.Window.Milliseconds()+1)
		latest, fixedW := now, rule.Window.Milliseconds()
		for range 1 + rng.IntN(60) {
			step++
			if rng.IntN(20) == 0 {
				pick(&rule)
				if fixedW != rule.Window.Milliseconds() {
					fixedW = 0 // the window changed: never back again this round
				}
			}
			now = WalkTime(rng, now, rule.Window.Milliseconds(), 2)
			if rule.PerWindow() {
				now = max(now, storetest.FixedWindowFloor(latest, fixedW))
			}
			latest = max(latest, now)
			if rule.HoldsLeases() {
				now = min(now, algorithms.MaxLeaseMillis) // lease ids count 1/1000 ms
			}
			id := ids[rng.IntN(len(ids))]
			st := states[id]
			if st == nil {
				st = &algorithms.State{}
				states[id] = st
			}
			var cost int64
			switch p := rng.IntN(10); {
			case p < 5:
				cost = 1
			case p < 7:
				cost = rule.Limit
			case p < 8:
				cost = max(rule.Limit-1, 1)
			default:
				cost = 1 + rng.Int64N(rule.Limit)
			}
			req := backend.Request{Key: backend.Key{Prefix: prefix, ID: id}, Rule: rule, Now: time.UnixMilli(now), Cost: cost}
			var got backend.Result
			var err error
			var want algorithms.Outcome
			op := "Take"
			ls, leases := store.(backend.LeaseStore)
			leases = leases && rule.HoldsLeases() && len(granted[id]) > 0
			switch p := rng.IntN(10); {
			case p < 2:
				op = "Peek"
				want = rule.Peek(st, now, cost)
				got, err = store.Peek(ctx, req)
			case p < 4 && leases:
				lease := granted[id][rng.IntN(len(granted[id]))]
				wantHeld := rule.Release(st, now, lease)
				held, err := ls.Release(ctx, req, lease)
				if err != nil || held != wantHeld {
					r.Errorf("round %d step %d: Release(%q, %+v, now %d, lease %d): held %v, %v; want held %v", round, step, id, rule, now, lease, held, err, wantHeld)
					return
				}
				continue
			case p < 5 && leases:
				op = "Renew"
				lease := granted[id][rng.IntN(len(granted[id]))]
				want = rule.Renew(st, now, lease, cost)
				got, err = ls.Renew(ctx, req, lease)
			default:
				want = rule.Take(st, now, cost)
				got, err = store.Take(ctx, req)
			}
			if err != nil {
				r.Errorf("round %d step %d: %s(%q, %+v, now %d, cost %d): %v", round, step, op, id, rule, now, cost, err)
				return
			}
			w := backend.ResultOf(rule, want)
			if want.Allowed && op != "Peek" && rule.HoldsLeases() {
				w.Lease = rule.ChargedAt(st, now)
				granted[id] = append(granted[id], w.Lease)
			}
			if !reflect.DeepEqual(got, w) {
				r.Errorf("round %d step %d: %s(%q, %+v, now %d, cost %d):\n got  %+v\n want %+v", round, step, op, id, rule, now, cost, got, w)
				return
			}
		}
	}
}

// WalkTime moves a differential test's clock one step for a window of w ms:
// a quarter of steps stay put, most drift forward by up to w/drift, some go
// back up to two windows (late stamps) and some jump up to three ahead. The
// result stays within what the scripts accept.
func WalkTime(rng *rand.Rand, now, w, drift int64) int64 {
	switch p := rng.IntN(100); {
	case p < 25:
	case p < 80:
		now += rng.Int64N(w/drift + 2)
	case p < 92:
		now -= rng.Int64N(2*w + 1)
	default:
		now += rng.Int64N(3*w + 1)
	}
	return min(max(now, 0), rediswire.MaxTime)
}
