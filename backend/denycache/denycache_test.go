package denycache_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// process is what one service instance holds: a Redis client, a store over
// it and a deny cache in front.
type process struct {
	name  string
	store backend.Store
	cache *denycache.Store
}

func goredisProcess(t *testing.T, addr string, opts ...denycache.Option) process {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	s, err := goredisstore.New(c)
	require.NoError(t, err)
	return newProcess(t, "go-redis", s, goredisstore.NewBus(c), opts...)
}

func rueidisProcess(t *testing.T, addr string, opts ...denycache.Option) process {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := rueidisstore.New(c)
	require.NoError(t, err)
	return newProcess(t, "rueidis", s, rueidisstore.NewBus(c), opts...)
}

func newProcess(t *testing.T, name string, s backend.Store, bus denycache.Bus, opts ...denycache.Option) process {
	cache, err := denycache.New(s, bus, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cache.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, cache.Ready(ctx))
	return process{name: name, store: s, cache: cache}
}

func TestConformanceMemory(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, nil)
	require.NoError(t, err)
	storetest.Run(t, cache)
	require.Positive(t, cache.Stats().Hits, "the suite never reached the cache: the test would pass vacuously")
}

func TestBadOptions(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	for name, opt := range map[string]denycache.Option{
		"WithMaxEntries": denycache.WithMaxEntries(63), "WithProbeInterval": denycache.WithProbeInterval(time.Microsecond),
		"WithChannel": denycache.WithChannel(""), "WithLogger": denycache.WithLogger(nil),
	} {
		_, err := denycache.New(mem, nil, opt)
		require.ErrorContains(t, err, "denycache: "+name+": ", name)
	}
	cache, err := denycache.New(mem, nil, nil, denycache.WithMaxEntries(64))
	require.NoError(t, err, "a nil option is ignored; 64 entries are enough")
	require.NoError(t, cache.Close())
}

// TestConformanceRedis runs the conformance suite (step tables, the random
// sequence against the Go engine, TakeAll) through the cache on a real
// redis-server with each client: the cached answers are the store's.
func TestConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, p := range []process{goredisProcess(t, srv.Addr()), rueidisProcess(t, srv.Addr())} {
		t.Run(p.name, func(t *testing.T) {
			storetest.Run(t, p.cache)
			require.Positive(t, p.cache.Stats().Hits, "the suite never reached the cache")
		})
	}
}

// TestCachedAnswerIsTheStoreAnswer compares, step by step on a fake time
// line, a cached denial with what the store says for the same request.
func TestCachedAnswerIsTheStoreAnswer(t *testing.T) {
	srv := redistest.Start(t)
	p := rueidisProcess(t, srv.Addr())
	ctx := t.Context()
	start := time.UnixMilli(1_700_000_000_000)
	for _, name := range algorithms.Names() {
		t.Run(string(name), func(t *testing.T) {
			if algorithms.Lookup(name).HoldsLeases() {
				t.Skip("lease denials are never cached (TestLeaseDenialsAreNotCached)")
			}
			rule := algorithms.Rule{Algorithm: name, Limit: 4, Window: 10 * time.Second}
			key := backend.Key{Prefix: "same:" + string(name) + ":", ID: "k"}
			req := func(at time.Duration) backend.Request {
				return backend.Request{Key: key, Rule: rule, Now: start.Add(at), Cost: 1}
			}
			for i := range 4 {
				d, err := p.cache.Take(ctx, req(time.Duration(i)*time.Second))
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			hits := 0
			for at := 4 * time.Second; at < 30*time.Second; at += 250 * time.Millisecond {
				want, err := p.store.Peek(ctx, req(at))
				require.NoError(t, err)
				got, err := p.cache.Take(ctx, req(at))
				require.NoError(t, err)
				if got.Cached {
					hits++
					require.False(t, want.Allowed, "at %v the store would admit; the cache denied", at)
					want.Remaining = 0 // a denial's Remaining, as Take reports it
					got.Cached = false
					require.Equal(t, want, got, "at %v", at)
				}
			}
			require.Positive(t, hits)
		})
	}
}

// TestResetReachesOtherProcesses: a key denied and cached in one process is
// admitted there again soon after another process resets it. The control
// shows that without the bus the stale denial would stay.
func TestResetReachesOtherProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Hour}
	key := backend.Key{Prefix: "reset:", ID: "user"}
	req := backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1}

	fill := func(t *testing.T, s backend.Store) {
		for range 3 {
			_, err := s.Take(ctx, req)
			require.NoError(t, err)
		}
		d, err := s.Take(ctx, req)
		require.NoError(t, err)
		require.True(t, d.Cached, "the fourth request should be answered from the cache")
	}
	// waitAdmitted polls for at most 5 s (a bound, not a speed claim).
	waitAdmitted := func(s backend.Store) bool {
		for range 500 {
			d, err := s.Take(ctx, req)
			require.NoError(t, err)
			if d.Allowed {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}

	for _, mk := range []func(*testing.T, string, ...denycache.Option) process{goredisProcess, rueidisProcess} {
		a, b := mk(t, srv.Addr()), rueidisProcess(t, srv.Addr())
		t.Run(a.name, func(t *testing.T) {
			key.ID = "user-" + a.name
			req.Key = key
			fill(t, a.cache)
			require.NoError(t, b.cache.Reset(ctx, key, rule, time.Now()))
			require.True(t, waitAdmitted(a.cache), "process a kept denying after process b reset the key")
		})
	}

	t.Run("control without a bus", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer c.Close()
		s, err := goredisstore.New(c)
		require.NoError(t, err)
		deaf, err := denycache.New(s, nil) // no bus: hears no other process
		require.NoError(t, err)
		other := rueidisProcess(t, srv.Addr())
		key.ID = "user-control"
		req.Key = key
		fill(t, deaf)
		require.NoError(t, other.cache.Reset(ctx, key, rule, time.Now()))
		d, err := deaf.Take(ctx, req)
		require.NoError(t, err)
		require.True(t, d.Cached, "without invalidation the stale denial stays: the test above can fail")
	})
}

// TestNoOverAdmissionAcrossProcesses: 64 callers in two processes (one per
// client) on 20 keys at limit 5 per hour, with resets from both processes
// interleaved, never admit more than the limit on a key between two resets.
// Admissions whose call overlapped a reset of their key may belong to either
// side, so only the others are counted. The control, a cache that also
// remembers admissions, is caught.
func TestNoOverAdmissionAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	procs := []process{goredisProcess(t, srv.Addr()), rueidisProcess(t, srv.Addr())}
	stores := []backend.Store{procs[0].cache, procs[1].cache}
	over, hits := audit(t, stores, "exact")
	require.Zero(t, over, "over-admissions")
	require.Positive(t, hits, "the cache answered nothing: the test would pass vacuously")

	broken := []backend.Store{&admitCache{Store: procs[0].store}, &admitCache{Store: procs[1].store}}
	over, _ = audit(t, broken, "control")
	require.Positive(t, over, "the control over-admits; the audit must see it")
}

// audit runs the load and returns the over-admissions and cache hits.
func audit(t *testing.T, stores []backend.Store, prefix string) (over int, hits int64) {
	const (
		keys    = 20
		limit   = 5
		callers = 64
	)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: time.Hour}
	ctx := t.Context()
	type event struct {
		start, end time.Time
		key        int
	}
	var (
		mu         sync.Mutex
		admissions []event
		resets     []event
		cached     atomic.Int64
	)
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			s := stores[c%len(stores)]
			for i := 0; i < 20_000 && time.Now().Before(stop); i++ {
				k := (c + i) % keys
				start := time.Now()
				d, err := s.Take(ctx, backend.Request{Key: backend.Key{Prefix: prefix + ":", ID: strconv.Itoa(k)}, Rule: rule, Now: start, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Cached {
					cached.Add(1)
				}
				if d.Allowed {
					mu.Lock()
					admissions = append(admissions, event{start, time.Now(), k})
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 100 && time.Now().Before(stop); i++ {
			time.Sleep(50 * time.Millisecond)
			k := i % keys
			start := time.Now()
			require.NoError(t, stores[i%len(stores)].Reset(ctx, backend.Key{Prefix: prefix + ":", ID: strconv.Itoa(k)}, rule, time.Now()))
			mu.Lock()
			resets = append(resets, event{start, time.Now(), k})
			mu.Unlock()
		}
	})
	wg.Wait()
	require.NotEmpty(t, resets)
	for k := range keys {
		// Epochs of key k: between consecutive resets of k.
		var cuts []event
		for _, r := range resets {
			if r.key == k {
				cuts = append(cuts, r)
			}
		}
		counts := make([]int, len(cuts)+1)
		for _, a := range admissions {
			if a.key != k {
				continue
			}
			epoch, ambiguous := 0, false
			for i, r := range cuts {
				if a.end.Before(r.start) {
					break
				}
				if a.start.Before(r.end) { // overlapped the reset
					ambiguous = true
					break
				}
				epoch = i + 1
			}
			if !ambiguous {
				counts[epoch]++
			}
		}
		for _, n := range counts {
			over += max(n-limit, 0)
		}
	}
	return over, cached.Load()
}

// admitCache is a broken cache for the control: it answers a key's next
// requests with its last admission for 20 ms.
type admitCache struct {
	backend.Store
	mu   sync.Mutex
	last map[string]time.Time
}

func (a *admitCache) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	k := req.Key.Prefix + req.Key.ID
	a.mu.Lock()
	if a.last == nil {
		a.last = map[string]time.Time{}
	}
	at, ok := a.last[k]
	a.mu.Unlock()
	if ok && time.Since(at) < 20*time.Millisecond {
		return backend.Result{Allowed: true, Limit: req.Rule.Limit}, nil
	}
	d, err := a.Store.Take(ctx, req)
	if err == nil && d.Allowed {
		a.mu.Lock()
		a.last[k] = time.Now()
		a.mu.Unlock()
	}
	return d, err
}

// TestDenyHeavyCallsPerDecision: 64 callers on 100 keys at limit 5 per
// minute make at most 0.05 script calls per denied decision, counted by
// the server (INFO commandstats).
func TestDenyHeavyCallsPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	for _, mk := range []func(*testing.T, string, ...denycache.Option) process{goredisProcess, rueidisProcess} {
		p := mk(t, srv.Addr())
		t.Run(p.name, func(t *testing.T) {
			rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 5, Window: time.Minute}
			ctx := t.Context()
			before := scriptCalls(t, srv)
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			for c := range 64 {
				wg.Go(func() {
					for i := range 1000 {
						d, err := p.cache.Take(ctx, backend.Request{
							Key:  backend.Key{Prefix: "heavy:" + p.name + ":", ID: strconv.Itoa((c*7 + i) % 100)},
							Rule: rule, Now: time.Now(), Cost: 1,
						})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						} else {
							denied.Add(1)
						}
					}
				})
			}
			wg.Wait()
			calls := scriptCalls(t, srv) - before
			require.LessOrEqual(t, allowed.Load(), int64(100*5), "over-admission")
			// Both counts include the admissions' calls: upper bounds.
			perDenial := float64(calls) / float64(denied.Load())
			decided := 64*1000 - int64(p.cache.Stats().Hits)
			t.Logf("%d decisions, %d denied, %d script calls, %d decided by Redis: %.4f calls and %.4f Redis decisions per denied decision",
				64*1000, denied.Load(), calls, decided, perDenial, float64(decided)/float64(denied.Load()))
			require.LessOrEqual(t, perDenial, 0.05)
			require.LessOrEqual(t, float64(decided)/float64(denied.Load()), 0.05)
		})
	}
}

// scriptCalls counts EVALSHA and EVAL calls the server has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	info, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		n += c
	}
	return n
}

// TestBounded: a flood of denied keys does not grow the cache past its
// bound.
func TestBounded(t *testing.T) {
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, nil, denycache.WithMaxEntries(128))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}
	now := time.UnixMilli(1_700_000_000_000)
	for i := range 5000 {
		k := backend.Key{Prefix: "flood:", ID: fmt.Sprint(i)}
		for range 2 {
			_, err := cache.Take(t.Context(), backend.Request{Key: k, Rule: rule, Now: now, Cost: 1})
			require.NoError(t, err)
		}
	}
	st := cache.Stats()
	require.EqualValues(t, 5000, st.Stored)
	require.LessOrEqual(t, st.Entries, 128)
	require.Positive(t, st.Entries)
}

// TestWhatIsNotAnswered: requests of several units, requests stamped before
// the denial, degraded denials, other limits and errors go to the store.
func TestWhatIsNotAnswered(t *testing.T) {
	inner := &counting{}
	mem, err := memorystore.New()
	require.NoError(t, err)
	inner.Store = mem
	cache, err := denycache.New(inner, nil)
	require.NoError(t, err)
	ctx := t.Context()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 2, Window: time.Minute}
	key := backend.Key{Prefix: "n:", ID: "k"}
	now := time.UnixMilli(1_700_000_000_000)
	take := func(r algorithms.Rule, at time.Time, cost int64) backend.Result {
		d, err := cache.Take(ctx, backend.Request{Key: key, Rule: r, Now: at, Cost: cost})
		require.NoError(t, err)
		return d
	}
	take(rule, now, 2)
	require.False(t, take(rule, now, 1).Cached) // remembered now
	calls := inner.takes.Load()
	require.True(t, take(rule, now.Add(time.Second), 1).Cached)
	require.Equal(t, calls, inner.takes.Load(), "a cached answer must not call the store")

	require.False(t, take(rule, now.Add(time.Second), 2).Cached, "several units")
	require.False(t, take(rule, now.Add(-time.Second), 1).Cached, "before the denial")
	bigger := rule
	bigger.Limit = 3
	require.True(t, take(bigger, now.Add(time.Second), 1).Allowed, "a raised limit is a new rule")
	require.False(t, take(rule, now.Add(time.Minute), 1).Cached, "past the retry time")

	inner.degraded = true
	key.ID = "degraded"
	take(rule, now, 2)
	take(rule, now, 1)
	require.False(t, take(rule, now, 1).Cached, "a degraded denial is not a fact about the store")

	_, err = cache.Take(ctx, backend.Request{Key: backend.Key{Prefix: "n:"}, Rule: rule, Now: now, Cost: 1})
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
}

type counting struct {
	backend.Store
	takes    atomic.Int64
	degraded bool
}

func (c *counting) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	c.takes.Add(1)
	d, err := c.Store.Take(ctx, req)
	d.Degraded = c.degraded
	return d, err
}

// cacheHoldingOneDenial returns a deny cache over a memory store and a
// bus that can go down, holding the denial of req (its second take under
// a limit of 1).
func cacheHoldingOneDenial(t *testing.T, ctx context.Context) (*denycache.Store, *flakyBus, backend.Request) {
	t.Helper()
	bus := &flakyBus{}
	mem, err := memorystore.New()
	require.NoError(t, err)
	cache, err := denycache.New(mem, bus, denycache.WithProbeInterval(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cache.Close() })
	require.NoError(t, cache.Ready(ctx))
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour}
	req := backend.Request{Key: backend.Key{Prefix: "b:", ID: "k"}, Rule: rule, Now: time.UnixMilli(1_700_000_000_000), Cost: 1}
	for range 2 {
		_, err := cache.Take(ctx, req)
		require.NoError(t, err)
	}
	require.Equal(t, 1, cache.Stats().Entries)
	return cache, bus, req
}

// TestBrokenSubscription: while the bus is down the cache answers nothing
// and holds nothing; it answers again once its probe comes back.
func TestBrokenSubscription(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cache, bus, req := cacheHoldingOneDenial(t, ctx)

	bus.setDown(true)
	for cache.Stats().Listening {
		require.NoError(t, ctx.Err(), "the cache never noticed that its subscription broke")
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, cache.Stats().Entries)
	d, err := cache.Take(ctx, req)
	require.NoError(t, err)
	require.False(t, d.Cached)

	bus.setDown(false)
	require.NoError(t, cache.Ready(ctx))
	d, err = cache.Take(ctx, req)
	require.NoError(t, err)
	require.False(t, d.Cached) // remembered anew
	d, err = cache.Take(ctx, req)
	require.NoError(t, err)
	require.True(t, d.Cached)
}

// flakyBus is an in-process bus that can drop every message.
type flakyBus struct {
	mu        sync.Mutex
	down      bool
	listeners []func(string)
}

func (b *flakyBus) setDown(v bool) { b.mu.Lock(); b.down = v; b.mu.Unlock() }

func (b *flakyBus) Publish(_ context.Context, _ string, msg string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return errors.New("bus down")
	}
	for _, fn := range b.listeners {
		fn(msg)
	}
	return nil
}

func (b *flakyBus) Listen(ctx context.Context, _ string, fn func(string)) error {
	b.mu.Lock()
	b.listeners = append(b.listeners, fn)
	b.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}
