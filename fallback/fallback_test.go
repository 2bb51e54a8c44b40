package fallback_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/fallback"
	"github.com/stretchr/testify/require"
)

// flaky is a primary that works, fails or hangs on command.
type flaky struct {
	backend.Store
	mode  atomic.Int32 // 0 healthy, 1 failing, 2 hanging (ignores its context)
	calls atomic.Int64
	hang  chan struct{}
}

const (
	healthy = iota
	failing
	hanging
)

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func newFlaky(t *testing.T) *flaky {
	m, err := memorystore.New()
	require.NoError(t, err)
	f := &flaky{Store: m, hang: make(chan struct{})}
	t.Cleanup(func() { close(f.hang) })
	return f
}

func (f *flaky) enter() error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case failing:
		return errDown
	case hanging:
		<-f.hang
		return errDown
	}
	return nil
}

func (f *flaky) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.Store.Take(ctx, req)
}

func (f *flaky) Peek(ctx context.Context, req backend.Request) (backend.Result, error) {
	if err := f.enter(); err != nil {
		return backend.Result{}, err
	}
	return f.Store.Peek(ctx, req)
}

func (f *flaky) Reset(ctx context.Context, key backend.Key, rule algorithms.Rule, now time.Time) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.Reset(ctx, key, rule, time.Now())
}

var rule = algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute}

func req(id string) backend.Request {
	return backend.Request{Key: backend.Key{Prefix: "fb:", ID: id}, Rule: rule, Now: time.Now(), Cost: 1}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)) }

func newStore(t *testing.T, primary backend.Store, opts ...fallback.Option) *fallback.Store {
	t.Helper()
	s, err := fallback.New(primary, append([]fallback.Option{fallback.WithLogger(quietLogger())}, opts...)...)
	require.NoError(t, err)
	return s
}

func TestHealthyPrimaryDecides(t *testing.T) {
	p := newFlaky(t)
	s := newStore(t, p)
	for i := range 12 {
		res, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
		require.Equal(t, i < 10, res.Allowed)
		require.False(t, res.Degraded)
	}
	require.Equal(t, int64(12), p.calls.Load())
	require.Equal(t, backend.BreakerClosed, s.State())
}

func TestFailuresOpenTheBreakerAndLocalShareDecides(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithPolicy(backend.LocalPolicy(4)), fallback.WithFailureThreshold(3), fallback.WithOpenTimeout(time.Hour))
	allowed := 0
	for range 20 {
		res, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err, "callers see no errors")
		require.True(t, res.Degraded)
		require.Equal(t, int64(3), res.Limit, "ceil(10/4)")
		if res.Allowed {
			allowed++
		}
	}
	require.Equal(t, 3, allowed, "the local share holds")
	require.Equal(t, int64(3), p.calls.Load(), "no primary calls once open")
	st := s.Stats()
	require.Equal(t, backend.BreakerOpen, st.State)
	require.Equal(t, uint64(3), st.PrimaryFailures)
	require.Equal(t, uint64(20), st.Degraded)
}

func TestPoliciesPerLimit(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithOpenTimeout(time.Hour))
	open, closed := s.Policy(backend.FailOpen), s.Policy(backend.FailClosed)
	for range 15 {
		res, err := open.Take(t.Context(), req("login"))
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.True(t, res.Degraded)

		res, err = closed.Take(t.Context(), req("payment"))
		require.NoError(t, err)
		require.False(t, res.Allowed)
		require.True(t, res.Degraded)
		require.Positive(t, res.RetryAfter)
	}
	require.Equal(t, backend.BreakerOpen, closed.State(), "views share the breaker")
	require.Equal(t, "fail_open", backend.FailOpen.String())
	require.Equal(t, "local:3", backend.LocalPolicy(3).String())
}

func TestCostAboveTheLocalShareIsDenied(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithPolicy(backend.LocalPolicy(5)))
	r := req("a")
	r.Cost = 3 // share is 2
	res, err := s.Take(t.Context(), r)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.True(t, res.Degraded)
}

// TestHungPrimaryIsNotWaitedFor: the primary ignores its context and never
// returns; calls still end, degraded.
func TestHungPrimaryIsNotWaitedFor(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(hanging)
	s := newStore(t, p, fallback.WithTimeout(20*time.Millisecond), fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(time.Hour))
	for range 5 {
		res, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
		require.True(t, res.Degraded)
	}
	require.Equal(t, int64(2), p.calls.Load())
	require.Equal(t, backend.BreakerOpen, s.State())
}

func TestCallerCancellationDoesNotCount(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(hanging)
	s := newStore(t, p, fallback.WithTimeout(time.Hour), fallback.WithFailureThreshold(1))
	for range 5 {
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			for p.calls.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := s.Take(ctx, req("a"))
		require.ErrorIs(t, err, context.Canceled)
		cancel()
		p.calls.Store(0)
	}
	require.Equal(t, backend.BreakerClosed, s.State())
	require.Zero(t, s.Stats().PrimaryFailures)
}

func TestInvalidRequestsAreErrorsNotFailures(t *testing.T) {
	p := newFlaky(t)
	s := newStore(t, p, fallback.WithFailureThreshold(1))
	bad := req("")
	_, err := s.Take(t.Context(), bad)
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	r := req("a")
	r.Cost = 11
	_, err = s.Peek(t.Context(), r)
	require.ErrorIs(t, err, algorithms.ErrInvalidRequest)
	require.Equal(t, backend.BreakerClosed, s.State())
	require.Zero(t, s.Stats().PrimaryFailures)
	// Passed on unchecked: the primary checks what it decides.
	require.Equal(t, int64(2), p.calls.Load())
}

func TestRecoveryThroughHalfOpenProbes(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	var mu sync.Mutex
	var changes []backend.StateChange
	var s *fallback.Store
	s = newStore(t, p, fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(30*time.Millisecond), fallback.WithProbes(2),
		fallback.WithStateHook(func(c backend.StateChange) {
			_ = s.Stats() // calling back into the store must not deadlock
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		}))
	for range 3 {
		_, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
	}
	require.Equal(t, backend.BreakerOpen, s.State())
	p.mode.Store(healthy)
	waitFor(t, func() bool { return s.State() == backend.BreakerHalfOpen })
	for range 2 {
		res, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
		require.False(t, res.Degraded)
	}
	require.Equal(t, backend.BreakerClosed, s.State())
	mu.Lock()
	defer mu.Unlock()
	var seen []string
	for _, c := range changes {
		seen = append(seen, string(c.From)+">"+string(c.To))
	}
	require.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, seen)
}

// TestProbesAreBounded: with the primary down and callers hammering, the
// primary sees the threshold's calls (plus those already in flight when the
// breaker opened) and at most the probe count per half-open period.
func TestProbesAreBounded(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(failing)
	var halfOpens atomic.Int64
	s := newStore(t, p, fallback.WithFailureThreshold(3), fallback.WithOpenTimeout(5*time.Millisecond), fallback.WithProbes(2),
		fallback.WithStateHook(func(c backend.StateChange) {
			if c.To == backend.BreakerHalfOpen {
				halfOpens.Add(1)
			}
		}))
	const callers = 8
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if _, err := s.Take(t.Context(), req("k")); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	_ = s.State()
	require.Positive(t, halfOpens.Load())
	// Before it opens: three failure events, each of at most one call per
	// caller (failures of calls in flight together are one event), and up
	// to callers-1 calls let through as it opens; then 2 probes per
	// half-open period.
	require.LessOrEqual(t, p.calls.Load(), 3*callers+(callers-1)+2*halfOpens.Load())
}

func TestResetReportsUnavailablePrimary(t *testing.T) {
	p := newFlaky(t)
	local, err := memorystore.New()
	require.NoError(t, err)
	s := newStore(t, p, fallback.WithLocalStore(local), fallback.WithOpenTimeout(time.Hour))
	p.mode.Store(failing)
	res, err := s.Take(t.Context(), req("a")) // decided locally
	require.NoError(t, err)
	require.True(t, res.Degraded)
	peek, err := local.Peek(t.Context(), req("a"))
	require.NoError(t, err)
	require.Equal(t, int64(9), peek.Remaining)

	err = s.Reset(t.Context(), backend.Key{Prefix: "fb:", ID: "a"}, rule, time.Now())
	require.ErrorIs(t, err, fallback.ErrUnavailable)
	require.ErrorIs(t, err, errDown)
	peek, err = local.Peek(t.Context(), req("a"))
	require.NoError(t, err)
	require.Equal(t, int64(10), peek.Remaining, "the local state was reset anyway")
}

func TestStateChangesAreLogged(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(b)
	}), nil))
	p := newFlaky(t)
	p.mode.Store(failing)
	s, err := fallback.New(p, fallback.WithLogger(logger), fallback.WithFailureThreshold(1), fallback.WithName("redis-main"))
	require.NoError(t, err)
	_, err = s.Take(t.Context(), req("a"))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, buf.String(), "level=WARN")
	require.Contains(t, buf.String(), "breaker=redis-main from=closed to=open")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestBadOptions(t *testing.T) {
	p := newFlaky(t)
	for name, opt := range map[string]fallback.Option{
		"WithTimeout": fallback.WithTimeout(0), "WithFailureThreshold": fallback.WithFailureThreshold(0),
		"WithOpenTimeout": fallback.WithOpenTimeout(-1), "WithProbes": fallback.WithProbes(0),
		"WithLocalStore": fallback.WithLocalStore(nil), "WithLogger": fallback.WithLogger(nil),
		"WithBaselines": fallback.WithBaselines(-1),
	} {
		// A valid option before it is applied; the bad one's error names it.
		_, err := fallback.New(p, fallback.WithName("x"), opt)
		require.ErrorContains(t, err, "fallback: "+name+": ", name)
	}
	_, err := fallback.New(nil)
	require.ErrorContains(t, err, "primary store is nil")
	s, err := fallback.New(p, nil, fallback.WithLogger(quietLogger()))
	require.NoError(t, err, "a nil option is ignored")
	require.NotNil(t, s)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10s")
}

// refundCounter is a primary that reports failed refunds, as the Redis
// stores do.
type refundCounter struct{ storetest.Down }

func (refundCounter) FailedRefunds() uint64 { return 7 }

func TestStatsReportThePrimarysFailedRefunds(t *testing.T) {
	s := newStore(t, refundCounter{})
	require.Equal(t, uint64(7), s.Stats().FailedRefunds)
	require.Zero(t, newStore(t, storetest.Down{}).Stats().FailedRefunds)
}
