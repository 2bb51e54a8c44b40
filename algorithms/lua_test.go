package algorithms

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLuaBodies(t *testing.T) {
	titles := map[Name]string{
		SlidingLog: "sliding window log", SlidingCounter: "sliding window counter", FixedWindow: "fixed window",
		CompactLog: "compact sliding window log", TwoLevel: "two-level limiting", GCRA: "GCRA (token bucket)",
	}
	for _, a := range Algorithms() {
		require.Contains(t, a.Lua, "limitkit "+titles[a.Name], a.Name)
		// Numbers reach Redis through %d, never tostring (%.14g).
		require.NotContains(t, a.Lua, "tostring(", a.Name)
		// Expiry comes from key_ttl, the twin of Rule.KeyTTL, alone.
		require.NotContains(t, a.Lua, "EXPIRY_MARGIN", a.Name)
	}
	require.NotContains(t, LuaPrelude(), "tostring(")
}

func TestKeyTTLIsGeneratedIntoLua(t *testing.T) {
	// key_ttl(reset, w) = reset + k * w + m, with k and m read back from
	// the generated Lua, must be Rule.KeyTTL for any reset and window.
	m := regexp.MustCompile(`local function key_ttl\(reset, w\)\n  return reset \+ (\d+) \* w \+ (\d+)\nend\n`).FindStringSubmatch(LuaPrelude())
	require.NotNil(t, m, "no key_ttl in the prelude")
	k, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	margin, err := strconv.ParseInt(m[2], 10, 64)
	require.NoError(t, err)
	for _, c := range []struct{ reset, w int64 }{{0, 1}, {0, 1000}, {2500, 10_000}, {1, MaxWindow.Milliseconds()}} {
		r := Rule{Window: time.Duration(c.w) * time.Millisecond}
		require.Equal(t, r.KeyTTL(c.reset), c.reset+k*c.w+margin, "reset %d, window %d ms", c.reset, c.w)
	}
}
