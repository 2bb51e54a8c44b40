package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/validations"
	"github.com/limitkit/limitkit/limiter"
)

// hotKeys is how many keys the hot-path checks spread their decisions over.
const hotKeys = 64

// hotLimiter returns a limiter of alg on a memory store, driven by a fake
// clock, with every one of ids already decided once (their slots exist).
func hotLimiter(t *testing.T, alg algorithms.Name, ids []string) *limiter.Limiter {
	t.Helper()
	store, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(store, limiter.Config{Algorithm: alg, Limit: 1000, Window: time.Second, Prefix: "hot:"},
		limiter.WithClock(clock.NewFake(time.UnixMilli(1_700_000_000_000))))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := lim.Allow(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	return lim
}

// TestDecisionHotPath is the hot path's budget as counts, not timings: a
// decision of a rate limit on the memory store allocates nothing and
// validates no rule (the limiter validated and resolved its rules when it
// was built; a call checks only its key and cost). Controls: a decision
// that formats its key is seen allocating, and a store call with a rule
// built as a literal (not resolved) is seen validating, so both counts can
// fail.
func TestDecisionHotPath(t *testing.T) {
	ids := make([]string, hotKeys)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for _, a := range algorithms.Algorithms() {
		if a.HoldsLeases() {
			continue // Acquire hands out a *Lease: an allocation by design
		}
		t.Run(string(a.Name), func(t *testing.T) {
			lim := hotLimiter(t, a.Name, ids)
			k := 0
			decide := func() {
				if _, err := lim.Allow(ctx, ids[k%hotKeys]); err != nil {
					t.Fatal(err)
				}
				k++
			}
			v0 := validations.Count.Load()
			if n := testing.AllocsPerRun(500, decide); n != 0 {
				t.Errorf("Allow allocates %.1f times per decision; want 0", n)
			}
			if n := validations.Count.Load() - v0; n != 0 {
				t.Errorf("500 decisions validated a rule %d times; want 0 (validation belongs to New)", n)
			}
		})
	}

	t.Run("controls", func(t *testing.T) {
		lim := hotLimiter(t, algorithms.FixedWindow, ids)
		k := 0
		formatted := func() {
			if _, err := lim.Allow(ctx, "user:"+strconv.Itoa(1000+k%hotKeys)); err != nil {
				t.Fatal(err)
			}
			k++
		}
		if n := testing.AllocsPerRun(100, formatted); n == 0 {
			t.Error("control: a decision that formats its key was not seen allocating")
		}
		store, err := memorystore.New()
		if err != nil {
			t.Fatal(err)
		}
		literal := backend.Request{Key: backend.Key{Prefix: "hot:", ID: "a"}, Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Second},
			Now: time.UnixMilli(1_700_000_000_000), Cost: 1}
		v0 := validations.Count.Load()
		if _, err := store.Take(ctx, literal); err != nil {
			t.Fatal(err)
		}
		if validations.Count.Load() == v0 {
			t.Error("control: a Take of a literal rule was not seen validating it")
		}
		resolved := literal
		if resolved.Rule, err = literal.Rule.Resolve(); err != nil {
			t.Fatal(err)
		}
		resolved.Rule.Limit = 11 // changed after Resolve: validated again
		v0 = validations.Count.Load()
		if _, err := store.Take(ctx, resolved); err != nil {
			t.Fatal(err)
		}
		if validations.Count.Load() == v0 {
			t.Error("control: a Take of a rule changed after Resolve was not seen validating it")
		}
	})
}
