package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/config"
)

// liveStart is aligned to every window the tests use, so fixed windows
// start with the test.
var liveStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// everyStore runs check on a memory store and on a real redis-server
// through each client. Each subtest gets a fresh store (Redis flushed).
func everyStore(t *testing.T, check func(t *testing.T, store backend.Store)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		s, err := memorystore.New()
		require.NoError(t, err)
		check(t, s)
	})
	srv := redistest.Start(t)
	for _, client := range []string{config.GoRedis, config.Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := srv.Do("FLUSHALL")
			require.NoError(t, err)
			s, closeFn, err := config.Backend{URL: "redis://" + srv.Addr() + "/0", Client: client}.Open(t.Context())
			require.NoError(t, err)
			t.Cleanup(func() { _ = closeFn() })
			check(t, s)
		})
	}
}

// liveStep is one step of a scenario: advance the clock, then change the
// configuration, take n units, or peek.
type liveStep struct {
	adv  time.Duration
	set  func(limiter.Config) limiter.Config
	take int64
}

func limitTo(n int64) func(limiter.Config) limiter.Config {
	return func(c limiter.Config) limiter.Config { c.Limit = n; return c }
}

func windowTo(w time.Duration) func(limiter.Config) limiter.Config {
	return func(c limiter.Config) limiter.Config { c.Window = w; return c }
}

// changeScenario takes, peeks and changes the limit and the window of a
// key, to an unaligned window too, with the clock going on.
var changeScenario = []liveStep{
	{take: 1}, {adv: time.Second, take: 1}, {adv: time.Second, take: 1},
	{set: limitTo(8)}, {}, {adv: time.Second, take: 2}, {take: 3}, {take: 1},
	{set: limitTo(2)}, {}, {adv: time.Second, take: 1},
	{adv: 2 * time.Second, set: windowTo(5 * time.Second)}, {}, {adv: time.Second, take: 1}, {take: 1},
	{adv: time.Second, set: windowTo(20 * time.Second)}, {}, {adv: time.Second, take: 1},
	{set: limitTo(6)}, {take: 2}, {adv: 7 * time.Second, take: 1}, {},
	{adv: 500 * time.Millisecond, set: windowTo(3 * time.Second)}, {take: 1}, {take: 1}, {take: 2}, {take: 1},
	{adv: 1700 * time.Millisecond, take: 1}, {adv: 2 * time.Second, take: 2}, {},
	{set: windowTo(7 * time.Second)}, {adv: 3 * time.Second, take: 3}, {adv: 5 * time.Second, take: 1}, {},
	{adv: 11 * time.Second, set: limitTo(3)}, {take: 3}, {take: 1}, {},
}

// runScenario plays steps on a fresh limiter over store and returns every
// decision, rendered.
func runScenario(t *testing.T, store backend.Store, cfg limiter.Config, steps []liveStep) []string {
	t.Helper()
	fake := clock.NewFake(liveStart)
	lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
	require.NoError(t, err)
	var out []string
	for i, s := range steps {
		fake.Advance(s.adv)
		var d limiter.Decision
		switch {
		case s.set != nil:
			cfg = s.set(cfg)
			require.NoError(t, lim.SetConfig(cfg), "step %d", i)
			continue
		case s.take > 0:
			d, err = takeN(t.Context(), lim, "k", s.take)
		default:
			d, err = lim.Peek(t.Context(), "k")
		}
		require.NoError(t, err, "step %d", i)
		out = append(out, fmt.Sprintf("step %d at %v limit %d window %v take %d: %+v", i, fake.Now().Sub(liveStart), cfg.Limit, cfg.Window, s.take, d))
	}
	return out
}

// TestSetConfigSameOnEveryStore: changes of limit and window under a key
// give the same decisions in memory (the Go engines) and in Redis (the Lua
// twins), through both clients, for every algorithm.
func TestSetConfigSameOnEveryStore(t *testing.T) {
	want := map[algorithms.Name][]string{}
	everyStore(t, func(t *testing.T, store backend.Store) {
		for _, alg := range algorithms.Names() {
			cfg := limiter.Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Prefix: "live:" + string(alg) + ":"}
			got := runScenario(t, store, cfg, changeScenario)
			if w, ok := want[alg]; ok {
				require.Equal(t, w, got, "%s: decisions differ from the memory store's", alg)
			} else {
				want[alg] = got
			}
		}
	})
	require.Len(t, want, len(algorithms.Names()))

	// Control: a store that loses a key's counts when its limit or
	// window changes gives other decisions, and the comparison sees it.
	mem, err := memorystore.New()
	require.NoError(t, err)
	for _, alg := range algorithms.Names() {
		cfg := limiter.Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Prefix: "live:" + string(alg) + ":"}
		require.NotEqual(t, want[alg], runScenario(t, forgetful{mem}, cfg, changeScenario), alg)
	}
}

// forgetful keeps a key's state per rule, as if a change reset it.
type forgetful struct{ backend.Store }

func (f forgetful) rekey(req backend.Request) backend.Request {
	req.Key.Prefix += fmt.Sprintf("%d-%v:", req.Rule.Limit, req.Rule.Window)
	return req
}

func (f forgetful) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	return f.Store.Take(ctx, f.rekey(req))
}

func (f forgetful) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	return f.Store.Peek(ctx, f.rekey(req))
}

func (f forgetful) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	return f.Store.(backend.LeaseStore).Release(ctx, f.rekey(req), lease)
}

func (f forgetful) Renew(ctx context.Context, req backend.Request, lease int64) (backend.Result, error) {
	return f.Store.(backend.LeaseStore).Renew(ctx, f.rekey(req), lease)
}

// TestSetConfigKeepsCounts states, per algorithm, what a change of limit
// does to what a key has counted, on every store.
func TestSetConfigKeepsCounts(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		for _, alg := range algorithms.Names() {
			fake := clock.NewFake(liveStart)
			cfg := limiter.Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Prefix: "keep:" + string(alg) + ":"}
			lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
			require.NoError(t, err)
			d, err := takeN(ctx, lim, "k", 3)
			require.NoError(t, err)
			require.True(t, d.Allowed)

			cfg.Limit = 8
			require.NoError(t, lim.SetConfig(cfg))
			p, err := lim.Peek(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, 8, p.Limit, alg)
			if alg == algorithms.GCRA {
				// GCRA keeps the time until its bucket is full: 3 of 4
				// units is 7.5 s of 10, which is 6 units of 8.
				require.EqualValues(t, 2, p.Remaining, alg)
			} else {
				require.EqualValues(t, 5, p.Remaining, "%s: the 3 units counted are kept", alg)
			}

			cfg.Limit = 2
			require.NoError(t, lim.SetConfig(cfg))
			d, err = takeN(ctx, lim, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "%s: 3 counted is above the new limit 2", alg)

			// A new algorithm counts under its own key suffix: fresh.
			other := algorithms.FixedWindow
			if alg == other {
				other = algorithms.SlidingLog
			}
			cfg.Algorithm = other
			require.NoError(t, lim.SetConfig(cfg))
			d, err = takeN(ctx, lim, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%s -> %s starts from zero", alg, other)
			require.EqualValues(t, 1, d.Remaining)

			// Back to the first algorithm within its window: its counts
			// were never deleted.
			cfg.Algorithm = alg
			require.NoError(t, lim.SetConfig(cfg))
			d, err = takeN(ctx, lim, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "%s: its own counts are still there", alg)
		}
	})
}

// TestSetConfigWindowOnLogs: a log keeps its timestamps and reads them
// under the new window.
func TestSetConfigWindowOnLogs(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog} {
			fake := clock.NewFake(liveStart)
			cfg := limiter.Config{Algorithm: alg, Limit: 4, Window: 10 * time.Second, Prefix: "logw:" + string(alg) + ":"}
			lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
			require.NoError(t, err)
			for range 2 { // at 0 s and at 4 s
				_, err := lim.Allow(ctx, "k")
				require.NoError(t, err)
				fake.Advance(4 * time.Second)
			}
			fake.Advance(-2 * time.Second) // now 6 s
			cfg.Window = 5 * time.Second
			require.NoError(t, lim.SetConfig(cfg))
			p, err := lim.Peek(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, 3, p.Remaining, "%s: the entry at 0 s is out of (1 s, 6 s]", alg)
			require.Equal(t, 3*time.Second, p.ResetAfter, "the entry at 4 s leaves at 9 s, 3 s from now")

			cfg.Window = 20 * time.Second
			require.NoError(t, lim.SetConfig(cfg))
			p, err = lim.Peek(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, 2, p.Remaining, "%s: both entries are in (-14 s, 6 s]", alg)
		}
	})
}

// TestSetConfigInvalidKeepsOld: an invalid configuration is refused and the
// old one stays in force.
func TestSetConfigInvalidKeepsOld(t *testing.T) {
	lim, _ := newLimiter(t, limiter.Config{Limit: 3, Window: time.Minute})
	gen := lim.Generation()
	for _, bad := range []limiter.Config{
		{Limit: 0, Window: time.Minute},
		{Limit: 3, Window: time.Minute, Mode: "dry"},
		{Limit: 3, Window: time.Minute, Guard: &limiter.Guard{Limit: 1, Window: time.Hour, Mode: "loud"}},
		{Algorithm: "leaky", Limit: 3, Window: time.Minute},
	} {
		require.ErrorIs(t, lim.SetConfig(bad), limiter.ErrInvalidConfig)
	}
	require.Equal(t, gen, lim.Generation())
	require.EqualValues(t, 3, lim.Config().Limit)
	require.NoError(t, lim.SetConfig(limiter.Config{Limit: 5, Window: time.Minute}))
	require.Equal(t, gen+1, lim.Generation())
}

// TestSetConfigUnderLoad: decisions go on while the configuration flips
// between two (run with -race: the swap must not race with readers). Each
// decision and each Config read is wholly one of them: a decision's Limit
// is one the two configurations have, and a Config's guard matches its
// main limit.
func TestSetConfigUnderLoad(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	a := limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 1_000_000, Window: time.Hour, Prefix: "load:", Guard: &limiter.Guard{Limit: 3, Window: time.Hour}}
	b := limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 2_000_000, Window: time.Hour, Prefix: "load:", Guard: &limiter.Guard{Limit: 5, Window: 2 * time.Hour}}
	lim, err := limiter.New(store, a)
	require.NoError(t, err)
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad, decided atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() || i < 100; i++ {
				d, err := lim.Allow(ctx, fmt.Sprintf("k%d-%d", w, i%50))
				decided.Add(1)
				if err != nil || (d.Limit != 3 && d.Limit != 5 && d.Limit != a.Limit && d.Limit != b.Limit) {
					bad.Add(1)
				}
				if c := lim.Config(); (c.Limit == a.Limit) != (c.Guard.Window == a.Guard.Window) {
					bad.Add(1)
				}
			}
		}()
	}
	for i := range 2000 {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		require.NoError(t, lim.SetConfig(cfg))
	}
	stop.Store(true)
	wg.Wait()
	require.Zero(t, bad.Load(), "a decision or a read saw a half-applied configuration")
	require.GreaterOrEqual(t, decided.Load(), int64(400))
	require.EqualValues(t, 2001, lim.Generation())
}

// TestGroupSwapsTogether: a reader that reads limiter x then limiter y
// never finds x changed and y not while SetConfigs raises both. The
// control changes them one SetConfig at a time with a read in between,
// and the same check catches it.
func TestGroupSwapsTogether(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	cfgs := func(n int64) []limiter.Config {
		return []limiter.Config{{Limit: n, Window: time.Minute, Prefix: "x:"}, {Limit: n, Window: time.Minute, Prefix: "y:"}}
	}
	ahead := func(ls []*limiter.Limiter) bool { x := ls[0].Config().Limit; return x > ls[1].Config().Limit }

	g, err := limiter.NewGroup(store, cfgs(1))
	require.NoError(t, err)
	ls := g.Limiters()
	var stop atomic.Bool
	var seen, reads atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() || reads.Load() < 100 {
			reads.Add(1)
			if ahead(ls) {
				seen.Add(1)
			}
		}
	}()
	for n := int64(2); n <= 2000; n++ {
		require.NoError(t, g.SetConfigs(cfgs(n)))
	}
	stop.Store(true)
	<-done
	require.Zero(t, seen.Load(), "a reader saw x changed and y not")
	require.EqualValues(t, 2000, ls[1].Config().Limit)

	// Control: one at a time, read in between.
	require.NoError(t, ls[0].SetConfig(cfgs(2001)[0]))
	require.True(t, ahead(ls), "the check sees a half-applied pair")
	require.NoError(t, ls[1].SetConfig(cfgs(2001)[1]))
	require.False(t, ahead(ls))

	// A group refuses a wrong count or an invalid config, changing nothing.
	require.ErrorIs(t, g.SetConfigs(cfgs(5)[:1]), limiter.ErrInvalidConfig)
	bad := cfgs(5)
	bad[1].Limit = 0
	require.ErrorIs(t, g.SetConfigs(bad), limiter.ErrInvalidConfig)
	require.EqualValues(t, 2001, ls[0].Config().Limit)
}

// TestCompositeSetConfigs: a composite's limits change together, counts
// kept; a wrong number or an invalid limit changes nothing. On every store.
func TestCompositeSetConfigs(t *testing.T) {
	everyStore(t, func(t *testing.T, store backend.Store) {
		ctx := t.Context()
		cfgs := []limiter.Config{{Limit: 2, Window: time.Minute, Prefix: "cu:"}, {Limit: 5, Window: time.Minute, Prefix: "ct:"}}
		c, err := limiter.NewComposite(store, cfgs, limiter.WithClock(clock.NewFake(liveStart)))
		require.NoError(t, err)
		for range 2 {
			d, err := c.Allow(ctx, "u", "t")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		d, err := c.Allow(ctx, "u", "t")
		require.NoError(t, err)
		require.False(t, d.Allowed)

		require.ErrorIs(t, c.SetConfigs(cfgs[:1]), limiter.ErrInvalidConfig)
		bad := slices.Clone(cfgs)
		bad[1].Limit = 0
		require.ErrorIs(t, c.SetConfigs(bad), limiter.ErrInvalidConfig)
		require.EqualValues(t, 2, c.Configs()[0].Limit)

		next := slices.Clone(cfgs)
		next[0].Limit, next[1].Limit = 4, 3
		require.NoError(t, c.SetConfigs(next))
		d, err = c.Allow(ctx, "u", "t")
		require.NoError(t, err)
		require.True(t, d.Allowed, "2 of the user's new 4 were counted")
		d, err = c.Allow(ctx, "u", "t")
		require.NoError(t, err)
		require.False(t, d.Allowed, "the tenant's 3 counted of its new 3")
		require.Equal(t, 1, d.Rule)
	})
}
