package fallback_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

// baselineCase is a fallback store over a flaky primary (a memory store
// that fails on command) and a request builder at fake times.
type baselineCase struct {
	t    *testing.T
	p    *flaky
	s    *fallback.Store
	rule algorithms.Rule
	at   time.Time
}

func newBaselineCase(t *testing.T, rule algorithms.Rule, opts ...fallback.Option) *baselineCase {
	p := newFlaky(t)
	return &baselineCase{t: t, p: p, rule: rule, at: time.Date(2030, 1, 1, 0, 10, 0, 0, time.UTC),
		// A minute's deadline (opts may set another): the primary is in
		// memory, and a loaded machine may not run a call within the
		// default 100 ms, which would read as a degraded answer.
		s: newStore(t, p, append([]fallback.Option{fallback.WithOpenTimeout(time.Hour), fallback.WithTimeout(time.Minute)}, opts...)...)}
}

func (c *baselineCase) req(id string, policy backend.FailurePolicy) backend.Request {
	return backend.Request{Key: backend.Key{Prefix: "base:", ID: id}, Rule: c.rule, Now: c.at, Cost: 1, OnFailure: policy}
}

// takeN makes calls Takes of id and returns how many were admitted; every
// answer must be degraded as degraded says.
func (c *baselineCase) takeN(id string, policy backend.FailurePolicy, calls int, degraded bool) int {
	c.t.Helper()
	admitted := 0
	for range calls {
		res, err := c.s.Take(context.Background(), c.req(id, policy))
		require.NoError(c.t, err)
		require.Equal(c.t, degraded, res.Degraded)
		if res.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestBaselineFixedWindow: a key Redis reported spent is refused until its
// window ends, then admitted its share; one with 20 left admits 20; under
// LocalPolicy(3) floor(20/3) = 6; a key never seen ceil(50/3) = 17.
func TestBaselineFixedWindow(t *testing.T) {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 50, Window: time.Hour})
	local := backend.LocalPolicy(1)
	require.Equal(t, 50, c.takeN("spent", local, 51, false))
	require.Equal(t, 30, c.takeN("twenty", local, 30, false))
	require.Equal(t, 30, c.takeN("twenty3", local, 30, false))
	c.p.mode.Store(failing)
	c.at = c.at.Add(time.Minute)
	res, err := c.s.Take(context.Background(), c.req("spent", local))
	require.NoError(t, err)
	require.True(t, res.Degraded && !res.Allowed)
	require.Equal(t, 49*time.Minute, res.RetryAfter, "refused until the window Redis counted in ends")
	require.Zero(t, c.takeN("spent", local, 100, true), "spent on Redis")
	require.Equal(t, 20, c.takeN("twenty", local, 100, true), "20 left on Redis")
	require.Equal(t, 6, c.takeN("twenty3", backend.LocalPolicy(3), 100, true), "floor(20/3)")
	require.Equal(t, 17, c.takeN("fresh3", backend.LocalPolicy(3), 100, true), "never seen: ceil(50/3)")
	c.at = c.at.Add(time.Hour) // the next window: Redis's count is gone
	require.Equal(t, 50, c.takeN("spent", local, 100, true), "a new window: the policy's share")
}

// TestBaselineCarriesLocalAdmissions: what the policy admitted during the
// blip (Redis does not know of it) stays counted, after the blip too: two
// blips in one window cost at most what was left.
func TestBaselineCarriesLocalAdmissions(t *testing.T) {
	defer fallback.SetSkipHolds(false)() // holds are off by default (hold.go)
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 50, Window: time.Hour},
		fallback.WithOpenTimeout(time.Millisecond), fallback.WithFailureThreshold(1), fallback.WithProbes(1))
	local := backend.LocalPolicy(1)
	require.Equal(t, 30, c.takeN("k", local, 30, false))
	c.p.mode.Store(failing)
	require.Equal(t, 12, c.takeN("k", local, 12, true), "12 of the 20 left, locally")
	c.p.mode.Store(healthy)
	waitUntilFor(t, time.Second, "the breaker closes", func() bool {
		_, err := c.s.Peek(context.Background(), c.req("k", local))
		return err == nil && c.s.State() == backend.BreakerClosed
	})
	res, err := c.s.Peek(context.Background(), c.req("k", local))
	require.NoError(t, err)
	require.False(t, res.Degraded)
	// Redis says 20 (it does not know of the local admissions); the
	// answer from before the outage holds them until its reset (hold.go).
	require.Equal(t, int64(8), res.Remaining, "the hold did not count the local admissions")
	c.p.mode.Store(failing)
	require.Equal(t, 8, c.takeN("k", local, 50, true), "the second blip: 20 left on Redis, 12 already admitted locally")
}

// TestBaselineGCRARefills: a gcra key Redis reported spent is refused
// until the refill covers a unit (RetryAfter says when), then admitted.
func TestBaselineGCRARefills(t *testing.T) {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.GCRA, Limit: 60, Window: time.Hour})
	local := backend.LocalPolicy(1)
	require.Equal(t, 60, c.takeN("g", local, 61, false))
	c.p.mode.Store(failing)
	res, err := c.s.Take(context.Background(), c.req("g", local))
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, time.Minute, res.RetryAfter, "one unit a minute")
	c.at = c.at.Add(time.Minute)
	require.Equal(t, 1, c.takeN("g", local, 5, true))
	c.at = c.at.Add(3 * time.Minute)
	require.Equal(t, 3, c.takeN("g", local, 5, true))
}

// TestBaselineMissedDeadlineCounts: a Take that missed its deadline may
// still be counted by Redis; its cost is counted against the baseline.
func TestBaselineMissedDeadlineCounts(t *testing.T) {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Hour},
		fallback.WithTimeout(20*time.Millisecond), fallback.WithFailureThreshold(100))
	local := backend.LocalPolicy(1)
	require.Equal(t, 5, c.takeN("m", local, 5, false))
	c.p.mode.Store(hanging)
	// Each hanging Take counts 1 against the 5 left (sent) and, admitted
	// by the policy, 1 more: the first two are admitted (counts 2, then
	// 4), the third finds 5 counted.
	admitted := c.takeN("m", local, 5, true)
	require.Equal(t, 2, admitted, "each timed-out Take counts twice against the 5 left: once sent, once admitted")
}

// TestBaselineResetForgets: a Reset forgets what Redis said of the key.
func TestBaselineResetForgets(t *testing.T) {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Hour})
	local := backend.LocalPolicy(1)
	require.Equal(t, 5, c.takeN("r", local, 6, false))
	require.NoError(t, c.s.Reset(context.Background(), backend.Key{Prefix: "base:", ID: "r"}, c.rule, time.Now()))
	c.p.mode.Store(failing)
	require.Equal(t, 5, c.takeN("r", local, 10, true), "reset: the policy's share")
}

// TestBaselinesBounded: at most WithBaselines keys are remembered: of
// 1,000 keys Redis reported spent, with 64 remembered, most are forgotten
// and start at the share, the most recent are still refused.
func TestBaselinesBounded(t *testing.T) {
	c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour},
		fallback.WithBaselines(64))
	local := backend.LocalPolicy(1)
	const keys = 1000
	for i := range keys {
		require.Equal(t, 1, c.takeN(strconv.Itoa(i), local, 2, false))
	}
	c.p.mode.Store(failing)
	refused := 0
	for i := range keys {
		if c.takeN(strconv.Itoa(i), local, 1, true) == 0 {
			refused++
		}
	}
	require.LessOrEqual(t, refused, 64, "more keys remembered than the bound")
	require.Positive(t, refused, "no key remembered")
	require.Zero(t, c.takeN(strconv.Itoa(keys-1), local, 1, true), "the most recent key is remembered")
}

// TestBaselinesHoldN (issue 43, item 8): WithBaselines(n) remembers n
// keys, not n/64 per shard: n spent keys, each reported once, all stay
// refused while the primary is down (93 of 1,000 were forgotten when
// each of the 64 shards held 16). The control: of n+1 keys, exactly one
// is forgotten (the table is full at n).
func TestBaselinesHoldN(t *testing.T) {
	for _, n := range []int{1000, 5000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			c := newBaselineCase(t, algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Hour},
				fallback.WithBaselines(n))
			local := backend.LocalPolicy(1)
			for i := range n + 1 {
				require.Equal(t, 1, c.takeN(strconv.Itoa(i), local, 2, false))
			}
			c.p.mode.Store(failing)
			forgotten := 0
			for i := range n + 1 {
				if c.takeN(strconv.Itoa(i), local, 1, true) != 0 {
					forgotten++
				}
			}
			require.Equal(t, 1, forgotten, "of %d keys with %d remembered, forgotten", n+1, n)
		})
	}
}

// batchFailing fails every call, once n calls are in flight together: one
// slow batch, as many callers see it at once.
type batchFailing struct {
	backend.Store
	n       int64
	entered atomic.Int64
	release chan struct{}
}

func (b *batchFailing) HonoursContext() bool { return true }

func (b *batchFailing) Take(ctx context.Context, _ backend.Request) (backend.Result, error) {
	if b.entered.Add(1) == b.n {
		close(b.release)
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return backend.Result{}, ctx.Err()
	}
	return backend.Result{}, errDown
}

// TestOneSlowBatchIsOneEvent: 16 callers failing in one batch are one
// failure event, below the threshold of 3: the breaker stays closed (it
// counted 16 failures, and opened, before). The control: two failures one
// after the other then open it (the batch was one event, not none).
func TestOneSlowBatchIsOneEvent(t *testing.T) {
	p := &batchFailing{Store: newFlaky(t), n: 16, release: make(chan struct{})}
	s := newStore(t, p, fallback.WithTimeout(time.Minute), fallback.WithFailureThreshold(3))
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Hour}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			res, err := s.Take(context.Background(), backend.Request{Key: backend.Key{ID: strconv.Itoa(i)}, Rule: rule, Now: time.Now(), Cost: 1})
			assert.NoError(t, err)
			assert.True(t, res.Degraded)
		})
	}
	wg.Wait()
	require.Equal(t, uint64(16), s.Stats().PrimaryFailures)
	require.Equal(t, backend.BreakerClosed, s.State(), "one batch opened the breaker")
	// The batch was exactly one event: a second one does not open the
	// breaker, a third does.
	for i := range 2 {
		_, err := s.Take(context.Background(), backend.Request{Key: backend.Key{ID: "x"}, Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
		if i == 0 {
			require.Equal(t, backend.BreakerClosed, s.State(), "the batch counted more than one event")
		}
	}
	require.Equal(t, backend.BreakerOpen, s.State(), "control: three failure events open it")
}
