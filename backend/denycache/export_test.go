package denycache

import "testing"

// CacheLeasesForTest makes the caches cache concurrency denials until the
// test ends: the control that shows why they must not be. Not for parallel
// tests.
func CacheLeasesForTest(t *testing.T) {
	old := cacheLeases
	cacheLeases = true
	t.Cleanup(func() { cacheLeases = old })
}
