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
	"github.com/limitkit/limitkit/internal/hotpath"
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

// hiddenStore is a memory store behind a type the hot path does not know:
// its limiter decides through Store.Take, with a backend.Request.
type hiddenStore struct{ backend.Store }

// TestDirectTakeDecidesAsTake runs the same calls, at the same fake times,
// on a limiter whose memory store is called directly (internal/hotpath)
// and on one whose store is hidden behind a wrapper (called through Take,
// which the conformance suite covers), for every rate algorithm, and
// requires the same decisions and errors. A time before the epoch takes
// Take's path and error on both. Controls: the direct path is the one
// taken (hotpath finds the store, not the wrapper), and a limiter of
// another limit is seen deciding differently.
func TestDirectTakeDecidesAsTake(t *testing.T) {
	ctx := context.Background()
	direct, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	if hotpath.Of(direct) == nil {
		t.Fatal("control: the memory store has no direct Take")
	}
	if hotpath.Of(hiddenStore{direct}) != nil {
		t.Fatal("control: a wrapped store was given the memory store's direct Take")
	}
	for _, a := range algorithms.Algorithms() {
		if a.HoldsLeases() {
			continue
		}
		t.Run(string(a.Name), func(t *testing.T) {
			clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
			build := func(s backend.Store, limit int64) *limiter.Limiter {
				lim, err := limiter.New(s, limiter.Config{Algorithm: a.Name, Limit: limit, Window: 500 * time.Millisecond, Prefix: "d:"},
					limiter.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				return lim
			}
			hot, slow, other := build(mustStore(t), 7), build(hiddenStore{mustStore(t)}, 7), build(hiddenStore{mustStore(t)}, 6)
			x := uint64(0x9e3779b97f4a7c15)
			differed := false
			for i := range 3000 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				clk.Advance(time.Duration(x%97) * time.Millisecond)
				id := "k" + strconv.Itoa(int(x>>8)%5)
				n := int64(x>>16)%9 + 1 // 8 and 9 exceed the limit: an error on both
				call := func(l *limiter.Limiter) (limiter.Decision, error) {
					switch i % 3 {
					case 0:
						return l.Allow(ctx, id)
					case 1:
						return l.AllowN(ctx, id, n)
					}
					_, d, err := l.Admit(ctx, limiter.Request{Keys: []string{id}})
					return d, err
				}
				dh, eh := call(hot)
				ds, es := call(slow)
				if dh != ds || errText(eh) != errText(es) {
					t.Fatalf("call %d (%s, n %d): direct %+v, %v; through Take %+v, %v", i, id, n, dh, eh, ds, es)
				}
				if do, eo := call(other); do != ds || errText(eo) != errText(es) {
					differed = true
				}
			}
			if !differed {
				t.Error("control: a limit of 6 decided as one of 7 throughout")
			}
			clk.Set(time.Unix(-1, 0))
			_, eh := hot.Allow(ctx, "k0")
			_, es := slow.Allow(ctx, "k0")
			if eh == nil || errText(eh) != errText(es) {
				t.Errorf("before the epoch: direct %v, through Take %v; want Take's error on both", eh, es)
			}
		})
	}
}

func mustStore(t *testing.T) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
