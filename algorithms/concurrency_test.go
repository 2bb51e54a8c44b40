package algorithms

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldModel is the concurrency algorithm as a plain map from lease id to
// units, with the ids' rule written out.
type heldModel struct {
	leases map[int64]int64
	last   int64
}

// forget drops expired leases, as a take or renewal does.
func (m *heldModel) forget(now, w int64) {
	for id := range m.leases {
		if id <= now-w {
			delete(m.leases, id)
		}
	}
}

func (m *heldModel) live(now, w int64) int64 {
	n := int64(0)
	for id, c := range m.leases {
		if id > now-w {
			n += c
		}
	}
	return n
}

// TestConcurrencyMatchesModel drives the Go steps and the model with random
// acquires, releases and renewals, the clock creeping and stepping back:
// the admissions, held reports, remaining counts and ids agree, and no
// more than limit units are ever held.
func TestConcurrencyMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 18))
	r := Rule{Algorithm: Concurrency, Limit: 5, Window: time.Second}
	w := r.Window.Milliseconds()
	var s State
	m := heldModel{leases: map[int64]int64{}}
	var granted []int64
	now := int64(10_000)
	for i := range 20_000 {
		switch p := rng.IntN(10); {
		case p < 6:
		case p < 9:
			now += int64(rng.IntN(300))
		default:
			now = max(now-int64(rng.IntN(500)), 0)
		}
		cost := int64(1 + rng.IntN(2))
		switch op := rng.IntN(3); {
		case op == 0 || len(granted) == 0:
			out := r.Take(&s, now, cost)
			m.forget(now, w)
			fits := m.live(now, w)+cost <= r.Limit
			require.Equal(t, fits, out.Allowed, "step %d", i)
			if out.Allowed {
				id := max(now, m.last+1)
				m.last = id
				m.leases[id] = cost
				require.Equal(t, id, r.ChargedAt(&s, now), "step %d", i)
				granted = append(granted, id)
			}
			require.Equal(t, max(r.Limit-m.live(now, w), 0), out.Remaining, "step %d", i)
		case op == 1:
			id := granted[rng.IntN(len(granted))]
			_, ok := m.leases[id]
			wantHeld := ok && id > now-w
			require.Equal(t, wantHeld, r.Release(&s, now, id), "step %d", i)
			if wantHeld {
				delete(m.leases, id)
			}
		default:
			id := granted[rng.IntN(len(granted))]
			c, ok := m.leases[id]
			wantHeld := ok && id > now-w
			out := r.Renew(&s, now, id, cost)
			require.Equal(t, wantHeld, out.Allowed, "step %d", i)
			if wantHeld {
				delete(m.leases, id)
				m.forget(now, w)
				nid := max(now, m.last+1)
				m.last = nid
				m.leases[nid] = c
				require.Equal(t, nid, r.ChargedAt(&s, now), "step %d", i)
				granted = append(granted, nid)
			}
		}
		require.LessOrEqual(t, m.live(now, w), r.Limit, "step %d", i)
		require.LessOrEqual(t, int64(len(m.leases)), r.Limit, "step %d: leases kept", i)
		p := r.Peek(&s, now, 1)
		require.Equal(t, max(r.Limit-m.live(now, w), 0), p.Remaining, "step %d: peek", i)
	}
}

// TestConcurrencyOnlyLeaseAlgorithm checks the descriptors: the lease steps
// are set for concurrency alone, and Release and Renew of another rule
// change nothing.
func TestConcurrencyOnlyLeaseAlgorithm(t *testing.T) {
	for _, a := range Algorithms() {
		require.Equal(t, a.Name == Concurrency, a.HoldsLeases(), a.Name)
	}
	r := Rule{Algorithm: SlidingLog, Limit: 2, Window: time.Second}
	var s State
	r.Take(&s, 100, 2)
	require.False(t, r.Release(&s, 100, 100))
	require.False(t, r.Renew(&s, 100, 100, 1).Allowed)
	require.False(t, r.Take(&s, 100, 1).Allowed)
}
