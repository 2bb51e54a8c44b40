package denycache_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// Issue 22, defect 10: two ways a cached denial outlived the store's, on
// real redis-server with each client. Every request of process B is asked
// of its store (Peek) and of its cache (Take) at the same time: the two must
// agree. Each control runs the same steps with the caches ignoring what
// other writes announce, and shows the disagreement the test looks for.

// exactProbe keeps the sightings short-lived (a rule stops counting three
// intervals after its last write), so the tests can wait for a reload to
// end.
const exactProbe = 200 * time.Millisecond

// base is a fake time line's origin, aligned to 180 s so that 60 s and 90 s
// windows start on it.
var exactBase = time.UnixMilli(1_700_000_100_000 - 1_700_000_100_000%180_000)

type makeProcess func(*testing.T, string, ...denycache.Option) process

func bothClients() map[string]makeProcess {
	return map[string]makeProcess{"goredis": goredisProcess, "rueidis": rueidisProcess}
}

// agree asks p's store and then p's cache about req and requires the same
// decision; it returns the cache's.
func agree(t *testing.T, p process, req backend.Request) backend.Result {
	t.Helper()
	want, err := p.store.Peek(t.Context(), req)
	require.NoError(t, err)
	got, err := p.cache.Take(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, want.Allowed, got.Allowed, "at %v the store says allowed=%v, the cache %+v",
		req.Now.Sub(exactBase), want.Allowed, got)
	return got
}

// waitSeen waits, bounded, until cond holds of what p's cache knows of the
// prefix.
func waitSeen(t *testing.T, p process, prefix string, alg algorithms.Name, what string, cond func(rules int, clock time.Time) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if cond(p.cache.SeenForTest(prefix, alg)) {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s: never happened", what)
	}
}

func take(t *testing.T, s backend.Store, req backend.Request) backend.Result {
	t.Helper()
	d, err := s.Take(t.Context(), req)
	require.NoError(t, err)
	return d
}

// rollingReload is the case, on sliding_counter (one key whose
// windows roll; since issue 30 a fixed window keeps a key per window, so
// no other rule's write moves it): A at 5 per 20 s and B at 5 per 90 s on
// one prefix. A fills the window at 20 s; B is denied at 30 s (its window
// [20 s, 110 s) is full) and caches it; at 61 s A's write rolls the
// counter two of its windows on, so the count starts afresh, and from 62 s
// the store admits B. It returns whether B's cache ever disagreed with its
// store (only the control may) and how many denials B's cache answered.
func rollingReload(t *testing.T, mk makeProcess, prefix string, control bool) (disagreed bool, hits uint64) {
	srv := redistest.Start(t)
	a, b := mk(t, srv.Addr(), denycache.WithProbeInterval(exactProbe)), mk(t, srv.Addr(), denycache.WithProbeInterval(exactProbe))
	ruleA := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 5, Window: 20 * time.Second}
	ruleB := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 5, Window: 90 * time.Second}
	key := backend.Key{Prefix: prefix, ID: "user"}
	at := func(rule algorithms.Rule, s time.Duration) backend.Request {
		return backend.Request{Key: key, Rule: rule, Now: exactBase.Add(s), Cost: 1}
	}
	check := func(req backend.Request) backend.Result {
		want, err := b.store.Peek(t.Context(), req)
		require.NoError(t, err)
		got := take(t, b.cache, req)
		if want.Allowed != got.Allowed {
			disagreed = true
		}
		return got
	}
	for range 5 {
		require.True(t, take(t, a.cache, at(ruleA, 20*time.Second)).Allowed)
	}
	if !control {
		waitSeen(t, b, prefix, algorithms.SlidingCounter, "B hears of A's rule", func(n int, _ time.Time) bool { return n >= 1 })
	}
	require.False(t, check(at(ruleB, 30*time.Second)).Allowed)
	require.False(t, check(at(ruleB, 31*time.Second)).Allowed)
	require.True(t, take(t, a.cache, at(ruleA, 61*time.Second)).Allowed, "A rolls the counter")
	if !control { // A's rule may have expired meanwhile: then B hears it anew
		waitSeen(t, b, prefix, algorithms.SlidingCounter, "B hears of A's rule again", func(n int, _ time.Time) bool { return n >= 2 })
	}
	want, err := b.store.Peek(t.Context(), at(ruleB, 62*time.Second))
	require.NoError(t, err)
	require.True(t, want.Allowed, "the store admits B once A rolled the counter: the scenario holds")
	for s := 62 * time.Second; s < 110*time.Second; s += time.Second {
		check(at(ruleB, s))
	}
	return disagreed, b.cache.Stats().Hits
}

func TestRollingReloadCachedDenialIsTheStoreAnswer(t *testing.T) {
	for name, mk := range bothClients() {
		t.Run(name, func(t *testing.T) {
			disagreed, _ := rollingReload(t, mk, "reload:"+name+":", false)
			require.False(t, disagreed, "B's cache denied what its store admitted")
		})
	}
	t.Run("control", func(t *testing.T) {
		denycache.IgnoreSightingsForTest(t)
		disagreed, hits := rollingReload(t, rueidisProcess, "reload:control:", true)
		require.Positive(t, hits)
		require.True(t, disagreed, "ignoring A's rule, B's cache should deny what the store admits: the test above can fail")
	})
}

// TestReloadEndsCachingResumes: once the other rule's writes stop (a
// rolling reload is over), its sighting expires and B caches again, each
// cached answer still the store's.
func TestReloadEndsCachingResumes(t *testing.T) {
	srv := redistest.Start(t)
	a, b := rueidisProcess(t, srv.Addr(), denycache.WithProbeInterval(exactProbe)), goredisProcess(t, srv.Addr(), denycache.WithProbeInterval(exactProbe))
	const prefix = "ended:"
	ruleA := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 3, Window: time.Hour}
	ruleB := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Hour}
	req := func(rule algorithms.Rule, id string) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: prefix, ID: id}, Rule: rule, Now: time.Now(), Cost: 1}
	}
	take(t, a.cache, req(ruleA, "warm"))
	waitSeen(t, b, prefix, algorithms.SlidingLog, "B hears of A's rule", func(n int, _ time.Time) bool { return n >= 1 })
	// A keeps writing (and so announcing its rule) while B is denied: on a
	// loaded machine B's requests can outlast A's one sighting.
	for range 2 {
		take(t, a.cache, req(ruleA, "warm"))
		require.True(t, agree(t, b, req(ruleB, "k")).Allowed)
	}
	for range 3 {
		take(t, a.cache, req(ruleA, "warm"))
		d := agree(t, b, req(ruleB, "k"))
		require.False(t, d.Cached, "another rule is in force on the prefix: nothing may be cached")
	}
	// B keeps writing under its rule (new keys, so each goes to the store)
	// while A's sighting expires. Wait for A's clock to be dropped too, not
	// only for its rule to be past its TTL: SeenForTest counts a rule by its
	// age, but the sweep (B's next renewal or sighting) that drops A's clock
	// bumps the group's generation, and ends a denial remembered before it.
	for i := 0; ; i++ {
		take(t, b.cache, req(ruleB, "busy-"+strconv.Itoa(i)))
		if n, clock := b.cache.SeenForTest(prefix, algorithms.SlidingLog); n == 1 && clock.IsZero() {
			break
		}
		require.Less(t, i, 2000, "A's rule never expired")
		time.Sleep(5 * time.Millisecond)
	}
	// A fresh key: k's last denial was read while A's rule was in force.
	for range 2 {
		require.True(t, agree(t, b, req(ruleB, "after")).Allowed)
	}
	require.False(t, agree(t, b, req(ruleB, "after")).Cached) // remembered now
	require.True(t, agree(t, b, req(ruleB, "after")).Cached, "with one rule in force the cache answers again (%+v)", b.cache.Stats())
}

// clockAhead, on sliding_counter (see rollingReload): A and B share 5 per
// 60 s. A (clock in step) takes 3 at 5 s, B 2 at 10 s, and B is denied from
// 30 s (retry at 72 s, once the full window has weighed down) and cached.
// Then A's clock jumps ahead: its request at (true) 32 s is stamped 130 s,
// two windows on, and starts the count afresh, so from then on the store
// admits B (its requests, stamped before that window, count against it).
// It returns whether B's cache ever disagreed with its store and whether it
// answered before the jump.
func clockAhead(t *testing.T, mk makeProcess, prefix string, control bool) (disagreed, cachedBefore bool) {
	srv := redistest.Start(t)
	a, b := mk(t, srv.Addr(), denycache.WithProbeInterval(exactProbe)), mk(t, srv.Addr(), denycache.WithProbeInterval(exactProbe))
	rule := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 5, Window: time.Minute}
	key := backend.Key{Prefix: prefix, ID: "user"}
	at := func(s time.Duration) backend.Request {
		return backend.Request{Key: key, Rule: rule, Now: exactBase.Add(s), Cost: 1}
	}
	check := func(req backend.Request) backend.Result {
		want, err := b.store.Peek(t.Context(), req)
		require.NoError(t, err)
		got := take(t, b.cache, req)
		if want.Allowed != got.Allowed {
			disagreed = true
		}
		return got
	}
	for range 3 {
		require.True(t, take(t, a.cache, at(5*time.Second)).Allowed)
	}
	for range 2 {
		require.True(t, take(t, b.cache, at(10*time.Second)).Allowed)
	}
	if !control {
		waitSeen(t, b, prefix, algorithms.SlidingCounter, "B hears of A's clock", func(_ int, c time.Time) bool { return !c.IsZero() })
	}
	require.False(t, check(at(30*time.Second)).Allowed)
	cachedBefore = check(at(31 * time.Second)).Cached

	require.True(t, take(t, a.cache, at(130*time.Second)).Allowed, "A, ahead, rolls the window")
	if !control {
		waitSeen(t, b, prefix, algorithms.SlidingCounter, "B hears A's clock is ahead", func(_ int, c time.Time) bool {
			return !c.Before(exactBase.Add(130 * time.Second))
		})
	}
	want, err := b.store.Peek(t.Context(), at(35*time.Second))
	require.NoError(t, err)
	require.True(t, want.Allowed, "the store admits B once A's write started the count afresh: the scenario holds")
	for s := 35 * time.Second; s < 60*time.Second; s += time.Second {
		check(at(s))
	}
	return disagreed, cachedBefore
}

func TestClockAheadCachedDenialIsTheStoreAnswer(t *testing.T) {
	for name, mk := range bothClients() {
		t.Run(name, func(t *testing.T) {
			disagreed, cachedBefore := clockAhead(t, mk, "ahead:"+name+":", false)
			require.True(t, cachedBefore, "with the clocks in step the cache should answer: the test would pass vacuously")
			require.False(t, disagreed, "B's cache denied what its store admitted")
		})
	}
	t.Run("control", func(t *testing.T) {
		denycache.IgnoreSightingsForTest(t)
		disagreed, cachedBefore := clockAhead(t, rueidisProcess, "ahead:control:", true)
		require.True(t, cachedBefore)
		require.True(t, disagreed, "ignoring A's clock, B's cache should deny what the store admits: the test above can fail")
	})
}

// TestOtherRuleInOneProcess: in one process without a bus (SetConfig, or
// two limiters on one prefix), a write under another rule that rolls the
// shared counter ends the cached denial it lifts; Peek and Take agree
// throughout. This held before defect 10 was fixed too (a write this
// process sends drops its key's entry); it stays as a regression test.
func TestOtherRuleInOneProcess(t *testing.T) {
	srv := redistest.Start(t)
	p := rueidisProcess(t, srv.Addr())
	deaf, err := denycache.New(p.store, nil)
	require.NoError(t, err)
	one := process{name: "deaf", store: p.store, cache: deaf}
	ninety := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: 90 * time.Second}
	sixty := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Minute}
	// run: ninety fills its window [0, 90 s) at 70 s and is denied at 75 s
	// (retry at 90 s); sixty rolls the counter to its window at 60 s at
	// 76 s; ninety then fits one unit. It returns the cache's answer at 77 s.
	run := func(prefix string) (backend.Result, error) {
		t.Helper()
		at := func(r algorithms.Rule, s time.Duration) backend.Request {
			return backend.Request{Key: backend.Key{Prefix: prefix, ID: "k"}, Rule: r, Now: exactBase.Add(s), Cost: 1}
		}
		for range 2 {
			require.True(t, agree(t, one, at(ninety, 70*time.Second)).Allowed)
		}
		require.False(t, agree(t, one, at(ninety, 75*time.Second)).Allowed)
		require.True(t, agree(t, one, at(ninety, 76*time.Second)).Cached)
		require.True(t, agree(t, one, at(sixty, 76*time.Second)).Allowed, "the 60 s rule counts in its window at 60 s")
		return deaf.Take(t.Context(), at(ninety, 77*time.Second))
	}
	got, err := run("own-rule:")
	require.NoError(t, err)
	// Since fixed windows count in a key per window (issue 30), the 60 s
	// rule's take no longer touches the 90 s rule's count: the store still
	// denies at 77 s, and the cache must say what the store says.
	want, err := p.store.Peek(t.Context(), backend.Request{Key: backend.Key{Prefix: "own-rule:", ID: "k"}, Rule: ninety, Now: exactBase.Add(77 * time.Second), Cost: 1})
	require.NoError(t, err)
	require.Equal(t, want.Allowed, got.Allowed, "the cache's answer differs from its store's: %+v, store %+v", got, want)
}
