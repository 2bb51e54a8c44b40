package fallback_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/fallback"
)

// nodes is a primary of several nodes: a key's node is the part of its id
// before ":", and the nodes in down fail every call.
type nodes struct {
	*flaky
	mu   sync.Mutex
	down map[string]bool
	// moved sends the keys of one node to another (a failover).
	moved map[string]string
}

func newNodes(t *testing.T) *nodes {
	return &nodes{flaky: newFlaky(t), down: map[string]bool{}, moved: map[string]string{}}
}

func (n *nodes) NodeOf(_ context.Context, key backend.Key) string {
	node, _, _ := strings.Cut(key.ID, ":")
	n.mu.Lock()
	defer n.mu.Unlock()
	if to, ok := n.moved[node]; ok {
		return to
	}
	return node
}

func (n *nodes) set(node string, down bool) {
	n.mu.Lock()
	n.down[node] = down
	n.mu.Unlock()
}

func (n *nodes) move(from, to string) {
	n.mu.Lock()
	n.moved[from] = to
	n.mu.Unlock()
}

func (n *nodes) isDown(key backend.Key) bool {
	node := n.NodeOf(context.Background(), key)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down[node]
}

func (n *nodes) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	if n.isDown(req.Key) {
		n.calls.Add(1)
		return backend.Result{}, errDown
	}
	return n.flaky.Take(ctx, req)
}

// hidden hides its primary's NodeOf: the store sees one node.
type hidden struct{ backend.Store }

// unwrapping wraps a primary the way observe.Wrap does.
type unwrapping struct{ backend.Store }

func (u unwrapping) Unwrap() backend.Store { return u.Store }

// TestBreakerPerNode: with one node of three down, only its keys are
// decided by the policy; the others keep coming from the primary, and
// Stats and the hook name the node. The control hides NodeOf: one breaker
// then sends the healthy nodes' keys to the policy as well.
func TestBreakerPerNode(t *testing.T) {
	run := func(t *testing.T, wrap func(backend.Store) backend.Store) (healthyDegraded, deadDegraded int, s *fallback.Store, changes []backend.StateChange) {
		n := newNodes(t)
		n.set("b", true)
		var mu sync.Mutex
		s = newStore(t, wrap(n), fallback.WithFailureThreshold(3), fallback.WithOpenTimeout(time.Hour),
			fallback.WithPolicy(backend.FailOpen),
			fallback.WithStateHook(func(c backend.StateChange) {
				mu.Lock()
				changes = append(changes, c)
				mu.Unlock()
			}))
		for i := range 305 {
			node := "b" // the dead node's keys first: enough failures in a row to open a breaker
			if i >= 5 {
				node = string(rune('a' + i%3))
			}
			res, err := s.Take(t.Context(), req(node+":"+string(rune('0'+i%10))))
			require.NoError(t, err)
			if res.Degraded {
				if node == "b" {
					deadDegraded++
				} else {
					healthyDegraded++
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return healthyDegraded, deadDegraded, s, changes
	}

	t.Run("per node", func(t *testing.T) {
		healthy, dead, s, changes := run(t, func(p backend.Store) backend.Store { return unwrapping{p} })
		require.Zero(t, healthy, "keys of healthy nodes were decided by the policy")
		require.Equal(t, 105, dead, "every key of the dead node follows the policy")
		st := s.Stats()
		require.Equal(t, backend.BreakerOpen, st.State, "the worst node's state")
		require.Equal(t, uint64(3), st.PrimaryFailures)
		require.Equal(t, uint64(105), st.Degraded)
		require.Equal(t, []fallback.NodeStats{
			{Node: "a", State: backend.BreakerClosed},
			{Node: "b", State: backend.BreakerOpen, PrimaryFailures: 3, Degraded: 105},
			{Node: "c", State: backend.BreakerClosed},
		}, st.Nodes)
		require.Len(t, changes, 1)
		require.Equal(t, "b", changes[0].Node)
		require.Equal(t, backend.BreakerOpen, changes[0].To)
	})
	t.Run("control: one breaker", func(t *testing.T) {
		healthy, dead, s, changes := run(t, func(p backend.Store) backend.Store { return hidden{p} })
		require.Equal(t, 200, healthy, "the control should degrade healthy nodes' keys")
		require.Equal(t, 105, dead)
		require.Nil(t, s.Stats().Nodes)
		require.Len(t, changes, 1)
		require.Empty(t, changes[0].Node)
	})
}

// TestNodeBreakerForgotten: after a failover moves a dead node's keys to
// another node, its open breaker gets no requests; it is dropped after two
// open timeouts and reported closed, so the store's State is Closed again.
func TestNodeBreakerForgotten(t *testing.T) {
	n := newNodes(t)
	n.set("b", true)
	var changes atomic.Pointer[[]backend.StateChange]
	changes.Store(&[]backend.StateChange{})
	var mu sync.Mutex
	const openTimeout = 50 * time.Millisecond
	s := newStore(t, n, fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(openTimeout),
		fallback.WithStateHook(func(c backend.StateChange) {
			mu.Lock()
			cs := append(*changes.Load(), c)
			changes.Store(&cs)
			mu.Unlock()
		}))
	for range 3 {
		res, err := s.Take(t.Context(), req("b:1"))
		require.NoError(t, err)
		require.True(t, res.Degraded)
	}
	require.Equal(t, backend.BreakerOpen, s.State())
	n.move("b", "b2") // the replica took over
	res, err := s.Take(t.Context(), req("b:1"))
	require.NoError(t, err)
	require.False(t, res.Degraded, "the new owner's breaker is closed")
	for deadline := time.Now().Add(10 * time.Second); s.State() != backend.BreakerClosed && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		_, err := s.Take(t.Context(), req("b:1")) // keeps b2's breaker in use
		require.NoError(t, err)
	}
	require.Equal(t, backend.BreakerClosed, s.State(), "the old owner's breaker was never forgotten")
	require.Equal(t, []string{"b2"}, nodeNames(s.Stats().Nodes))
	cs := *changes.Load()
	require.NotEmpty(t, cs)
	last := cs[len(cs)-1]
	require.Equal(t, "b", last.Node)
	require.Equal(t, backend.BreakerClosed, last.To)
}

func nodeNames(ns []fallback.NodeStats) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Node)
	}
	return out
}

// later names no node until named is set: a cluster client before its
// first slot map, or (never set) a single node.
type later struct {
	*flaky
	named atomic.Bool
}

func (l *later) NodeOf(context.Context, backend.Key) string {
	if l.named.Load() {
		return "n1"
	}
	return ""
}

// TestSingleNodeLocatorKeepsOneBreaker: a locator that names no node (a
// single Redis) leaves the store as it was: one breaker, never dropped, no
// Stats.Nodes.
func TestSingleNodeLocatorKeepsOneBreaker(t *testing.T) {
	p := &later{flaky: newFlaky(t)}
	p.mode.Store(failing)
	s := newStore(t, p, fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(20*time.Millisecond))
	for range 2 {
		_, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
	}
	require.Equal(t, backend.BreakerOpen, s.State())
	time.Sleep(100 * time.Millisecond) // five open timeouts: a node breaker would be dropped
	require.Equal(t, backend.BreakerHalfOpen, s.State(), "the only breaker was dropped or reset")
	require.Nil(t, s.Stats().Nodes)
}

// TestBreakerBeforeSlotMapIsDropped: a breaker that opened before the
// client's first slot map (no node named yet) does not keep the store's
// State open once nodes are named: the hook sees it close.
func TestBreakerBeforeSlotMapIsDropped(t *testing.T) {
	p := &later{flaky: newFlaky(t)}
	p.mode.Store(failing)
	var mu sync.Mutex
	var changes []backend.StateChange
	s := newStore(t, p, fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(time.Hour),
		fallback.WithStateHook(func(c backend.StateChange) {
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		}))
	for range 2 {
		_, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
	}
	require.Equal(t, backend.BreakerOpen, s.State())
	p.mode.Store(healthy)
	p.named.Store(true)
	res, err := s.Take(t.Context(), req("a"))
	require.NoError(t, err)
	require.False(t, res.Degraded)
	require.Equal(t, backend.BreakerClosed, s.State())
	require.Equal(t, []string{"n1"}, nodeNames(s.Stats().Nodes))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, changes, 2)
	require.Equal(t, backend.StateChange{From: backend.BreakerOpen, To: backend.BreakerClosed, At: changes[1].At}, changes[1])
}
