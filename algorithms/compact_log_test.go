package algorithms

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompactLogIsTheSlidingLog: the compact log's Go engine is the
// sliding log's, so only its storage differs.
func TestCompactLogIsTheSlidingLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	a := Rule{Algorithm: SlidingLog, Limit: 7, Window: 50 * time.Millisecond}
	b := a
	b.Algorithm = CompactLog
	var sa, sb State
	now := int64(5000)
	for range 2000 {
		now += rng.Int64N(20) - 3
		cost := 1 + rng.Int64N(7)
		require.Equal(t, a.Take(&sa, now, cost), b.Take(&sb, now, cost))
	}
}
