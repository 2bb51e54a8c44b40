package memorystore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWholeSweepReachesEveryExpiredKey: a sweep asked to look at every key
// deletes all expired ones, from whichever slot it starts. Deletions shift
// keys back without passing a slot, so a budget charged for them ran out
// before the table's end.
func TestWholeSweepReachesEveryExpiredKey(t *testing.T) {
	for seed := uint64(1); seed <= 64; seed++ {
		tb := newTable(seed)
		h := seed
		for range 700 {
			// splitmix64: spread keys over the table, with collisions.
			h += 0x9e3779b97f4a7c15
			z := (h ^ h>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			z ^= z >> 31
			if tb.find(z|1, z) == nil {
				tb.add(z|1, z).expires = 10
			}
		}
		live := tb.add(3, 3)
		live.expires = 100
		keys := tb.used
		_, _, found, deleted := tb.sweep(50, tb.used)
		require.Equal(t, keys-1, deleted, "seed %d", seed)
		require.Equal(t, 1, tb.used, "seed %d", seed)
		require.True(t, found)
		require.NotNil(t, tb.find(3, 3))
	}
}
