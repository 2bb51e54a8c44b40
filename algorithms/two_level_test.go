package algorithms

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTwoLevelSemantics runs bursty in-order traffic, with now and then a
// request stamped up to a window late, through two_level and checks, by
// the time each admission was charged, that no window ever holds more than
// the limit; that while a key has never been heavy its decisions are the
// exact log's; and that heavy keys turn light again after a quiet window.
func TestTwoLevelSemantics(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	demoted, promoted := 0, 0
	for round := range 200 {
		limit := int64(1 + rng.IntN(20))
		w := int64(20 + rng.IntN(200))
		r := Rule{Algorithm: TwoLevel, Limit: limit, Window: time.Duration(w) * time.Millisecond}
		exact := Rule{Algorithm: SlidingLog, Limit: limit, Window: r.Window}
		var s, x State
		var charged []int64
		everHeavy := false
		now := int64(1_000_000)
		for step := range 400 {
			switch p := rng.IntN(20); {
			case p < 6:
			case p < 18:
				now += rng.Int64N(w / 4)
			default:
				now += rng.Int64N(3 * w)
			}
			at := now
			if rng.IntN(10) == 0 {
				at -= rng.Int64N(w)
			}
			cost := 1 + rng.Int64N(limit)
			if rng.IntN(3) > 0 {
				cost = 1
			}
			wasHeavy := s.log.size() > 0
			out := r.Take(&s, at, cost)
			heavy := s.log.size() > 0
			if wasHeavy && !heavy {
				demoted++
			}
			if heavy && !wasHeavy {
				promoted++
			}
			if !everHeavy && !heavy && at == now {
				require.Equal(t, exact.Take(&x, at, cost).Allowed, out.Allowed, "round %d step %d: the screen decided unlike the exact log", round, step)
			}
			everHeavy = everHeavy || heavy
			if out.Allowed {
				c := r.ChargedAt(&s, at)
				if c >= lightCharge {
					c = max(at, c-lightCharge)
				}
				for range cost {
					charged = append(charged, c)
				}
			}
		}
		from, n := busiestWindow(charged, w)
		require.LessOrEqual(t, n, limit, "round %d: the window from %d holds %d", round, from, n)
	}
	require.Positive(t, promoted)
	require.Positive(t, demoted)
}
