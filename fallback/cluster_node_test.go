package fallback_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// The load of the dead-master test, as issue 16 sets it.
const (
	nodeCallers = 64
	nodeKeys    = 3000
	// nodeOutage is how long the load runs after the kill.
	nodeOutage = 4 * time.Second
)

// nodeClients are cluster clients sized for nodeCallers: a connection pool
// and timeouts that 64 callers on a busy test machine do not exhaust, so
// that failures come from the dead master.
var nodeClients = map[string]func(t *testing.T, c *redistest.Cluster) *itConn{
	"goredis": func(t *testing.T, c *redistest.Cluster) *itConn {
		o := goredisClusterOptions(c)
		o.PoolSize, o.PoolTimeout = 2*nodeCallers, time.Second
		o.ReadTimeout, o.WriteTimeout = time.Second, time.Second
		client := redis.NewClusterClient(o)
		s, err := goredisstore.New(client)
		require.NoError(t, err)
		return newItConn(t, s, func() { _ = client.Close() })
	},
	"rueidis": func(t *testing.T, c *redistest.Cluster) *itConn {
		o := rueidisOption(c.Addrs())
		o.ConnWriteTimeout = time.Second
		return newRueidis(t, o)
	},
}

// nodeDecision is one call of the dead-master load.
type nodeDecision struct {
	key               int
	start             time.Time
	allowed, degraded bool
	err               error
}

// nodeLoad runs nodeCallers callers over keys on fb until stop is closed or
// limit passes (each at most 1e6 calls), and returns every decision. It
// counts the decisions from Redis in fresh and, when degraded is not nil,
// stores per key the start (UnixNano) of a recent degraded decision.
func nodeLoad(fb *fallback.Store, keys []backend.Key, rule algorithms.Rule, fresh *atomic.Int64, degraded []atomic.Int64, stop <-chan struct{}, limit time.Duration) func() []nodeDecision {
	var wg sync.WaitGroup
	results := make([][]nodeDecision, nodeCallers)
	deadline := time.Now().Add(limit)
	for c := range nodeCallers {
		wg.Go(func() {
			for i := range 1000000 {
				select {
				case <-stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				k := (c*149 + i*7) % len(keys)
				start := time.Now()
				res, err := fb.Take(context.Background(), backend.Request{Key: keys[k], Rule: rule, Now: start, Cost: 1})
				results[c] = append(results[c], nodeDecision{key: k, start: start, allowed: res.Allowed, degraded: res.Degraded, err: err})
				if err == nil && !res.Degraded {
					fresh.Add(1)
				}
				if err == nil && res.Degraded && degraded != nil {
					degraded[k].Store(start.UnixNano())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	return func() []nodeDecision {
		wg.Wait()
		var all []nodeDecision
		for _, r := range results {
			all = append(all, r...)
		}
		return all
	}
}

// TestClusterDeadMasterOnlyItsKeysDegrade: 64 callers over 3,000 keys of
// a 3-master cluster without replicas (cluster-require-full-coverage no);
// one master is SIGKILLed mid-load. Callers see no errors; the dead
// master's keys follow the policy (FailClosed: degraded denials), while
// keys on the two other masters keep being decided by Redis (at most 10%
// degraded). The control runs the same load on a second fallback store
// that cannot see the nodes (one breaker): it degrades the healthy
// masters' keys too.
func TestClusterDeadMasterOnlyItsKeysDegrade(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		c := redistest.StartCluster(t, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
		conn := nodeClients[cl.name](t, c)
		rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Minute}
		// A long deadline: on a busy 2-core machine 64 callers can keep a
		// healthy master's answer waiting past 300 ms; this test is about
		// which keys a dead master sends to the policy, not about latency.
		opts := []fallback.Option{fallback.WithPolicy(backend.FailClosed), fallback.WithTimeout(time.Second)}
		h := newHarness(t, conn.store, rule, 0, opts...)
		// The control's single breaker opens at the first failure event:
		// counted by event (the dead master's failures interleaved with
		// the healthy masters' successes), it would rarely reach three.
		control := newHarness(t, hidden{conn.store}, rule, 0, append(opts, fallback.WithFailureThreshold(1))...)

		victim := c.Masters[1]
		prefix := fmt.Sprintf("fbnode:%d:", time.Now().UnixNano())
		keys := make([]backend.Key, nodeKeys)
		onVictim := make([]bool, nodeKeys)
		owner := map[int]*redistest.Server{}
		var victimKeys int
		for i := range keys {
			keys[i] = backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
			slot := redistest.KeySlot(rediswire.Key(keys[i], rule))
			if owner[slot] == nil {
				owner[slot] = c.MasterOf(slot)
			}
			if owner[slot] == victim {
				onVictim[i] = true
				victimKeys++
			}
		}

		var fresh atomic.Int64
		stop := make(chan struct{})
		finish := nodeLoad(h.fb, keys, rule, &fresh, nil, stop, 60*time.Second)
		waitForCount(t, &fresh, 3000, "decisions from the cluster before the kill")
		errsBefore := h.primary.errorCounts()
		killAt := time.Now()
		victim.Kill()
		time.Sleep(nodeOutage)
		// Before the load stops: idle node breakers are forgotten.
		st := h.fb.Stats()
		close(stop)
		ds := finish()

		var healthy, healthyDegraded, dead, deadDegraded int
		var buckets [20]int
		for _, d := range ds {
			require.NoError(t, d.err, "a caller saw an error (key %d)", d.key)
			if !d.degraded {
				require.True(t, d.allowed, "Redis denied under a limit of 2^40")
			} else {
				require.False(t, d.allowed, "FailClosed admitted a degraded request")
			}
			if d.start.Before(killAt) {
				continue
			}
			if onVictim[d.key] {
				dead++
				if d.degraded {
					deadDegraded++
				}
			} else {
				healthy++
				if d.degraded {
					healthyDegraded++
					buckets[min(int(d.start.Sub(killAt)/(250*time.Millisecond)), len(buckets)-1)]++
				}
			}
		}
		t.Logf("healthy masters' degraded decisions by 250 ms after the kill: %v", buckets)
		t.Logf("FIGURE %s cluster, dead master without replica: after the kill %d of %d decisions on the healthy masters' keys degraded, %d of %d on the dead master's (%d of %d keys); breakers %+v; the primary's errors before the kill %v, after %v",
			cl.name, healthyDegraded, healthy, deadDegraded, dead, victimKeys, nodeKeys, st.Nodes, errsBefore, h.primary.errorCounts())
		require.Positive(t, healthy)
		require.LessOrEqual(t, float64(healthyDegraded), 0.1*float64(healthy), "keys on the healthy masters went to the policy")
		require.Greater(t, float64(deadDegraded), 0.9*float64(dead), "the dead master's keys did not follow the policy")
		var victimNode *fallback.NodeStats
		for i := range st.Nodes {
			if st.Nodes[i].Node == victim.Addr() {
				victimNode = &st.Nodes[i]
			}
		}
		require.NotNil(t, victimNode, "no breaker for the dead master %s: %+v", victim.Addr(), st.Nodes)
		require.NotEqual(t, backend.BreakerClosed, victimNode.State)
		require.Len(t, st.Nodes, 3)

		// Control: one breaker for the whole cluster.
		var controlFresh atomic.Int64
		stop = make(chan struct{})
		finish = nodeLoad(control.fb, keys, rule, &controlFresh, nil, stop, 60*time.Second)
		time.Sleep(2 * time.Second)
		close(stop)
		healthy, healthyDegraded = 0, 0
		for _, d := range finish() {
			require.NoError(t, d.err)
			if !onVictim[d.key] {
				healthy++
				if d.degraded {
					healthyDegraded++
				}
			}
		}
		t.Logf("FIGURE %s cluster, control (one breaker): %d of %d decisions on the healthy masters' keys degraded", cl.name, healthyDegraded, healthy)
		require.Greater(t, float64(healthyDegraded), 0.1*float64(healthy), "the control did not degrade the healthy masters' keys: the test cannot tell")
	})
}

// TestClusterMasterFailoverPerNode: the same load on a 3-master cluster
// with a replica each (cluster-require-full-coverage no). One master is
// SIGKILLed; its replica is promoted (CLUSTER FAILOVER TAKEOVER, rather
// than waiting out cluster-node-timeout and an election); decisions
// on its keys come back from Redis, under the promoted node's own breaker,
// and keys on the other masters stay decided by Redis all along (at most
// 10% degraded). It reports the times.
func TestClusterMasterFailoverPerNode(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		c := redistest.StartCluster(t, 3, 1, redistest.WithArgs("--cluster-require-full-coverage", "no"))
		conn := nodeClients[cl.name](t, c)
		rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1 << 40, Window: time.Minute}
		h := newHarness(t, conn.store, rule, 0, fallback.WithPolicy(backend.FailClosed), fallback.WithTimeout(time.Second))

		victim := c.Masters[1]
		replica := replicaOf(t, c, victim)
		prefix := fmt.Sprintf("fbfail:%d:", time.Now().UnixNano())
		keys := make([]backend.Key, nodeKeys)
		onVictim := make([]bool, nodeKeys)
		owner := map[int]*redistest.Server{}
		for i := range keys {
			keys[i] = backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
			slot := redistest.KeySlot(rediswire.Key(keys[i], rule))
			if owner[slot] == nil {
				owner[slot] = c.MasterOf(slot)
			}
			onVictim[i] = owner[slot] == victim
		}

		var fresh atomic.Int64
		degraded := make([]atomic.Int64, len(keys))
		stop := make(chan struct{})
		finish := nodeLoad(h.fb, keys, rule, &fresh, degraded, stop, 90*time.Second)
		waitForCount(t, &fresh, 3000, "decisions from the cluster before the kill")
		killAt := time.Now()
		victim.Kill()
		// The promotion waits until the load has seen the dead master (a
		// degraded decision on its keys, begun after the kill): promoted at
		// once, the client's retries could reach the replica before any
		// call failed.
		waitUntilFor(t, itWait, "a degraded decision on the dead master's keys", func() bool {
			for i := range keys {
				if onVictim[i] && degraded[i].Load() >= killAt.UnixNano() {
					return true
				}
			}
			return false
		})
		c.Takeover(replica)
		promotedAt := time.Now()
		// The clients find the promoted replica on their own schedule (a
		// slot map refresh): wait, bounded, until one of its keys is
		// decided by Redis again, then let the load run on it a while.
		victimKey := -1
		for i := range keys {
			if onVictim[i] {
				victimKey = i
				break
			}
		}
		require.GreaterOrEqual(t, victimKey, 0)
		var servedAt time.Time
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			d, err := h.fb.Take(t.Context(), backend.Request{Key: keys[victimKey], Rule: rule, Now: time.Now(), Cost: 1})
			if err == nil && !d.Degraded {
				servedAt = time.Now()
				break
			}
		}
		require.False(t, servedAt.IsZero(), "the promoted replica never decided its keys")
		// The client routes to the promoted replica as soon as its own
		// slot map has it; the store's copy, which names the breaker
		// (NodeOf), is refreshed on its own schedule (at most a second
		// old while used, rueidisstore's slotsRefresh). Reading the
		// breakers before that refresh finds the victim's breaker deciding
		// the replica's keys, so wait, bounded, for the breaker.
		var st fallback.Stats
		var named time.Time
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st = h.fb.Stats(); nodeStats(st, replica.Addr()) != nil {
				named = time.Now()
				break
			}
		}
		waitForCount(t, &fresh, fresh.Load()+3000, "decisions from the cluster after the failover")
		st = h.fb.Stats()
		close(stop)
		ds := finish()

		var healthy, healthyDegraded int
		var lastDegraded time.Time
		for _, d := range ds {
			require.NoError(t, d.err, "a caller saw an error (key %d)", d.key)
			if d.degraded {
				require.False(t, d.allowed, "FailClosed admitted a degraded request")
			}
			if d.start.Before(killAt) {
				continue
			}
			if !onVictim[d.key] {
				healthy++
				if d.degraded {
					healthyDegraded++
				}
			} else if d.degraded && d.start.After(lastDegraded) {
				lastDegraded = d.start
			}
		}
		first, ok := firstNode(ds, killAt, func(d nodeDecision) bool { return d.degraded && onVictim[d.key] })
		require.True(t, ok, "no degraded decision on the dead master's keys")
		back, ok := firstNode(ds, promotedAt, func(d nodeDecision) bool { return !d.degraded && onVictim[d.key] })
		require.True(t, ok, "no decision from the promoted replica on its keys")
		t.Logf("FIGURE %s cluster with replicas: first degraded decision %v after the kill; replica promoted (cluster ok) %v after the kill; first decision from it on its keys %v after that, last degraded one %v after it; %d of %d decisions on the other masters' keys degraded; breakers %+v",
			cl.name, first.start.Sub(killAt), promotedAt.Sub(killAt), back.start.Sub(promotedAt), lastDegraded.Sub(promotedAt), healthyDegraded, healthy, st.Nodes)
		require.LessOrEqual(t, float64(healthyDegraded), 0.1*float64(healthy), "keys on the healthy masters went to the policy")
		if !named.IsZero() {
			t.Logf("FIGURE %s the promoted replica's breaker appeared %v after its first decision", cl.name, named.Sub(servedAt))
		}
		promoted := nodeStats(st, replica.Addr())
		require.NotNil(t, promoted, "no breaker for the promoted replica %s: %+v", replica.Addr(), st.Nodes)
		require.Equal(t, backend.BreakerClosed, promoted.State)
	})
}

// nodeStats returns the breaker of node in st, or nil.
func nodeStats(st fallback.Stats, node string) *fallback.NodeStats {
	for i := range st.Nodes {
		if st.Nodes[i].Node == node {
			return &st.Nodes[i]
		}
	}
	return nil
}

// firstNode returns the earliest decision that started at or after t0 and
// matches.
func firstNode(ds []nodeDecision, t0 time.Time, match func(nodeDecision) bool) (nodeDecision, bool) {
	var best nodeDecision
	found := false
	for _, d := range ds {
		if !d.start.Before(t0) && match(d) && (!found || d.start.Before(best.start)) {
			best, found = d, true
		}
	}
	return best, found
}
