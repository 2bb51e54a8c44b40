package fallback_test

// Integration tests of the fallback store over real redis-server processes
// (internal/dev/redistest), each run with both Redis clients: go-redis and
// rueidis. They kill, pause, flush and flap a single server; sentinel_test.go
// and cluster_test.go fail over a sentinel set and a Redis Cluster.
//
// The tests assert structure, never durations: which decisions were
// degraded, which touched the primary, how many each key admitted, which
// breaker transitions happened and how many primary calls fell in each
// breaker period. The durations the issue asks for (kill to first degraded
// decision, restart to first non-degraded one, latency during a pause) are
// measured and reported with t.Logf, on lines starting with "FIGURE".
//
// This file holds the shared harness: client constructors with short
// timeouts, a primary that counts its calls, a bounded load loop that records
// every decision, and the breaker's timeline from the state hook.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"runtime"
	"slices"
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
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// The breaker settings of every integration test: an outage is detected
// after three failures of at most 50 ms each, and probed every 200 ms.
const (
	itCallTimeout = 50 * time.Millisecond
	itThreshold   = 3
	itOpenTimeout = 200 * time.Millisecond
	itProbes      = 2

	// The load: itCallers goroutines, each pausing itPace between calls
	// so that fast local decisions do not spin the CPU.
	itCallers = 6
	itPace    = 2 * time.Millisecond
	// itWait bounds every wait for a condition (30 s for failovers).
	itWait = 10 * time.Second
)

// Client timeouts: short, so that a dead or hung server is detected within a
// few hundred milliseconds, and no dial retry loops.
const (
	itDialTimeout = 100 * time.Millisecond
	itIOTimeout   = 200 * time.Millisecond
)

// go-redis logs every failed dial; the outages here cause thousands.
func init() { redis.SetLogger(discardLogger{}) }

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// itConn is a store over one client, with the client's Close.
type itConn struct {
	store backend.Store
	once  sync.Once
	close func()
}

// Close closes the client, once; it is also called in t.Cleanup.
func (c *itConn) Close() { c.once.Do(c.close) }

func newItConn(t *testing.T, store backend.Store, closeFn func()) *itConn {
	t.Helper()
	c := &itConn{store: store, close: closeFn}
	t.Cleanup(c.Close)
	return c
}

// itClient builds stores of one client library over the three kinds of
// deployment.
type itClient struct {
	name     string
	single   func(t *testing.T, addr string) *itConn
	sentinel func(t *testing.T, sn *redistest.Sentinel) *itConn
	cluster  func(t *testing.T, c *redistest.Cluster) *itConn
}

var itClients = []itClient{
	{
		name: "goredis",
		single: func(t *testing.T, addr string) *itConn {
			c := redis.NewClient(&redis.Options{
				Addr: addr, PoolSize: 32,
				DialTimeout: itDialTimeout, ReadTimeout: itIOTimeout, WriteTimeout: itIOTimeout,
				PoolTimeout: itDialTimeout, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
			})
			s, err := goredisstore.New(c)
			require.NoError(t, err)
			return newItConn(t, s, func() { _ = c.Close() })
		},
		sentinel: func(t *testing.T, sn *redistest.Sentinel) *itConn {
			c := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: sn.MasterName, SentinelAddrs: sn.SentinelAddrs(), PoolSize: 32,
				DialTimeout: itDialTimeout, ReadTimeout: itIOTimeout, WriteTimeout: itIOTimeout,
				PoolTimeout: itDialTimeout, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
			})
			s, err := goredisstore.New(c)
			require.NoError(t, err)
			return newItConn(t, s, func() { _ = c.Close() })
		},
		cluster: func(t *testing.T, cl *redistest.Cluster) *itConn {
			c := redis.NewClusterClient(goredisClusterOptions(cl))
			s, err := goredisstore.New(c)
			require.NoError(t, err)
			return newItConn(t, s, func() { _ = c.Close() })
		},
	},
	{
		name: "rueidis",
		single: func(t *testing.T, addr string) *itConn {
			return newRueidis(t, rueidisOption([]string{addr}))
		},
		sentinel: func(t *testing.T, sn *redistest.Sentinel) *itConn {
			o := rueidisOption(sn.SentinelAddrs())
			o.Sentinel = rueidis.SentinelOption{MasterSet: sn.MasterName, Dialer: net.Dialer{Timeout: itDialTimeout}}
			return newRueidis(t, o)
		},
		cluster: func(t *testing.T, cl *redistest.Cluster) *itConn {
			return newRueidis(t, rueidisOption(cl.Addrs()))
		},
	},
}

// goredisClusterOptions are the cluster client's options: short timeouts,
// and go-redis' default slot-map reload interval (goredisstore asks for a
// reload after connection errors; see TestClusterFailoverGoRedisDefaultReload).
func goredisClusterOptions(cl *redistest.Cluster) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 32,
		DialTimeout: itDialTimeout, ReadTimeout: itIOTimeout, WriteTimeout: itIOTimeout,
		PoolTimeout: itDialTimeout, DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
	}
}

func rueidisOption(addrs []string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress: addrs, DisableCache: true,
		ConnWriteTimeout: itIOTimeout, Dialer: net.Dialer{Timeout: itDialTimeout},
	}
}

func newRueidis(t *testing.T, o rueidis.ClientOption) *itConn {
	t.Helper()
	// NewClient dials at once, within the short dial timeout, which a
	// loaded machine may miss on a server that is up: making the client is
	// setup, not what is tested, so it is tried again (at most 10 times).
	var c rueidis.Client
	var err error
	for range 10 {
		if c, err = rueidis.NewClient(o); err == nil {
			break
		}
	}
	require.NoError(t, err)
	s, err := rueidisstore.New(c)
	require.NoError(t, err)
	return newItConn(t, s, c.Close)
}

// forEachClient runs fn as one parallel subtest per client library. Each
// subtest starts its own servers. At most -parallel (GOMAXPROCS) of them
// run at once.
func forEachClient(t *testing.T, fn func(t *testing.T, cl itClient)) {
	for _, cl := range itClients {
		t.Run(cl.name, func(t *testing.T) {
			t.Parallel()
			fn(t, cl)
		})
	}
}

// touchKey marks a caller's context: the counting primary sets the flag it
// carries, so each decision knows whether it reached the primary.
type touchKey struct{}

// countingStore is a primary that records when each of its calls began.
type countingStore struct {
	backend.Store
	calls   atomic.Int64
	lastErr atomic.Pointer[error]
	mu      sync.Mutex
	entries []time.Time
	errs    map[string]int
}

// Unwrap returns the counted store, so that fallback finds its NodeOf.
func (c *countingStore) Unwrap() backend.Store { return c.Store }

func (c *countingStore) enter(ctx context.Context) {
	now := time.Now()
	c.calls.Add(1)
	if p, ok := ctx.Value(touchKey{}).(*atomic.Bool); ok {
		p.Store(true)
	}
	c.mu.Lock()
	c.entries = append(c.entries, now)
	c.mu.Unlock()
}

func (c *countingStore) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	c.enter(ctx)
	res, err := c.Store.Take(ctx, req)
	c.fail(err)
	return res, err
}

// fail records the errors of the primary, for failure messages.
func (c *countingStore) fail(err error) {
	if err != nil {
		c.lastErr.Store(&err)
		c.mu.Lock()
		if c.errs == nil {
			c.errs = map[string]int{}
		}
		c.errs[err.Error()]++
		c.mu.Unlock()
	}
}

// errorCounts returns how many times the primary returned each error
// message.
func (c *countingStore) errorCounts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.errs)
}

// lastError returns the last error the primary returned.
func (c *countingStore) lastError() error {
	if p := c.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *countingStore) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	c.enter(ctx)
	res, err := c.Store.Peek(ctx, req)
	c.fail(err)
	return res, err
}

func (c *countingStore) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	c.enter(ctx)
	err := c.Store.Reset(ctx, key, rule, time.Now())
	c.fail(err)
	return err
}

// entryTimes returns when each primary call began.
func (c *countingStore) entryTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.entries)
}

// harness is a fallback store over a counting primary, with its breaker's
// timeline, and the keys the load takes from.
type harness struct {
	t       *testing.T
	fb      *fallback.Store
	primary *countingStore
	rule    algorithms.Rule
	keys    []backend.Key

	mu       sync.Mutex
	changes  []backend.StateChange
	hookRuns atomic.Int64
}

// newHarness wraps primary in a counting store and a fallback store with
// the integration settings, then opts. The state hook records every
// transition and calls back into the store, as a hook may.
func newHarness(t *testing.T, primary backend.Store, rule algorithms.Rule, keys int, opts ...fallback.Option) *harness {
	t.Helper()
	h := &harness{t: t, primary: &countingStore{Store: primary}, rule: rule}
	prefix := fmt.Sprintf("fbit:%s:%d:", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
	for i := range keys {
		h.keys = append(h.keys, backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)})
	}
	var self atomic.Pointer[fallback.Store]
	all := append([]fallback.Option{
		fallback.WithLogger(quietLogger()),
		fallback.WithTimeout(itCallTimeout),
		fallback.WithFailureThreshold(itThreshold),
		fallback.WithOpenTimeout(itOpenTimeout),
		fallback.WithProbes(itProbes),
		fallback.WithStateHook(func(c backend.StateChange) {
			if s := self.Load(); s != nil {
				_ = s.Stats() // re-entering the store from the hook must not deadlock
			}
			h.hookRuns.Add(1)
			h.mu.Lock()
			h.changes = append(h.changes, c)
			h.mu.Unlock()
		}),
	}, opts...)
	fb, err := fallback.New(h.primary, all...)
	require.NoError(t, err)
	self.Store(fb)
	h.fb = fb
	return h
}

// stateChanges returns the transitions so far (delivering any queued one).
// settleClosed peeks every key (writing nothing) until the store's
// breakers are all closed or limit passes, and returns the state then.
func (h *harness) settleClosed(limit time.Duration) backend.BreakerState {
	deadline := time.Now().Add(limit)
	for h.fb.State() != backend.BreakerClosed && time.Now().Before(deadline) {
		for _, k := range h.keys {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = h.fb.Peek(ctx, backend.Request{Key: k, Rule: h.rule, Now: time.Now(), Cost: 1})
			cancel()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h.fb.State()
}

func (h *harness) stateChanges() []backend.StateChange {
	_ = h.fb.State()
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.changes)
}

// transitionsSince counts the transitions to state at or after t0.
func (h *harness) transitionsSince(to backend.BreakerState, t0 time.Time) int {
	n := 0
	for _, c := range h.stateChanges() {
		if c.To == to && !c.At.Before(t0) {
			n++
		}
	}
	return n
}

// breakerPeriod is a stretch of time the breaker spent in one state:
// [from, to), to being the zero time for the current state.
type breakerPeriod struct {
	state    backend.BreakerState
	from, to time.Time
}

func (p breakerPeriod) contains(t time.Time) bool {
	return !t.Before(p.from) && (p.to.IsZero() || t.Before(p.to))
}

// periods returns the breaker's timeline from the recorded transitions,
// whose At times gobreaker takes under its lock, in order. The store is
// created closed.
func (h *harness) periods() []breakerPeriod {
	ps := []breakerPeriod{{state: backend.BreakerClosed}}
	for _, c := range h.stateChanges() {
		last := &ps[len(ps)-1]
		require.Equal(h.t, last.state, c.From, "transitions out of order: %v", c)
		last.to = c.At
		ps = append(ps, breakerPeriod{state: c.To, from: c.At})
	}
	return ps
}

// loadDecision is one call of the load, as its caller saw it.
type loadDecision struct {
	key        int
	start, end time.Time // start is also the request's Now
	allowed    bool
	degraded   bool
	limit      int64
	err        error
	touch      *atomic.Bool // set when the call reached the primary
}

func (d loadDecision) latency() time.Duration { return d.end.Sub(d.start) }
func (d loadDecision) touched() bool          { return d.touch.Load() }

// loadRun is a load in progress.
type loadRun struct {
	stop    atomic.Bool
	wg      sync.WaitGroup
	results [][]loadDecision
	out     []loadDecision

	calls, fresh, degraded, errs atomic.Int64
	// lastFresh is the start (UnixNano) of the latest non-degraded
	// decision returned, per key.
	lastFresh []atomic.Int64
	// lastDegraded is the start (UnixNano) of a recent degraded decision
	// (callers store theirs in the order they return).
	lastDegraded atomic.Int64
}

// start runs itCallers goroutines taking from the harness's keys until
// stopped, at most perCaller calls each and for at most limit. Caller c's
// i-th call takes key (c*7+i) mod len(keys). Every decision is recorded.
func (h *harness) start(perCaller int, limit time.Duration) *loadRun {
	r := &loadRun{results: make([][]loadDecision, itCallers), lastFresh: make([]atomic.Int64, len(h.keys))}
	deadline := time.Now().Add(limit)
	for c := range itCallers {
		r.wg.Go(func() {
			for i := range perCaller {
				if r.stop.Load() || time.Now().After(deadline) {
					return
				}
				k := (c*7 + i) % len(h.keys)
				touch := new(atomic.Bool)
				ctx := context.WithValue(context.Background(), touchKey{}, touch)
				start := time.Now()
				res, err := h.fb.Take(ctx, backend.Request{Key: h.keys[k], Rule: h.rule, Now: start, Cost: 1})
				d := loadDecision{key: k, start: start, end: time.Now(), allowed: res.Allowed, degraded: res.Degraded,
					limit: res.Limit, err: err, touch: touch}
				r.results[c] = append(r.results[c], d)
				r.calls.Add(1)
				switch {
				case err != nil:
					r.errs.Add(1)
				case res.Degraded:
					r.degraded.Add(1)
					r.lastDegraded.Store(start.UnixNano())
				default:
					r.fresh.Add(1)
					r.lastFresh[k].Store(start.UnixNano())
				}
				time.Sleep(itPace)
			}
		})
	}
	h.t.Cleanup(func() { r.finish() })
	return r
}

// finish stops the load, waits for it and returns every decision, in no
// particular order. It may be called more than once.
func (r *loadRun) finish() []loadDecision {
	r.stop.Store(true)
	r.wg.Wait()
	if r.out == nil {
		r.out = slices.Concat(r.results...)
		if r.out == nil {
			r.out = []loadDecision{}
		}
	}
	return r.out
}

// freshSince reports whether key k had a non-degraded decision that
// started at or after t0.
func (r *loadRun) freshSince(k int, t0 time.Time) bool {
	return r.lastFresh[k].Load() >= t0.UnixNano()
}

// anyFreshSince reports whether some key had a non-degraded decision that
// started at or after t0.
func (r *loadRun) anyFreshSince(t0 time.Time) bool {
	for k := range r.lastFresh {
		if r.freshSince(k, t0) {
			return true
		}
	}
	return false
}

// waitUntilFor polls cond every 5 ms until it holds, for at most d. The
// optional details are added to the failure message.
func waitUntilFor(t *testing.T, d time.Duration, what string, cond func() bool, details ...func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("not within %v: %s", d, what)
			for _, f := range details {
				msg += "; " + f()
			}
			t.Fatal(msg)
		}
	}
}

// waitForCount waits until n reaches at least want.
func waitForCount(t *testing.T, n *atomic.Int64, want int64, what string) {
	t.Helper()
	waitUntilFor(t, itWait, what, func() bool { return n.Load() >= want },
		func() string { return fmt.Sprintf("%d of %d", n.Load(), want) })
}

// requireNoErrors checks that no caller saw an error.
func requireNoErrors(t *testing.T, ds []loadDecision) {
	t.Helper()
	for _, d := range ds {
		require.NoError(t, d.err, "a caller saw an error (key %d, at %v)", d.key, d.start)
	}
}

// firstSince returns the earliest-ending decision that started at or after
// t0 and matches, and whether there is one.
func firstSince(ds []loadDecision, t0 time.Time, match func(loadDecision) bool) (loadDecision, bool) {
	var best loadDecision
	found := false
	for _, d := range ds {
		if d.start.Before(t0) || !match(d) {
			continue
		}
		if !found || d.end.Before(best.end) {
			best, found = d, true
		}
	}
	return best, found
}

// latencyStats returns the maximum and the 99th percentile of the latencies
// of ds.
func latencyStats(ds []loadDecision) (maxLat, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	lats := make([]time.Duration, len(ds))
	for i, d := range ds {
		lats[i] = d.latency()
	}
	slices.Sort(lats)
	return lats[len(lats)-1], lats[int(math.Ceil(0.99*float64(len(lats))))-1]
}

// primaryCallsPerPeriod counts the primary calls that began in each
// period.
func primaryCallsPerPeriod(ps []breakerPeriod, entries []time.Time) []int {
	counts := make([]int, len(ps))
	for _, e := range entries {
		for i, p := range ps {
			if p.contains(e) {
				counts[i]++
				break
			}
		}
	}
	return counts
}

// localShareOf is Local(n)'s share of limit.
func localShareOf(limit int64, n int) int64 { return (limit + int64(n) - 1) / int64(n) }

// TestKilledRedis kills redis-server under load and restarts it: callers
// see no errors; the breaker opens; the local store holds each key to its
// share (ceil(limit/4)) during the outage; after the restart the breaker
// closes and decisions come from Redis again.
func TestKilledRedis(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		srv := redistest.Start(t)
		conn := cl.single(t, srv.Addr())
		const instances = 4
		// The window (a minute) is longer than the test, so each key's
		// local share is one budget for the whole outage.
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 20, Window: time.Minute}
		localShare := localShareOf(rule.Limit, instances)
		// Without baselines: each key starts the outage at the share, as a
		// key Redis never answered for does (blip_test.go tests keys that
		// continue from Redis's last answer).
		h := newHarness(t, conn.store, rule, 8, fallback.WithPolicy(backend.LocalPolicy(instances)), fallback.WithBaselines(0))
		r := h.start(100000, 40*time.Second)

		waitForCount(t, &r.fresh, 200, "decisions from Redis before the kill")
		killAt := time.Now()
		srv.Kill()
		waitUntilFor(t, itWait, "the breaker opens after the kill", func() bool { return h.transitionsSince(backend.BreakerOpen, killAt) > 0 })
		// Keep the outage on until every key has had far more calls than
		// its local share.
		degradedAtOpen := r.degraded.Load()
		waitForCount(t, &r.degraded, degradedAtOpen+int64(len(h.keys))*localShare*4, "degraded decisions during the outage")
		time.Sleep(time.Until(killAt.Add(time.Second)))
		restartAt := time.Now()
		srv.Restart()
		upAt := time.Now()
		waitUntilFor(t, itWait, "decisions from Redis after the restart", func() bool {
			return h.fb.State() == backend.BreakerClosed && h.transitionsSince(backend.BreakerClosed, restartAt) > 0 && r.anyFreshSince(restartAt)
		})
		freshAtClose := r.fresh.Load()
		waitForCount(t, &r.fresh, freshAtClose+100, "decisions from Redis after the breaker closed")
		ds := r.finish()

		requireNoErrors(t, ds)
		// Local limiting: every degraded decision (there is one local
		// store, and one window) was made against the share, and no key
		// was admitted more than its share.
		degradedAllowed := make([]int64, len(h.keys))
		var degraded, degradedDenied int
		for _, d := range ds {
			if !d.degraded {
				continue
			}
			degraded++
			require.Equal(t, localShare, d.limit, "a degraded decision against another limit than the local share")
			if d.allowed {
				degradedAllowed[d.key]++
			} else {
				degradedDenied++
			}
		}
		for k, n := range degradedAllowed {
			require.LessOrEqual(t, n, localShare, "key %d: %d degraded admissions, local share %d", k, n, localShare)
		}
		require.Equal(t, localShare, slices.Max(degradedAllowed), "the local store never admitted a full share")
		require.Positive(t, degradedDenied, "the local share was never exhausted")

		// The breaker: it opened after the kill, and the last transition
		// closed it after the restart.
		changes := h.stateChanges()
		require.NotEmpty(t, changes)
		opened, ok := firstTransition(changes, backend.BreakerOpen, killAt)
		require.True(t, ok, "the breaker never opened after the kill")
		last := changes[len(changes)-1]
		require.Equal(t, backend.BreakerClosed, last.To)
		require.True(t, last.At.After(restartAt), "the breaker closed before Redis was back")
		require.Equal(t, backend.BreakerClosed, h.fb.State())
		fresh, ok := firstSince(ds, restartAt, func(d loadDecision) bool { return !d.degraded })
		require.True(t, ok, "no decision from Redis after the restart")
		firstDegraded, ok := firstSince(ds, killAt, func(d loadDecision) bool { return d.degraded })
		require.True(t, ok)

		t.Logf("FIGURE %s kill: first degraded decision %v after the kill; breaker open %v after the kill",
			cl.name, firstDegraded.end.Sub(killAt), opened.At.Sub(killAt))
		t.Logf("FIGURE %s kill: restart took %v; first non-degraded decision %v after redis-server answered (%v after Restart was called); breaker closed %v after it answered",
			cl.name, upAt.Sub(restartAt), fresh.end.Sub(upAt), fresh.end.Sub(restartAt), last.At.Sub(upAt))
		t.Logf("FIGURE %s kill: degraded admissions per key during the outage %v (local share ceil(%d/%d) = %d); %d degraded decisions, %d denied; %d decisions in all",
			cl.name, degradedAllowed, rule.Limit, instances, localShare, degraded, degradedDenied, len(ds))
	})
}

// firstTransition returns the first transition to state at or after t0.
func firstTransition(changes []backend.StateChange, to backend.BreakerState, t0 time.Time) (backend.StateChange, bool) {
	for _, c := range changes {
		if c.To == to && !c.At.Before(t0) {
			return c, true
		}
	}
	return backend.StateChange{}, false
}

// TestPausedRedis freezes redis-server with SIGSTOP for three seconds under
// load. Every call during the pause ends degraded; once the breaker is open,
// calls do not reach the primary at all (each decision made entirely within
// an open period left the counting primary untouched), each half-open period
// lets at most the configured probes through, and after SIGCONT decisions
// come from Redis again. The latencies during the pause are reported, not
// asserted.
func TestPausedRedis(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		srv := redistest.Start(t)
		conn := cl.single(t, srv.Addr())
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 50, Window: time.Minute}
		h := newHarness(t, conn.store, rule, 8, fallback.WithPolicy(backend.LocalPolicy(2)))
		r := h.start(100000, 40*time.Second)

		waitForCount(t, &r.fresh, 200, "decisions from Redis before the pause")
		pauseAt := time.Now()
		srv.Pause()
		pausedAt := time.Now()
		waitUntilFor(t, itWait, "the breaker opens during the pause", func() bool { return h.transitionsSince(backend.BreakerOpen, pauseAt) > 0 })
		time.Sleep(3*time.Second - time.Since(pauseAt))
		resumeAt := time.Now()
		srv.Resume()
		waitUntilFor(t, itWait, "decisions from Redis after the resume", func() bool {
			return h.fb.State() == backend.BreakerClosed && h.transitionsSince(backend.BreakerClosed, resumeAt) > 0 && r.anyFreshSince(resumeAt)
		})
		ds := r.finish()
		requireNoErrors(t, ds)

		ps := h.periods()
		var during, inOpen []loadDecision
		for _, d := range ds {
			if !d.start.Before(pausedAt) && d.end.Before(resumeAt) {
				during = append(during, d)
				require.True(t, d.degraded, "a call sent to a frozen server was decided by it")
			}
			for _, p := range ps {
				if p.state == backend.BreakerOpen && d.start.After(p.from) && !p.to.IsZero() && d.end.Before(p.to) {
					inOpen = append(inOpen, d)
					require.False(t, d.touched(), "a decision made while the breaker was open reached the primary")
				}
			}
		}
		require.Greater(t, len(inOpen), 100, "too few decisions made entirely while the breaker was open to tell")

		// Primary calls per breaker period during the pause.
		counts := primaryCallsPerPeriod(ps, h.primary.entryTimes())
		var halfOpens, probes, stragglers int
		for i, p := range ps {
			if p.from.Before(pausedAt) || (!p.to.IsZero() && p.to.After(resumeAt)) {
				continue // not wholly within the pause
			}
			switch p.state {
			case backend.BreakerHalfOpen:
				halfOpens++
				probes += counts[i]
				require.LessOrEqual(t, counts[i], itProbes, "half-open period %d let more than the probes through", i)
			case backend.BreakerOpen:
				stragglers += counts[i]
				// A call admitted just before the breaker opened may begin
				// just after: at most one per caller.
				require.LessOrEqual(t, counts[i], itCallers, "open period %d: %d primary calls", i, counts[i])
			}
		}
		require.Positive(t, halfOpens, "no half-open period during the pause")
		var waited []loadDecision
		for _, d := range during {
			if d.touched() {
				waited = append(waited, d)
			}
		}
		touchedDuring := len(waited)

		maxLat, p99 := latencyStats(during)
		waitMax, waitP99 := latencyStats(waited)
		t.Logf("FIGURE %s pause: %d decisions during the 3 s pause, all degraded; latency max %v, p99 %v (deadline %v); of the %d that reached the primary: max %v, p99 %v",
			cl.name, len(during), maxLat, p99, itCallTimeout, len(waited), waitMax, waitP99)
		t.Logf("FIGURE %s pause: %d of them reached the primary; %d decisions made wholly while open reached it none of the time; %d half-open periods let %d probes through (at most %d each); %d calls began during open periods (admitted just before they opened)",
			cl.name, touchedDuring, len(inOpen), halfOpens, probes, itProbes, stragglers)
		if fresh, ok := firstSince(ds, resumeAt, func(d loadDecision) bool { return !d.degraded }); ok {
			t.Logf("FIGURE %s pause: first non-degraded decision %v after SIGCONT", cl.name, fresh.end.Sub(resumeAt))
		}
	})
}

// TestScriptFlushUnderLoad runs SCRIPT FLUSH every 100 ms for 2 s under
// load: NOSCRIPT is handled by the runner (EVALSHA, then EVAL), so no caller
// sees an error, no decision is degraded, the breaker never moves and the
// primary never fails; and each key admitted exactly its limit, as the
// server counts it (the EVAL re-sends counted nothing twice).
//
// The deadline here is 30 s, not 50 ms: a decision degraded because a busy
// test machine answered late would say nothing about NOSCRIPT, which would
// surface as a failure whatever the deadline (a second was seen exceeded
// under -race with a load average of 15 on 2 cores).
func TestScriptFlushUnderLoad(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		srv := redistest.Start(t)
		// The clients' own timeouts are their defaults (seconds), not the
		// suite's 100-200 ms, for the same reason.
		var conn *itConn
		switch cl.name {
		case "goredis":
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
			s, err := goredisstore.New(c)
			require.NoError(t, err)
			conn = newItConn(t, s, func() { _ = c.Close() })
		default:
			conn = newRueidis(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		}
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Minute}
		h := newHarness(t, conn.store, rule, 4, fallback.WithTimeout(30*time.Second))
		evalsBefore := scripttest.EvalCalls(t, srv)
		r := h.start(100000, 20*time.Second)
		waitForCount(t, &r.calls, 50, "decisions before the flushes")
		flushes := 0
		for begin := time.Now(); time.Since(begin) < 2*time.Second && flushes < 20; flushes++ {
			_, err := srv.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
		}
		ds := r.finish()

		requireNoErrors(t, ds)
		allowed := make([]int64, len(h.keys))
		for _, d := range ds {
			require.False(t, d.degraded, "a degraded decision during SCRIPT FLUSH; the primary's errors: %v", h.primary.errorCounts())
			if d.allowed {
				allowed[d.key]++
			}
		}
		st := h.fb.Stats()
		require.Zero(t, st.Degraded)
		require.Zero(t, st.PrimaryFailures)
		require.Equal(t, backend.BreakerClosed, st.State)
		require.Empty(t, h.stateChanges(), "the breaker moved")
		for k, key := range h.keys {
			require.Equal(t, rule.Limit, allowed[k], "key %d: admissions", k)
			require.Equal(t, rule.Limit, scripttest.Count(t, srv, rediswire.Key(key, rule)), "key %d: the server's count", k)
		}
		evals := scripttest.EvalCalls(t, srv) - evalsBefore
		require.Greater(t, evals, 1, "the flushes never forced a fallback to EVAL")
		t.Logf("%s: %d flushes, %d EVAL fallbacks, %d decisions, none degraded", cl.name, flushes, evals, len(ds))
	})
}

// TestFlappingRedis kills and restarts redis-server every second for 10 s
// under load: no caller sees an error, the test ends (no deadlock: the load
// is bounded and every wait too), each half-open period lets at most the
// configured probes reach the primary, the breaker opens at every outage and
// recovers between them and at the end, and once the load has stopped and
// the clients are closed, no goroutine is left behind. The two clients
// flap servers of their own at once; the goroutine count is the whole
// process's, so it is taken before both and checked after both (no other
// test runs beside this one, which is not parallel).
func TestFlappingRedis(t *testing.T) {
	redistest.Require(t)
	before := settledGoroutines()
	t.Run("clients", func(t *testing.T) {
		for _, cl := range itClients {
			t.Run(cl.name, func(t *testing.T) {
				t.Parallel()
				testFlapping(t, cl)
			})
		}
	})
	// The subtests' clients are closed and their servers killed.
	after := requireNoLeak(t, before)
	t.Logf("flapping: goroutines: %d before the clients were made, %d after they were closed", before, after)
}

// settledGoroutines returns the goroutine count once it has not changed for
// 100 ms (at most 2 s): goroutines of earlier tests may still be ending.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	stable := time.Now()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := runtime.NumGoroutine(); m != n {
			n, stable = m, time.Now()
		} else if time.Since(stable) >= 100*time.Millisecond {
			break
		}
	}
	return n
}

// requireNoLeak waits (at most 5 s) for the goroutine count to come back
// to before, and fails the test with every goroutine's stack if it stays
// above before+tolerance. What may still be running right after a load is
// winding down: the fallback's deadline goroutines and the clients'
// readers wait at most the client's I/O timeout. The tolerance allows for
// goroutines the test does not own, which come and go on their own:
// runtime.NumGoroutine counts the runtime's finalizer goroutine while it
// runs finalizers (of closed connections' files, say), and a testing
// goroutine of a finished test may not have exited yet.
func requireNoLeak(t *testing.T, before int) int {
	t.Helper()
	const tolerance = 2
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after = runtime.NumGoroutine()
		if after <= before || time.Now().After(deadline) {
			break
		}
	}
	if after > before+tolerance {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutine leak: %d goroutines before the client was made, %d after it was closed\n%s",
			before, after, buf[:runtime.Stack(buf, true)])
	}
	return after
}

func testFlapping(t *testing.T, cl itClient) {
	srv := redistest.Start(t)
	conn := cl.single(t, srv.Addr())
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 50, Window: time.Second}
	h := newHarness(t, conn.store, rule, 8, fallback.WithPolicy(backend.LocalPolicy(2)))
	r := h.start(100000, 40*time.Second)
	waitForCount(t, &r.fresh, 100, "decisions from Redis before the flapping")

	flapAt := time.Now()
	const cycles = 5          // down one second, up one second
	var downs []breakerPeriod // when the server was down
	for i := range cycles {
		srv.Kill()
		down := time.Now()
		time.Sleep(time.Until(flapAt.Add(time.Duration(2*i+1) * time.Second)))
		downs = append(downs, breakerPeriod{from: down, to: time.Now()})
		srv.Restart()
		time.Sleep(time.Until(flapAt.Add(time.Duration(2*i+2) * time.Second)))
	}
	flapEnd := time.Now()
	waitUntilFor(t, itWait, "decisions from Redis after the flapping", func() bool {
		return h.fb.State() == backend.BreakerClosed && r.anyFreshSince(flapEnd)
	})
	ds := r.finish()
	// The server is up: a client left open would still hold its
	// connections' goroutines (TestFlappingRedis counts them).
	conn.Close()

	requireNoErrors(t, ds)
	ps := h.periods()
	counts := primaryCallsPerPeriod(ps, h.primary.entryTimes())
	var opens, halfOpens, closes, probes, stragglers, maxProbes int
	for i, p := range ps {
		switch p.state {
		case backend.BreakerHalfOpen:
			halfOpens++
			probes += counts[i]
			maxProbes = max(maxProbes, counts[i])
			require.LessOrEqual(t, counts[i], itProbes, "half-open period %d (%v from the start of the flapping) let %d calls through",
				i, p.from.Sub(flapAt), counts[i])
		case backend.BreakerOpen:
			opens++
			stragglers += counts[i]
			// A call admitted just before the breaker opened may begin just
			// after: at most one per caller.
			require.LessOrEqual(t, counts[i], itCallers, "open period %d: %d primary calls", i, counts[i])
		case backend.BreakerClosed:
			if i > 0 {
				closes++
			}
		}
	}
	for i, down := range downs {
		opened := false
		for _, p := range ps {
			if p.state == backend.BreakerOpen && p.from.Before(down.to) && (p.to.IsZero() || p.to.After(down.from)) {
				opened = true
				break
			}
		}
		require.True(t, opened, "the breaker was not open during outage %d", i)
	}
	// Recovering within each one-second up time takes two probes that
	// answer within the deadline, which a loaded machine may not give
	// every time: require a recovery during the flapping (and, above, at
	// its end), and report how many.
	var closedWhileFlapping int
	for _, p := range ps[1:] {
		if p.state == backend.BreakerClosed && p.from.After(flapAt) && p.from.Before(flapEnd) {
			closedWhileFlapping++
		}
	}
	require.Positive(t, closedWhileFlapping, "the breaker never recovered while the server flapped")
	require.Equal(t, int64(len(ps)-1), h.hookRuns.Load(), "hook runs and transitions differ")
	var degraded int
	for _, d := range ds {
		if d.degraded {
			degraded++
		}
	}
	t.Logf("FIGURE %s flapping: %d decisions (%d degraded), %d openings, %d half-open periods letting %d probes through (at most %d in one, limit %d), %d recoveries (%d of them within the %d up times), %d primary calls began while open",
		cl.name, len(ds), degraded, opens, halfOpens, probes, maxProbes, itProbes, closes, closedWhileFlapping, cycles, stragglers)
}
