package algorithms

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldModel is the concurrency algorithm as a plain map from lease id to
// units, with the ids' rule written out: tick ids per ms (1000; 1 is the
// rule before ids counted 1/1000 ms, whose ids ran ahead of the clock).
type heldModel struct {
	leases map[int64]int64
	last   int64
	tick   int64
}

func newHeldModel(tick int64) *heldModel {
	return &heldModel{leases: map[int64]int64{}, tick: tick}
}

// expired reports whether the lease id has expired at now.
func (m *heldModel) expired(id, now, w int64) bool { return id <= (now-w)*m.tick }

// forget drops expired leases, as a take or renewal does.
func (m *heldModel) forget(now, w int64) {
	for id := range m.leases {
		if m.expired(id, now, w) {
			delete(m.leases, id)
		}
	}
}

func (m *heldModel) live(now, w int64) int64 {
	n := int64(0)
	for id, c := range m.leases {
		if !m.expired(id, now, w) {
			n += c
		}
	}
	return n
}

// grant issues the next id at now for c units.
func (m *heldModel) grant(now, c int64) int64 {
	id := max(now*m.tick, m.last+1)
	m.last = id
	m.leases[id] = c
	return id
}

// until is how many whole ms from now until the lease id expires: the
// first ms whose cutoff reaches it.
func (m *heldModel) until(id, now, w int64) int64 {
	t := id/m.tick + w - now
	if id%m.tick != 0 {
		t++
	}
	return t
}

// newest is the largest live id at now (0: none).
func (m *heldModel) newest(now, w int64) int64 {
	n := int64(0)
	for id := range m.leases {
		if !m.expired(id, now, w) {
			n = max(n, id)
		}
	}
	return n
}

// take is an acquire of cost c at now: the id granted (0: denied) and,
// when denied, how long until c units fit.
func (m *heldModel) take(now, w, limit, c int64) (id, retry int64) {
	m.forget(now, w)
	if m.live(now, w)+c <= limit {
		return m.grant(now, c), 0
	}
	ids := make([]int64, 0, len(m.leases))
	for id, n := range m.leases {
		for range n {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return 0, m.until(ids[len(ids)+int(c-limit)-1], now, w)
}

// release gives back the lease id at now and reports whether it was held.
func (m *heldModel) release(now, w, id int64) bool {
	_, ok := m.leases[id]
	if !ok || m.expired(id, now, w) {
		return false
	}
	delete(m.leases, id)
	return true
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
	m := newHeldModel(1000)
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
				id := m.grant(now, cost)
				require.Equal(t, id, r.ChargedAt(&s, now), "step %d", i)
				require.Equal(t, m.until(id, now, w), out.ResetAfter, "step %d: reset", i)
				granted = append(granted, id)
			}
			require.Equal(t, max(r.Limit-m.live(now, w), 0), out.Remaining, "step %d", i)
		case op == 1:
			id := granted[rng.IntN(len(granted))]
			_, ok := m.leases[id]
			wantHeld := ok && !m.expired(id, now, w)
			require.Equal(t, wantHeld, r.Release(&s, now, id), "step %d", i)
			if wantHeld {
				delete(m.leases, id)
			}
		default:
			id := granted[rng.IntN(len(granted))]
			c, ok := m.leases[id]
			wantHeld := ok && !m.expired(id, now, w)
			out := r.Renew(&s, now, id, cost)
			require.Equal(t, wantHeld, out.Allowed, "step %d", i)
			if wantHeld {
				delete(m.leases, id)
				m.forget(now, w)
				nid := m.grant(now, c)
				require.Equal(t, nid, r.ChargedAt(&s, now), "step %d", i)
				require.Equal(t, m.until(nid, now, w), out.ResetAfter, "step %d: reset", i)
				granted = append(granted, nid)
			}
		}
		require.LessOrEqual(t, m.live(now, w), r.Limit, "step %d", i)
		require.LessOrEqual(t, int64(len(m.leases)), r.Limit, "step %d: leases kept", i)
		p := r.Peek(&s, now, 1)
		require.Equal(t, max(r.Limit-m.live(now, w), 0), p.Remaining, "step %d: peek", i)
		if id := m.newest(now, w); id > 0 {
			require.Equal(t, m.until(id, now, w), p.ResetAfter, "step %d: peek reset", i)
		}
	}
}

// leaser is what abandonedSlotBack drives: the Go steps, or a model.
type leaser interface {
	take(now, cost int64) (id, retry int64) // id 0: denied
	release(now, id int64) bool
}

type ruleLeaser struct {
	r Rule
	s State
}

func (l *ruleLeaser) take(now, cost int64) (int64, int64) {
	out := l.r.Take(&l.s, now, cost)
	if !out.Allowed {
		return 0, out.RetryAfter
	}
	return l.r.ChargedAt(&l.s, now), 0
}

func (l *ruleLeaser) release(now, id int64) bool { return l.r.Release(&l.s, now, id) }

type modelLeaser struct {
	m        *heldModel
	w, limit int64
}

func (l modelLeaser) take(now, cost int64) (int64, int64) { return l.m.take(now, l.w, l.limit, cost) }
func (l modelLeaser) release(now, id int64) bool          { return l.m.release(now, l.w, id) }

// abandonedSlotBack drives a key of limit n and window w at 1,000 acquire
// and release pairs per ms for 5 ms (a global key for a fragile
// downstream), then fills it in one ms with leases that are abandoned, and
// returns what goes wrong: the slots must be held until the window has
// passed since their grant, and free then (those bumped past the ms's
// first id 1 ms later, their expiry rounded up to the ms).
func abandonedSlotBack(l leaser, n, w int64) error {
	const t0 = int64(1_764_547_200_000) // 2025-12-01, ms
	for ms := range int64(5) {
		for i := range 1000 {
			id, _ := l.take(t0+ms, 1)
			if id == 0 || !l.release(t0+ms, id) {
				return fmt.Errorf("pair %d at ms %d: acquired %d, not released", i, ms, id)
			}
		}
	}
	grant := t0 + 5
	var held []int64
	for range n {
		id, _ := l.take(grant, 1)
		if id == 0 {
			return fmt.Errorf("acquire at %d denied with %d held", grant, len(held))
		}
		held = append(held, id)
	}
	if id, retry := l.take(grant+w-1, 1); id != 0 || retry != 1 {
		return fmt.Errorf("1 ms before the timeout: got id %d, retry %d ms; want denied, retry 1 ms", id, retry)
	}
	if id, retry := l.take(grant+w, 1); id == 0 {
		return fmt.Errorf("at the timeout: denied, retry %d ms; want the first abandoned slot free", retry)
	}
	if l.release(grant+w, held[0]) {
		return fmt.Errorf("at the timeout: the first abandoned lease %d is still held", held[0])
	}
	if l.release(grant+w+1, held[n-1]) {
		return fmt.Errorf("1 ms after the timeout: the last abandoned lease %d is still held", held[n-1])
	}
	for i := range n - 1 {
		if id, retry := l.take(grant+w+1, 1); id == 0 {
			return fmt.Errorf("1 ms after the timeout: acquire %d denied, retry %d ms; want every abandoned slot free", i, retry)
		}
	}
	return nil
}

// TestConcurrencyManyGrantsPerMs: at 1,000 grants per ms on one key (5,000
// acquire and release pairs over 5 ms), abandoned leases are held for the
// window from their grant and no longer: their slots come back at the
// timeout (1 ms later for those bumped within one ms), on the Go steps and
// on the model. Control: the rule of
// ms ids (the model with 1 id per ms) fails the same check, its leases
// held about 5 s past the timeout (retry 4996 ms, not 1).
func TestConcurrencyManyGrantsPerMs(t *testing.T) {
	r := Rule{Algorithm: Concurrency, Limit: 50, Window: time.Second}
	n, w := r.Limit, r.Window.Milliseconds()
	require.NoError(t, abandonedSlotBack(&ruleLeaser{r: r}, n, w))
	require.NoError(t, abandonedSlotBack(modelLeaser{newHeldModel(1000), w, n}, n, w))
	err := abandonedSlotBack(modelLeaser{newHeldModel(1), w, n}, n, w)
	require.ErrorContains(t, err, "1 ms before the timeout: got id 0, retry 4996 ms")
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
