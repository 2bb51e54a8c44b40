package observe

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
)

// TestReservationsObserved: a reservation is reported as a reserve, its
// refund as an unreserve of the units given back, and its excess as a
// take of the charge.
func TestReservationsObserved(t *testing.T) {
	var rec recorder
	lim, err := limiter.New(Wrap(newMemory(t), rec.observer()),
		limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute, Prefix: "obs:"})
	require.NoError(t, err)
	r, _, err := lim.ReserveN(t.Context(), "k", 5)
	require.NoError(t, err)
	_, err = r.Settle(t.Context(), 2)
	require.NoError(t, err)
	r, _, err = lim.ReserveN(t.Context(), "k", 3)
	require.NoError(t, err)
	_, err = r.Settle(t.Context(), 9)
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var ops []string
	var costs []int64
	for _, d := range rec.decisions {
		ops, costs = append(ops, string(d.Op)), append(costs, d.Cost)
	}
	require.Equal(t, []string{"reserve", "unreserve", "reserve", "take"}, ops)
	require.Equal(t, []int64{5, 3, 3, 6}, costs)
}
