package algorithms

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ratGCRA is GCRA as usually written, with the theoretical arrival time as
// an exact rational and requests before the newest admission decided at it.
type ratGCRA struct {
	tat  *big.Rat
	last int64
}

func ratCeil(r *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if r.Sign() < 0 && !r.IsInt() {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

func (g *ratGCRA) step(now, w, limit, cost int64, take bool) Outcome {
	if g.tat == nil {
		g.tat = new(big.Rat)
	}
	e := max(now, g.last)
	t := big.NewRat(w, limit) // the emission interval
	re := new(big.Rat).SetInt64(e)
	tat := new(big.Rat).Set(g.tat)
	if tat.Cmp(re) < 0 {
		tat.Set(re)
	}
	newTat := new(big.Rat).Add(tat, new(big.Rat).Mul(t, big.NewRat(cost, 1)))
	allowAt := new(big.Rat).Sub(newTat, big.NewRat(w, 1))
	var out Outcome
	if allowAt.Cmp(re) <= 0 {
		out.Allowed = true
		if take {
			tat = newTat
			g.tat, g.last = newTat, e
		}
	} else {
		out.RetryAfter = ratCeil(allowAt) - now
	}
	left := new(big.Rat).Sub(new(big.Rat).Add(re, big.NewRat(w, 1)), tat)
	out.Remaining = ratFloor(new(big.Rat).Quo(left, t))
	if tat.Cmp(re) > 0 {
		out.ResetAfter = ratCeil(tat) - now
	}
	return out
}

// TestGCRAMatchesRational compares the integer GCRA with the rational one,
// with limits up to the bound, windows up to a year, and the clock going
// back now and then.
func TestGCRAMatchesRational(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 300 {
		w := 1 + rng.Int64N(100)
		switch round % 3 {
		case 1:
			w = 1 + rng.Int64N(MaxWindow.Milliseconds())
		case 2:
			w = MaxWindow.Milliseconds()
		}
		r := Rule{Algorithm: GCRA, Window: time.Duration(w) * time.Millisecond}
		r.Limit = 1 + rng.Int64N(min(r.LimitBound(), []int64{10, 1000, MaxLimit}[rng.IntN(3)]))
		require.NoError(t, r.Validate())
		var s State
		var ref ratGCRA
		now := int64(1_767_225_600_000)
		for step := range 100 {
			switch p := rng.IntN(10); {
			case p == 0:
				now -= rng.Int64N(w + 1)
			case p < 3:
			default:
				now += rng.Int64N(w/r.Limit + 2)
			}
			cost := 1 + rng.Int64N(r.Limit)
			if rng.IntN(2) == 0 {
				cost = 1
			}
			if rng.IntN(5) == 0 {
				require.Equal(t, ref.step(now, w, r.Limit, cost, false), r.Peek(&s, now, cost), "round %d step %d peek", round, step)
				continue
			}
			require.Equal(t, ref.step(now, w, r.Limit, cost, true), r.Take(&s, now, cost), "round %d step %d: %+v", round, step, r)
		}
	}
}

func TestGCRABound(t *testing.T) {
	r := Rule{Algorithm: GCRA, Limit: MaxLimit / 60_000, Window: time.Minute}
	require.NoError(t, r.Validate())
	r.Limit++
	require.ErrorContains(t, r.Validate(), "limit × window")
	// A full bucket takes Limit at once, then one unit every Window/Limit.
	r = Rule{Algorithm: GCRA, Limit: 4, Window: time.Second}
	var s State
	require.True(t, r.Take(&s, 1000, 4).Allowed)
	out := r.Take(&s, 1000, 1)
	require.False(t, out.Allowed)
	require.Equal(t, int64(250), out.RetryAfter)
	require.True(t, r.Take(&s, 1250, 1).Allowed)
}
