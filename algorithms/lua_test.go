package algorithms

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLuaScripts(t *testing.T) {
	margin := regexp.MustCompile(`local EXPIRY_MARGIN_MS = (\d+)\n`)
	for _, name := range Names() {
		src, err := LuaScript(name)
		require.NoError(t, err)
		require.Contains(t, src, "limitkit "+map[Name]string{
			SlidingLog: "sliding window log", SlidingCounter: "sliding window counter", FixedWindow: "fixed window",
			CompactLog: "compact sliding window log", TwoLevel: "two-level limiting", GCRA: "GCRA (token bucket)",
		}[name])
		m := margin.FindStringSubmatch(src)
		require.NotNil(t, m, "%s: no EXPIRY_MARGIN_MS", name)
		require.Equal(t, fmt.Sprint(LuaExpiryMargin.Milliseconds()), m[1], "%s: margin differs from LuaExpiryMargin", name)
		// Numbers reach Redis through %d, never tostring (%.14g).
		require.NotContains(t, src, "tostring(", name)
	}
	_, err := LuaScript("leaky")
	require.ErrorIs(t, err, ErrInvalidRule)
}

func TestLuaArgs(t *testing.T) {
	r := Rule{Algorithm: SlidingCounter, Limit: MaxLimit, Window: MaxWindow}
	require.Equal(t, []string{"1767225600123", "31622400000", "9007199254740992", "42", "1"},
		r.LuaArgs(1_767_225_600_123, 42, LuaTake))
	require.Equal(t, []string{"-1", "31622400000", "9007199254740992", "1", "0"},
		r.LuaArgs(LuaServerTime, 1, LuaPeek))
	r = Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Millisecond}
	require.Equal(t, []string{"0", "1", "1", "1", "1"}, r.LuaArgs(0, 1, LuaTake))
	allocs := testing.AllocsPerRun(100, func() { _ = r.LuaArgs(1_767_225_600_123, 1, LuaTake) })
	require.LessOrEqual(t, allocs, 2.0)
}

func TestMaxLuaTimeKeepsValuesExact(t *testing.T) {
	// The largest value a script computes is about now + 2 windows.
	require.Less(t, MaxLuaTime+2*MaxWindow.Milliseconds()+LuaExpiryMargin.Milliseconds(), int64(1)<<53)
}
