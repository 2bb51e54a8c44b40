package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
)

// sre is the formula of the SRE book, for the table below.
func sre(requests, accepts, k float64) float64 { return max(0, (requests-k*accepts)/(requests+1)) }

func TestThrottleFollowsTheFormula(t *testing.T) {
	fake := clock.NewFake(t0)
	var r float64 // what Rand returns
	th, err := NewThrottle(ThrottleConfig{K: 2, Window: 10 * time.Second, Buckets: 10, Clock: fake,
		Rand: func() float64 { return r }})
	require.NoError(t, err)
	// 10 requests, 2 accepted: (10 − 2·2)/(10 + 1) = 6/11, by hand.
	r = 0.99
	for i := range 10 {
		require.True(t, th.Allow())
		if i < 2 {
			th.Accepted()
		}
	}
	require.InDelta(t, 6.0/11, th.Probability(), 1e-12)
	require.InDelta(t, sre(10, 2, 2), th.Probability(), 1e-12)
	// Control: the usual slips give other numbers, which the line above
	// would refuse: no "+ 1", K on the requests.
	require.Greater(t, math.Abs((10.0-4)/10-th.Probability()), 1e-3)
	require.Greater(t, math.Abs(max(0, (2*10.0-2)/11)-th.Probability()), 1e-3)
	// A draw below the probability refuses; a refused request counts.
	r = 0.5
	require.False(t, th.Allow())
	req, acc := th.Counts()
	require.Equal(t, [2]int64{11, 2}, [2]int64{req, acc})
	r = 0.6
	require.True(t, th.Allow()) // (11 − 4)/12 = 0.583 < 0.6
	// While accepts keep up (requests <= K·accepts) nothing is refused.
	for range 10 {
		th.Accepted()
	}
	r = 0
	require.Zero(t, th.Probability())
	require.True(t, th.Allow())
}

func TestThrottleWindowSlides(t *testing.T) {
	fake := clock.NewFake(t0)
	th, err := NewThrottle(ThrottleConfig{Window: 10 * time.Second, Buckets: 10, Clock: fake,
		Rand: func() float64 { return 0.999 }})
	require.NoError(t, err)
	for range 5 {
		th.Allow()
	}
	fake.Advance(5 * time.Second)
	for range 5 {
		th.Allow()
	}
	req, _ := th.Counts()
	require.Equal(t, int64(10), req)
	fake.Advance(5 * time.Second) // the first five leave the window
	req, _ = th.Counts()
	require.Equal(t, int64(5), req)
	fake.Advance(time.Hour)
	req, _ = th.Counts()
	require.Zero(t, req)
	require.Zero(t, th.Probability())
}

func TestThrottleConfigIsChecked(t *testing.T) {
	for _, c := range []ThrottleConfig{{K: 0.5}, {Window: -1}, {Buckets: -1}, {Window: 3, Buckets: 10}} {
		_, err := NewThrottle(c)
		require.Error(t, err, "%+v", c)
	}
}
