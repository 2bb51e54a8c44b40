package ratelimitfields_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// fields collects what Fields reports, by canonical name, in order.
func fields(p *ratelimitfields.Policy, d limiter.Decision, draft, x bool) []string {
	var got []string
	p.Fields(d, draft, x, func(f ratelimitfields.Field, v string) {
		got = append(got, f.Name()+": "+v)
	})
	return got
}

// TestPolicyField: q is the limit, w the window in whole seconds rounded
// up and at least 1.
func TestPolicyField(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		want   string
	}{
		{time.Minute, `"default";q=100;w=60`},
		{1500 * time.Millisecond, `"default";q=100;w=2`},
		{time.Millisecond, `"default";q=100;w=1`},
	} {
		p := ratelimitfields.NewPolicy("default", limiter.Config{Limit: 100, Window: tc.window})
		assert.Equal(t, tc.want, p.Policy(), "window %v", tc.window)
		assert.Equal(t, "100", p.Limit())
		assert.False(t, p.HasGuard())
	}
}

// TestRateLimitPerAlgorithm: an admission gets t only where the algorithm
// tells exactly when more quota comes (fixed_window, gcra); a denial gets
// t = Retry-After under every algorithm.
func TestRateLimitPerAlgorithm(t *testing.T) {
	admitted := limiter.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 45 * time.Second}
	denied := limiter.Decision{Allowed: false, Limit: 10, Remaining: 0, ResetAfter: 45 * time.Second, RetryAfter: 1200 * time.Millisecond}
	for _, tc := range []struct {
		algo algorithms.Name
		want string // RateLimit of the admission
	}{
		{algorithms.FixedWindow, `"api";r=3;t=45`},
		// The bucket empties at 45 s and drains a unit every 6 s: one more
		// unit is free 6 units' drain (36 s) before that.
		{algorithms.GCRA, `"api";r=3;t=9`},
		{algorithms.SlidingLog, `"api";r=3`},
		{algorithms.SlidingCounter, `"api";r=3`},
		{algorithms.CompactLog, `"api";r=3`},
		{algorithms.TwoLevel, `"api";r=3`},
	} {
		t.Run(string(tc.algo), func(t *testing.T) {
			p := ratelimitfields.NewPolicy("api", limiter.Config{Algorithm: tc.algo, Limit: 10, Window: time.Minute})
			assert.Equal(t, tc.want, p.RateLimit(admitted))
			assert.Equal(t, `"api";r=0;t=2`, p.RateLimit(denied), "t of a denial is Retry-After, rounded up")
			tw, ok := p.EffectiveWindow(denied)
			assert.True(t, ok)
			assert.Equal(t, ratelimitfields.RetryAfter(denied.RetryAfter), tw)
		})
	}
}

// TestXRateLimit: Reset is until the full allowance when admitted, the
// retry delay when denied; a negative remaining is sent as 0.
func TestXRateLimit(t *testing.T) {
	p := ratelimitfields.NewPolicy("default", limiter.Config{Limit: 10, Window: time.Minute})
	l, r, reset := p.XRateLimit(limiter.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 30*time.Second + 1})
	assert.Equal(t, []string{"10", "4", "31"}, []string{l, r, reset})
	l, r, reset = p.XRateLimit(limiter.Decision{Allowed: false, Limit: 10, Remaining: -2, ResetAfter: time.Minute, RetryAfter: 0})
	assert.Equal(t, []string{"10", "0", "1"}, []string{l, r, reset}, "Reset of a denial is Retry-After, at least 1")
}

// TestGuardNaming: the guard is a policy of its own named after the main
// one with "-guard", listed second, and a decision by the guard describes
// it; a GuardRule decision without a guard describes the main policy.
func TestGuardNaming(t *testing.T) {
	cfg := limiter.Config{Limit: 100, Window: time.Minute,
		Guard: &limiter.Guard{Algorithm: algorithms.FixedWindow, Limit: 5, Window: 90 * time.Second}}
	p := ratelimitfields.NewPolicy(`a"b`, cfg)
	require.True(t, p.HasGuard())
	assert.Equal(t, `"a\"b";q=100;w=60, "a\"b-guard";q=5;w=90`, p.Policy())

	byGuard := limiter.Decision{Allowed: true, Rule: limiter.GuardRule, Limit: 5, Remaining: 2, ResetAfter: 10 * time.Second}
	assert.True(t, p.IsGuard(byGuard))
	assert.Equal(t, `"a\"b-guard";r=2;t=10`, p.RateLimit(byGuard))
	l, _, _ := p.XRateLimit(byGuard)
	assert.Equal(t, "5", l)

	byMain := byGuard
	byMain.Rule = 0
	byMain.Limit = 100
	assert.False(t, p.IsGuard(byMain))
	assert.Equal(t, `"a\"b";r=2;t=10`, p.RateLimit(byMain))

	noGuard := ratelimitfields.NewPolicy("x", limiter.Config{Limit: 100, Window: time.Minute})
	assert.False(t, noGuard.IsGuard(byGuard))
	assert.True(t, strings.HasPrefix(noGuard.RateLimit(byGuard), `"x";`))
}

// TestFields: the selection and order of the fields, and the uncounted
// admission of a fallback failing open, which gets no RateLimit.
func TestFields(t *testing.T) {
	p := ratelimitfields.NewPolicy("default", limiter.Config{Limit: 10, Window: time.Minute})
	d := limiter.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Minute}
	assert.Equal(t, []string{`RateLimit-Policy: "default";q=10;w=60`, `RateLimit: "default";r=9;t=60`}, fields(p, d, true, false))
	assert.Equal(t, []string{"X-RateLimit-Limit: 10", "X-RateLimit-Remaining: 9", "X-RateLimit-Reset: 60"}, fields(p, d, false, true))
	assert.Len(t, fields(p, d, true, true), 5)
	assert.Empty(t, fields(p, d, false, false))

	uncounted := limiter.Decision{Allowed: true, Degraded: true, Limit: 10}
	assert.False(t, ratelimitfields.Counted(uncounted))
	assert.Equal(t, []string{`RateLimit-Policy: "default";q=10;w=60`, "X-RateLimit-Limit: 10"}, fields(p, uncounted, true, true))
	// Control: the same decision, not degraded, is counted and reports r=0.
	counted := uncounted
	counted.Degraded = false
	assert.True(t, ratelimitfields.Counted(counted))
	assert.Contains(t, fields(p, counted, true, false), `RateLimit: "default";r=0`)
}

func TestFieldNames(t *testing.T) {
	for f := ratelimitfields.PolicyField; f <= ratelimitfields.XResetField; f++ {
		assert.Equal(t, strings.ToLower(f.Name()), f.LowerName())
		assert.Equal(t, f <= ratelimitfields.RateLimitField, f.Draft(), f.Name())
	}
}

func TestSecondsAndRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d           time.Duration
		secs, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{1, 1, 1},
		{time.Second, 1, 1},
		{time.Second + 1, 2, 2},
		{59500 * time.Millisecond, 60, 60},
	} {
		assert.Equal(t, tc.secs, ratelimitfields.Seconds(tc.d), "Seconds(%v)", tc.d)
		assert.Equal(t, tc.retry, ratelimitfields.RetryAfter(tc.d), "RetryAfter(%v)", tc.d)
	}
}

func TestCheckName(t *testing.T) {
	assert.NoError(t, ratelimitfields.CheckName("api-v1 ~!"))
	assert.EqualError(t, ratelimitfields.CheckName(""), "policy name is empty")
	for _, bad := range []string{"a\nb", "caf\xc3\xa9", "\x7f"} {
		assert.Error(t, ratelimitfields.CheckName(bad), fmt.Sprintf("%q", bad))
	}
}

// TestLeasePolicy: a concurrency limit's policy has the draft's
// concurrent-requests quota unit and no w (its window is the lease
// timeout, not a quota window), and its RateLimit never has t: a held
// lease may be released at any moment. The control, a sliding log of the
// same limit and window, has w, and t on a denial.
func TestLeasePolicy(t *testing.T) {
	cfg := limiter.Config{Algorithm: algorithms.Concurrency, Limit: 2, Window: 90 * time.Second}
	p := ratelimitfields.NewPolicy("uploads", cfg)
	assert.Equal(t, `"uploads";q=2;qu="concurrent-requests"`, p.Policy())
	admitted := limiter.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 90 * time.Second}
	denied := limiter.Decision{Limit: 2, RetryAfter: 30 * time.Second, ResetAfter: 90 * time.Second}
	assert.True(t, p.Lease(admitted))
	assert.Equal(t, `"uploads";r=1`, p.RateLimit(admitted))
	assert.Equal(t, `"uploads";r=0`, p.RateLimit(denied))
	_, ok := p.EffectiveWindow(denied)
	assert.False(t, ok)
	l, r, reset := p.XRateLimit(denied)
	assert.Equal(t, []string{"2", "0", "30"}, []string{l, r, reset}, "X-RateLimit-Reset of a denial is still Retry-After")

	cfg.Algorithm = algorithms.SlidingLog
	control := ratelimitfields.NewPolicy("uploads", cfg)
	assert.False(t, control.Lease(admitted))
	assert.Equal(t, `"uploads";q=2;w=90`, control.Policy())
	assert.Equal(t, `"uploads";r=0;t=30`, control.RateLimit(denied))
}

// TestCompositePolicy: a composite's limits are listed in order under
// their own names, and a decision describes the limit it names
// (Decision.Rule), a concurrency limit with its quota unit.
func TestCompositePolicy(t *testing.T) {
	cfgs := []limiter.Config{
		{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute},
		{Algorithm: algorithms.Concurrency, Limit: 2, Window: time.Minute},
	}
	p, err := ratelimitfields.NewCompositePolicy([]string{"per-minute", "in-flight"}, cfgs)
	require.NoError(t, err)
	assert.Equal(t, `"per-minute";q=100;w=60, "in-flight";q=2;qu="concurrent-requests"`, p.Policy())
	assert.False(t, p.HasGuard())
	byRate := limiter.Decision{Allowed: true, Rule: 0, Limit: 100, Remaining: 40, ResetAfter: 20 * time.Second}
	byLease := limiter.Decision{Allowed: false, Rule: 1, Limit: 2, RetryAfter: 5 * time.Second}
	assert.Equal(t, `"per-minute";r=40;t=20`, p.RateLimit(byRate))
	assert.Equal(t, `"in-flight";r=0`, p.RateLimit(byLease))
	assert.Equal(t, 1, p.Index(byLease))
	l, _, _ := p.XRateLimit(byLease)
	assert.Equal(t, "2", l)

	_, err = ratelimitfields.NewCompositePolicy([]string{"one"}, cfgs)
	assert.ErrorContains(t, err, "1 policy names for 2 limits")
	_, err = ratelimitfields.NewCompositePolicy([]string{"one", "bad\n"}, cfgs)
	assert.ErrorContains(t, err, "limit 1")
}
