package denycache

import (
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
)

// CacheLeasesForTest makes the caches cache concurrency denials until the
// test ends: the control that shows why they must not be. Not for parallel
// tests.
func CacheLeasesForTest(t *testing.T) {
	old := cacheLeases
	cacheLeases = true
	t.Cleanup(func() { cacheLeases = old })
}

// IgnoreSightingsForTest makes the caches ignore the rules and clocks other
// writes announce, as before issue 22's defect 10 was fixed, until the test
// ends: the control of the tests that reproduce it. Not for parallel tests.
func IgnoreSightingsForTest(t *testing.T) {
	old := ignoreSightings
	ignoreSightings = true
	t.Cleanup(func() { ignoreSightings = old })
}

// SeenForTest returns how many rules the cache knows in force on prefix
// under alg, and the latest time another process writing there may stamp a
// request now (the zero time when none does).
func (s *Store) SeenForTest(prefix string, alg algorithms.Name) (rules int, clock time.Time) {
	s.sightMu.Lock()
	defer s.sightMu.Unlock()
	g := s.groups[groupID{prefix, alg}]
	if g == nil {
		return 0, time.Time{}
	}
	wall := s.mono()
	for _, last := range g.rules {
		if wall-last < s.ruleTTL() {
			rules++
		}
	}
	if h := g.horizon.Load(); h != noHorizon {
		clock = time.UnixMilli(wall + h)
	}
	return rules, clock
}

// SlowFlushForTest makes the caches wait d between ceasing to answer and
// emptying themselves, until the test ends, widening the window a reader
// of Stats could fall in. Not for parallel tests.
func SlowFlushForTest(t *testing.T, d time.Duration) {
	testBeforeFlush = func() { time.Sleep(d) }
	t.Cleanup(func() { testBeforeFlush = nil })
}

// UnlockedStatsForTest makes Stats read its counts without waiting for a
// flush in progress, as before the fix: the control of
// TestBrokenSubscriptionStats. Not for parallel tests.
func UnlockedStatsForTest(t *testing.T) {
	unlockedStats = true
	t.Cleanup(func() { unlockedStats = false })
}
