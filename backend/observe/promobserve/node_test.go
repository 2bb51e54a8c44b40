package promobserve

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/fallback"
)

// clusterish is a primary of three nodes, as a Redis store on a cluster
// looks to fallback: a key's node is its id up to ":", and the nodes in
// down fail every call.
type clusterish struct {
	backend.Store
	mu   sync.Mutex
	down map[string]bool
}

func (c *clusterish) NodeOf(_ context.Context, key backend.Key) string {
	node, _, _ := strings.Cut(key.ID, ":")
	return node
}

func (c *clusterish) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	c.mu.Lock()
	down := c.down[c.NodeOf(ctx, req.Key)]
	c.mu.Unlock()
	if down {
		return backend.Result{}, errDown
	}
	return c.Store.Take(ctx, req)
}

func (c *clusterish) set(node string, down bool) {
	c.mu.Lock()
	c.down[node] = down
	c.mu.Unlock()
}

// TestBreakerStatePerNode: with fallback's breaker per cluster node, the
// node gauge reads as fallback's Stats().Nodes, and the store's gauge as
// its State (the worst of them), while a node fails and its breaker opens.
func TestBreakerStatePerNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	mem, err := memorystore.New()
	require.NoError(t, err)
	primary := &clusterish{Store: mem, down: map[string]bool{}}
	guard, err := fallback.New(primary, fallback.WithFailureThreshold(1), fallback.WithOpenTimeout(time.Hour),
		fallback.WithLogger(slog.New(slog.DiscardHandler)), fallback.WithStateHook(metrics.BreakerHook("redis")))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1_000_000, Window: time.Minute}
	take := func(node string) {
		_, err := guard.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: "p:", ID: node + ":k"}, Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
	}
	for _, n := range []string{"a", "b", "c"} {
		take(n)
	}
	primary.set("b", true)
	take("b")
	require.Eventually(t, func() bool {
		text := scrape(t, reg)
		st := guard.Stats()
		if len(st.Nodes) != 3 || st.State != backend.BreakerOpen || gauge(t, text, "", string(st.State)) != 1 {
			return false
		}
		for _, n := range st.Nodes {
			if n.State == backend.BreakerClosed && !strings.Contains(text, `node="`+n.Node+`"`) {
				continue // never changed: no series
			}
			if gauge(t, text, n.Node, string(n.State)) != 1 {
				return false
			}
		}
		return strings.Contains(text, `node="b",state="open"} 1`)
	}, 10*time.Second, 5*time.Millisecond)
}

// TestBreakerStateWorstOfNodes: nodes b and c open, then b closes: b
// reads closed, c open, and the store open. The control is the last change
// alone (b closing), which the store gauge showed before there were node
// breakers: it would read closed while c is open.
func TestBreakerStateWorstOfNodes(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := New(reg)
	require.NoError(t, err)
	hook := metrics.BreakerHook("redis")
	changes := []backend.StateChange{
		{From: backend.BreakerClosed, To: backend.BreakerOpen, Node: "b"},
		{From: backend.BreakerClosed, To: backend.BreakerOpen, Node: "c"},
		{From: backend.BreakerOpen, To: backend.BreakerHalfOpen, Node: "b"},
		{From: backend.BreakerHalfOpen, To: backend.BreakerClosed, Node: "b"},
	}
	for _, c := range changes {
		hook(c)
	}
	text := scrape(t, reg)
	require.Equal(t, 1.0, gauge(t, text, "b", "closed"))
	require.Equal(t, 0.0, gauge(t, text, "b", "open"))
	require.Equal(t, 0.0, gauge(t, text, "b", "half-open"))
	require.Equal(t, 1.0, gauge(t, text, "c", "open"))
	require.Equal(t, 1.0, gauge(t, text, "", "open"), "the store's gauge is the worst of its nodes")
	require.Equal(t, 0.0, gauge(t, text, "", "closed"))
	require.Equal(t, 2.0, value(t, text, `limitkit_breaker_transitions_total{breaker="redis",to="open"}`))
	require.Equal(t, backend.BreakerClosed, changes[len(changes)-1].To, "control: the last change alone would show the store closed")

	// c closes too (or fallback forgets it, which it reports as closing).
	hook(backend.StateChange{From: backend.BreakerOpen, To: backend.BreakerClosed, Node: "c"})
	text = scrape(t, reg)
	require.Equal(t, 1.0, gauge(t, text, "", "closed"))
	require.Equal(t, 1.0, gauge(t, text, "c", "closed"))

	// A store's only breaker (Node "") has no node series.
	single := metrics.BreakerHook("single")
	single(backend.StateChange{From: backend.BreakerClosed, To: backend.BreakerOpen})
	text = scrape(t, reg)
	require.Equal(t, 1.0, value(t, text, `limitkit_breaker_state{breaker="single",state="open"}`))
	require.NotContains(t, text, `limitkit_breaker_node_state{breaker="single"`)
}

// gauge reads the state gauge of breaker "redis": its node's, or with node
// "" the store's.
func gauge(t *testing.T, text, node, state string) float64 {
	t.Helper()
	if node == "" {
		return value(t, text, `limitkit_breaker_state{breaker="redis",state="`+state+`"}`)
	}
	return value(t, text, `limitkit_breaker_node_state{breaker="redis",node="`+node+`",state="`+state+`"}`)
}
