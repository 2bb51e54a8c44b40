package rediswire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

func TestScripts(t *testing.T) {
	for _, name := range algorithms.Names() {
		src, err := Script(name)
		require.NoError(t, err)
		require.Contains(t, src, algorithms.Lookup(name).Lua, name)
		require.Contains(t, src, "local function key_ttl(reset, w)", "%s: no key_ttl", name)
		// Numbers reach Redis through %d, never tostring (%.14g).
		require.NotContains(t, src, "tostring(", name)
		require.Contains(t, MultiScript(), "STEPS['"+string(name)+"']")
		require.Contains(t, BatchScript(), "STEPS['"+string(name)+"']")
	}
	_, err := Script("leaky")
	require.ErrorIs(t, err, algorithms.ErrInvalidRule)
}

func TestArgs(t *testing.T) {
	r := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: algorithms.MaxLimit, Window: algorithms.MaxWindow}
	args := func(now, cost int64, mode Mode) []string {
		a, err := Args(r, now, cost, mode)
		require.NoError(t, err)
		return a
	}
	require.Equal(t, []string{"1767225600123", "31622400000", "9007199254740992", "42", "1"},
		args(1_767_225_600_123, 42, ModeTake))
	require.Equal(t, []string{"-1", "31622400000", "9007199254740992", "1", "0"},
		args(ServerTime, 1, ModePeek))
	r = algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Millisecond}
	require.Equal(t, []string{"0", "1", "1", "1", "1"}, args(0, 1, ModeTake))
	require.Equal(t, []string{"5", "1", "1", "1", "2", "3"}, RefundArgs(r, 5, 3, 1))
	require.Equal(t, []string{"5", "1", "1", "1", "3", "3"}, RenewArgs(r, 5, 3, 1))
	allocs := testing.AllocsPerRun(100, func() { _, _ = Args(r, 1_767_225_600_123, 1, ModeTake) })
	require.LessOrEqual(t, allocs, 2.0)
}

func TestArgsRejectsUnknownMode(t *testing.T) {
	r := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Millisecond}
	for _, mode := range []Mode{ModeRenew + 1, 255} {
		args, err := Args(r, 0, 1, mode)
		require.Error(t, err, "mode %d", mode)
		require.Nil(t, args)
	}
}

func TestMaxTimeKeepsValuesExact(t *testing.T) {
	// The largest value a script computes is about now + 2 windows.
	require.Less(t, MaxTime+2*algorithms.MaxWindow.Milliseconds()+algorithms.ExpiryMargin.Milliseconds(), int64(1)<<53)
}
