package algorithms_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// TestMoreAfter: where an algorithm tells from an admission when more
// allowance comes, a Peek then finds more than the admission left, and a
// Peek 2 ms before does not (gcra's ResetAfter is rounded up to the ms, so
// its answer can be 1 ms late, never early).
func TestMoreAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, a := range algorithms.Algorithms() {
		t.Run(string(a.Name), func(t *testing.T) {
			told := 0
			for range 300 {
				rule := algorithms.Rule{Algorithm: a.Name, Limit: 1 + rng.Int64N(20), Window: time.Duration(1+rng.Int64N(5000)) * time.Millisecond}
				var s algorithms.State
				now := int64(1_700_000_000_000)
				var last algorithms.Outcome
				for range 1 + rng.IntN(int(rule.Limit)) {
					now += rng.Int64N(rule.Window.Milliseconds()/4 + 1)
					if o := rule.Take(&s, now, 1); o.Allowed {
						last = o
					}
				}
				if !last.Allowed {
					continue
				}
				after, ok := rule.MoreAfter(last.Remaining, time.Duration(last.ResetAfter)*time.Millisecond)
				if !ok {
					continue
				}
				told++
				ms := after.Milliseconds()
				require.Positive(t, ms)
				left := rule.Peek(&s, now, 1).Remaining
				require.Greater(t, rule.Peek(&s, now+ms, 1).Remaining, left, "%+v: nothing more at +%d ms", rule, ms)
				if ms >= 2 {
					require.Equal(t, left, rule.Peek(&s, now+ms-2, 1).Remaining, "%+v: more already at +%d ms", rule, ms-2)
				}
			}
			if a.MoreAfter != nil {
				require.Positive(t, told, "never told")
			} else {
				require.Zero(t, told)
			}
		})
	}
}
