package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOverloadRuns runs the comparison briefly: every server reports its
// three phases. The figures depend on the machine and are not checked.
func TestOverloadRuns(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(&out, Setup{Capacity: 4, Base: 20 * time.Millisecond, Duration: 600 * time.Millisecond, Load: 3}))
	for _, mode := range []string{"unprotected", "fixed", "adaptive"} {
		require.Equal(t, 3, strings.Count(out.String(), "\n"+mode+" "), out.String())
	}
	require.Error(t, run(&out, Setup{Capacity: 1, Base: time.Millisecond, Duration: time.Second, Load: 3}))
	require.Error(t, run(&out, Setup{Capacity: 1000, Base: time.Millisecond, Duration: time.Minute, Load: 3}), "too many requests")
	require.ErrorContains(t, run(&out, Setup{Capacity: 4, Base: 20 * time.Millisecond, Duration: 600 * time.Millisecond, Load: 3, Law: "cubic"}), "-law")
	require.ErrorContains(t, run(&out, Setup{Capacity: 4, Base: 20 * time.Millisecond, Duration: 600 * time.Millisecond, Load: 3, Servers: []string{"cached"}}), "-servers")
	for _, law := range []string{"gradient2", "vegas", "aimd"} {
		h, lim, err := server("adaptive", Setup{Law: law}, &backend{base: time.Millisecond}, 4)
		require.NoError(t, err)
		require.NotNil(t, h)
		require.Equal(t, law, lim.Law())
	}
}

func TestLimitRangeSettles(t *testing.T) {
	// Control for the settling time: out of the band resets it.
	limits := []limitAt{{0, 40}, {10, 22}, {20, 30}, {30, 21}, {40, 20}}
	lo, hi, settle := limitRange(limits, 0, 100, 20)
	require.Equal(t, [3]int{20, 40, 30}, [3]int{lo, hi, int(settle)})
	_, _, settle = limitRange([]limitAt{{0, 40}}, 0, 100, 20)
	require.Equal(t, time.Duration(-1), settle)
}

func TestGoalsAreChecked(t *testing.T) {
	good := Phase{Capacity: 10, Goodput: 0.95, P99Base: 1.5, Critical: 1, Default: 0.5, Sheddable: 0.1, Settle: time.Second}
	bad := good
	bad.Goodput, bad.Settle = 0.5, -1
	count := func(ph Phase) (met int) {
		gs := goalsOf(map[string]Report{"adaptive": {Phases: []Phase{ph, ph, ph}}})
		for _, g := range gs {
			if g.met {
				met++
			}
		}
		require.Len(t, gs, 14)
		return met
	}
	require.Equal(t, 14, count(good))
	require.Equal(t, 9, count(bad), "control: the missed goals are reported")
}
