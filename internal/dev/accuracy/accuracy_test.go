package accuracy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

var small = TraceConfig{Seed: 7, Keys: 300, Limit: 20, Window: 10 * time.Second, Windows: 12}

func TestGenerateIsDeterministicAndSorted(t *testing.T) {
	a, b := Generate(small), Generate(small)
	require.Equal(t, a, b)
	require.Greater(t, len(a), 10_000)
	for i := 1; i < len(a); i++ {
		require.LessOrEqual(t, a[i-1].At, a[i].At)
	}
	other := small
	other.Seed++
	require.NotEqual(t, a, Generate(other))
}

func TestReplay(t *testing.T) {
	reqs := Generate(small)
	results := Replay(reqs, small.Keys, small.Limit, small.Window, algorithms.Names())
	byName := map[algorithms.Name]Result{}
	for _, r := range results {
		byName[r.Algorithm] = r
		require.Equal(t, len(reqs), r.Requests)
	}
	// The exact logs are the reference: no difference, nothing wrong, and
	// never more than the limit in a window.
	for _, name := range []algorithms.Name{algorithms.SlidingLog, algorithms.CompactLog} {
		r := byName[name]
		require.Zero(t, r.Differ, name)
		require.Zero(t, r.WronglyAllowed+r.WronglyDenied, name)
		require.Equal(t, small.Limit, r.WorstWindow, name)
	}
	require.Positive(t, byName[algorithms.SlidingLog].LimitedRequests, "the trace never reaches the limit")
	// Two-level never admits more than the limit; it may deny more.
	tl := byName[algorithms.TwoLevel]
	require.Zero(t, tl.WronglyAllowed)
	require.LessOrEqual(t, tl.WorstWindow, small.Limit)
	require.Positive(t, tl.WronglyDenied, "the trace never turns a key heavy")
	// The fixed window and GCRA let up to twice the limit through.
	for _, name := range []algorithms.Name{algorithms.FixedWindow, algorithms.GCRA} {
		r := byName[name]
		require.Greater(t, r.WorstWindow, small.Limit, name)
		require.LessOrEqual(t, r.WorstWindow, 2*small.Limit, name)
		require.Positive(t, r.WronglyAllowed, name)
	}
}
