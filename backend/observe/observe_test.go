package observe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// recorder collects what an Observer receives.
type recorder struct {
	mu        sync.Mutex
	decisions []Decision
	traces    []any // each decision's context's traceKey value
	changes   []BreakerChange
	evictions []Evictions
}

func (r *recorder) observer() Observer {
	return Observer{
		OnDecision: func(ctx context.Context, d Decision) {
			r.mu.Lock()
			r.decisions = append(r.decisions, d)
			r.traces = append(r.traces, ctx.Value(traceKey{}))
			r.mu.Unlock()
		},
		OnBreakerChange: func(c BreakerChange) { r.mu.Lock(); r.changes = append(r.changes, c); r.mu.Unlock() },
		OnEvictions:     func(e Evictions) { r.mu.Lock(); r.evictions = append(r.evictions, e); r.mu.Unlock() },
	}
}

func (r *recorder) outcomes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, d := range r.decisions {
		s := string(d.Op) + " " + d.Policy + " " + d.Outcome()
		if d.Degraded {
			s += " degraded"
		}
		out = append(out, s)
	}
	return out
}

func newMemory(t *testing.T, opts ...memorystore.Option) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(opts...)
	require.NoError(t, err)
	return s
}

func TestWrapReportsDecisions(t *testing.T) {
	var rec recorder
	store := Wrap(newMemory(t), rec.observer())
	fake := clock.NewFake(start)
	lim, err := limiter.New(store, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(fake))
	require.NoError(t, err)
	ctx := context.Background()

	for range 3 {
		_, err := lim.Allow(ctx, "alice")
		require.NoError(t, err)
	}
	_, err = lim.Peek(ctx, "alice")
	require.NoError(t, err)
	require.NoError(t, lim.Reset(ctx, "alice"))
	d, err := lim.AllowN(ctx, "alice", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed, "forwarded to the real store")

	assert.Equal(t, []string{
		"take api: allowed", "take api: allowed", "take api: denied",
		"peek api: denied", "reset api: reset", "take api: allowed",
	}, rec.outcomes())
	assert.EqualValues(t, 2, rec.decisions[5].Cost)
	for _, d := range rec.decisions {
		assert.GreaterOrEqual(t, d.Latency, time.Duration(0))
		assert.NoError(t, d.Err)
	}
}

var errDown = errors.New("connection refused")

func TestWrapReportsErrorsAndDegraded(t *testing.T) {
	var rec recorder
	obs := rec.observer()
	lim, err := limiter.New(Wrap(storetest.Down{Err: errDown}, obs), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "p:"})
	require.NoError(t, err)
	_, err = lim.Allow(context.Background(), "k")
	require.ErrorIs(t, err, errDown)
	require.Len(t, rec.decisions, 1)
	assert.ErrorIs(t, rec.decisions[0].Err, errDown)
	assert.Equal(t, "error", rec.decisions[0].Outcome())

	// A fallback store over the failing one: decisions go on, degraded, and
	// the breaker's changes reach the same observer.
	rec = recorder{}
	obs = rec.observer()
	guard, err := fallback.New(storetest.Down{Err: errDown}, fallback.WithFailureThreshold(1),
		fallback.WithLogger(slog.New(slog.DiscardHandler)), fallback.WithStateHook(obs.BreakerHook("redis")))
	require.NoError(t, err)
	lim, err = limiter.New(Wrap(guard, obs), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "p:"})
	require.NoError(t, err)
	for range 2 {
		_, err = lim.Allow(context.Background(), "k")
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"take p: allowed degraded", "take p: denied degraded"}, rec.outcomes())
	require.Len(t, rec.changes, 1)
	assert.Equal(t, "redis", rec.changes[0].Breaker)
	assert.Equal(t, backend.BreakerClosed, rec.changes[0].From)
	assert.Equal(t, backend.BreakerOpen, rec.changes[0].To)
}

// TestWrapObservesEveryMethod fails when backend.Store gains a method this
// package does not observe: the wrapper would forward it unobserved.
func TestWrapObservesEveryMethod(t *testing.T) {
	ctx := context.Background()
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}
	req := func(prefix string) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: prefix, ID: "id"}, Rule: rule, Now: start, Cost: 1}
	}
	calls := map[string]func(s backend.Store) error{
		"Take": func(s backend.Store) error { _, err := s.Take(ctx, req("a:")); return err },
		"Peek": func(s backend.Store) error { _, err := s.Peek(ctx, req("a:")); return err },
		"Reset": func(s backend.Store) error {
			return s.Reset(ctx, backend.Key{Prefix: "a:", ID: "id"}, rule, time.Now())
		},
		"TakeAll": func(s backend.Store) error {
			_, err := s.TakeAll(ctx, []backend.Request{req("a:"), req("b:")})
			return err
		},
	}
	iface := reflect.TypeFor[backend.Store]()
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		call, ok := calls[name]
		if !assert.True(t, ok, "backend.Store.%s is not observed: override it in package observe and add it here", name) {
			continue
		}
		var rec recorder
		require.NoError(t, call(Wrap(newMemory(t), rec.observer())), name)
		assert.Len(t, rec.decisions, 1, name)
	}
}

func TestTakeAllPolicy(t *testing.T) {
	var rec recorder
	store := Wrap(newMemory(t), rec.observer())
	ctx := context.Background()
	tight := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}
	loose := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute}
	reqs := []backend.Request{
		{Key: backend.Key{Prefix: "loose:", ID: "u"}, Rule: loose, Now: start, Cost: 1},
		{Key: backend.Key{Prefix: "tight:", ID: "u"}, Rule: tight, Now: start, Cost: 1},
	}
	res, err := store.TakeAll(ctx, reqs)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = store.TakeAll(ctx, reqs)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	assert.Equal(t, []string{"take_all tight: allowed", "take_all tight: denied"}, rec.outcomes(),
		"the policy is the request that decided")
	assert.EqualValues(t, 2, rec.decisions[0].Cost)
}

func TestWrapNilAndUnwrap(t *testing.T) {
	assert.Nil(t, Wrap(nil, Observer{}))
	_, err := limiter.New(Wrap(nil, Observer{}), limiter.Config{Limit: 1, Window: time.Second})
	require.ErrorContains(t, err, "store is nil")

	mem := newMemory(t)
	found, ok := backend.As[*memorystore.Store](Wrap(mem, Observer{}))
	assert.True(t, ok)
	assert.Same(t, mem, found)
	ec, ok := backend.As[backend.EvictionCounter](Wrap(Wrap(mem, Observer{}), Observer{}))
	assert.True(t, ok)
	assert.Same(t, mem, ec)
	// The zero Observer forwards without observing.
	res, err := Wrap(mem, Observer{}).Take(context.Background(), backend.Request{
		Key: backend.Key{ID: "x"}, Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}, Now: start, Cost: 1})
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

func TestJoin(t *testing.T) {
	var a, b recorder
	obs := Join(a.observer(), Observer{}, b.observer())
	obs.OnDecision(withTrace("t-1"), Decision{Op: Take, Policy: "p:", Allowed: true})
	obs.BreakerHook("r")(backend.StateChange{From: backend.BreakerOpen, To: backend.BreakerHalfOpen})
	obs.OnEvictions(Evictions{Store: "m", Active: 1, Total: 1})
	for _, r := range []*recorder{&a, &b} {
		assert.Equal(t, []string{"take p: allowed"}, r.outcomes())
		assert.Equal(t, []any{"t-1"}, r.traces, "each observer gets the context")
		assert.Len(t, r.changes, 1)
		assert.Len(t, r.evictions, 1)
	}
	empty := Join(Observer{})
	assert.Nil(t, empty.OnDecision)
	empty.BreakerHook("x")(backend.StateChange{}) // nothing to call, no panic
}

func TestEvictionWatcher(t *testing.T) {
	_, err := WatchEvictions("m", nil, Observer{})
	require.ErrorContains(t, err, "nil")

	mem := newMemory(t, memorystore.WithMaxKeys(1))
	var rec recorder
	w, err := WatchEvictions("local", mem, rec.observer())
	require.NoError(t, err)
	lim, err := limiter.New(mem, limiter.Config{Limit: 5, Window: time.Minute}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		_, err := lim.Allow(ctx, k) // each new key evicts the previous, still active
		require.NoError(t, err)
	}
	e := w.Check()
	assert.Equal(t, Evictions{Store: "local", Active: 2, Total: 2}, e)
	assert.Equal(t, Evictions{Store: "local", Active: 0, Total: 2}, w.Check())
	assert.Equal(t, []Evictions{{Store: "local", Active: 2, Total: 2}}, rec.evictions, "only growth is reported")

	require.ErrorContains(t, w.Run(ctx, 0), "must be positive")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, w.Run(cancelled, time.Hour), context.Canceled)
}

func TestSlog(t *testing.T) {
	var buf bytes.Buffer
	obs := Slog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	obs.OnDecision(context.Background(), Decision{Op: Take, Policy: "api:", Allowed: true, Degraded: true, Cost: 1})
	obs.OnDecision(context.Background(), Decision{Op: Take, Policy: "api:", Err: errDown})
	obs.BreakerHook("redis")(backend.StateChange{From: backend.BreakerClosed, To: backend.BreakerOpen})
	obs.OnEvictions(Evictions{Store: "local", Active: 3, Total: 9})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4)
	assert.Contains(t, lines[0], "level=DEBUG")
	assert.Contains(t, lines[0], "outcome=allowed degraded=true")
	assert.Contains(t, lines[1], "level=WARN")
	assert.Contains(t, lines[1], `error="connection refused"`)
	assert.Contains(t, lines[2], "level=WARN")
	assert.Contains(t, lines[2], "breaker=redis from=closed to=open")
	assert.Contains(t, lines[3], "evicted=3 total=9")

	// At Info, decisions are not logged; errors still are.
	buf.Reset()
	obs = Slog(slog.New(slog.NewTextHandler(&buf, nil)))
	obs.OnDecision(context.Background(), Decision{Op: Take, Policy: "api:", Allowed: true})
	assert.Empty(t, buf.String())
	obs.OnDecision(context.Background(), Decision{Op: Take, Policy: "api:", Err: errDown})
	assert.Contains(t, buf.String(), "store call failed")
}

// traceKey keys a trace id in a context, as tracing libraries do.
type traceKey struct{}

func withTrace(id string) context.Context {
	return context.WithValue(context.Background(), traceKey{}, id)
}

// TestDecisionsGetTheCallsContext: every observed call hands its own
// context to OnDecision, so a request's trace id reaches the hook.
func TestDecisionsGetTheCallsContext(t *testing.T) {
	var rec recorder
	store := Wrap(newMemory(t), rec.observer())
	lim, err := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: "api:"}, limiter.WithClock(clock.NewFake(start)))
	require.NoError(t, err)
	_, err = lim.Allow(withTrace("allow"), "alice")
	require.NoError(t, err)
	_, err = lim.Peek(withTrace("peek"), "alice")
	require.NoError(t, err)
	require.NoError(t, lim.Reset(withTrace("reset"), "alice"))
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}
	_, err = store.TakeAll(withTrace("take_all"), []backend.Request{{Key: backend.Key{Prefix: "b:", ID: "u"}, Rule: rule, Now: start, Cost: 1}})
	require.NoError(t, err)
	assert.Equal(t, []any{"allow", "peek", "reset", "take_all"}, rec.traces)
}

// traceHandler is a slog.Handler that, like a tracing library's, adds the
// context's trace id to each record.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := ctx.Value(traceKey{}).(string); ok {
		r.AddAttrs(slog.String("trace", id))
	}
	return h.Handler.Handle(ctx, r)
}

// TestSlogKeepsTraceIDs: Slog logs decisions and errors with the call's
// context, so a handler that reads trace ids from it writes them.
func TestSlogKeepsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(traceHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})})
	lim, err := limiter.New(Wrap(newMemory(t), Slog(logger)), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "api:"})
	require.NoError(t, err)
	_, err = lim.Allow(withTrace("abc123"), "alice")
	require.NoError(t, err)
	lim, err = limiter.New(Wrap(storetest.Down{Err: errDown}, Slog(logger)), limiter.Config{Limit: 1, Window: time.Minute, Prefix: "api:"})
	require.NoError(t, err)
	_, err = lim.Allow(withTrace("def456"), "alice")
	require.ErrorIs(t, err, errDown)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "limitkit: decision")
	assert.Contains(t, lines[0], "trace=abc123")
	assert.Contains(t, lines[1], "store call failed")
	assert.Contains(t, lines[1], "trace=def456")
}

// TestWatchEvictionsTypedNil: a nil *memorystore.Store in the interface is
// refused like a nil interface, not called.
func TestWatchEvictionsTypedNil(t *testing.T) {
	var mem *memorystore.Store
	_, err := WatchEvictions("m", mem, Observer{})
	require.ErrorContains(t, err, "nil")
}

// TestDependsOnNoStore: observing links neither the fallback store (and its
// circuit breaker library) nor the memory store; it names them through
// backend and backend.EvictionCounter.
func TestDependsOnNoStore(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/limitkit/limitkit/backend", "the check reads the list")
	for _, p := range []string{"github.com/limitkit/limitkit/fallback", "github.com/limitkit/limitkit/backend/memorystore", "github.com/sony/gobreaker/v2"} {
		assert.False(t, slices.Contains(deps, p), "backend/observe depends on %s", p)
	}
}
