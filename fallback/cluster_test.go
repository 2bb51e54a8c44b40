package fallback_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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

// reshardSlots is how many slots TestClusterReshardAndFailover moves from
// the first master to the second; redis-cli moves the source's lowest slots
// first, so keys in slots below it move.
const reshardSlots = 200

// TestClusterReshardAndFailover runs a load over a 3-master, 3-replica
// Redis Cluster with a FailClosed policy (a degraded decision never
// admits), moves slots with `redis-cli --cluster reshard`, then kills the
// master that received them. Callers see no errors, only degraded denials
// (the breaker's policy); decisions come from the cluster again once the
// replica has taken over; and no key admits more than its limit in any
// sliding window, except by as many admissions as the failover provably
// lost: acknowledged admissions of the killed master that its replica
// never received (async replication), measured on the replica right after
// the kill.
func TestClusterReshardAndFailover(t *testing.T) {
	forEachClient(t, func(t *testing.T, cl itClient) {
		c := redistest.StartCluster(t, 3, 1)
		conn := cl.cluster(t, c)
		// A short window keeps every key admitting (and denying) all
		// through the reshard and the kill.
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 20, Window: time.Second}
		h := newHarness(t, conn.store, rule, 0, fallback.WithPolicy(backend.FailClosed))
		h.keys = clusterKeys(h, rule, 8, 16)
		src, dst := c.Masters[0], c.Masters[1]
		r := h.start(1000000, 120*time.Second)
		waitForCount(t, &r.fresh, 300, "decisions from the cluster before the reshard")

		// Reshard.
		reshardAt := time.Now()
		out, err := cliReshard(src, dst, reshardSlots)
		require.NoError(t, err, "redis-cli --cluster reshard:\n%s", out)
		c.WaitOK()
		reshardEnd := time.Now()
		reshardErrs := h.primary.errorCounts()
		owners := make([]*redistest.Server, len(h.keys))
		for k, key := range h.keys {
			owners[k] = c.MasterOf(redistest.KeySlot(rediswire.Key(key, rule)))
		}
		for k := range 8 {
			require.Same(t, dst, owners[k], "key %d (slot below %d) was not moved by the reshard", k, reshardSlots)
		}

		// Kill the master that received the slots; its replica takes over.
		victim := dst
		replica := replicaOf(t, c, victim)
		var victimKeys []int
		for k := range h.keys {
			if owners[k] == victim {
				victimKeys = append(victimKeys, k)
			}
		}
		// Let a whole window pass, so that the admissions of the last
		// window before the kill were all decided by the victim.
		freshBeforeKill := r.fresh.Load()
		waitForCount(t, &r.fresh, freshBeforeKill+300, "decisions from the cluster after the reshard")
		time.Sleep(time.Until(reshardEnd.Add(rule.Window)))
		killAt := time.Now()
		victim.Kill()
		killed := time.Now()
		// Nothing writes to the victim's slots until the replica is
		// promoted (below): read what it holds now.
		stored := replicaCounts(t, replica, h, victimKeys, killed.UnixMilli()-rule.Window.Milliseconds())
		role, err := replica.Do("ROLE")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(role, "slave"), "the replica was promoted before its counts were read:\n%s", role)

		// Promoted once the load has seen the kill: a degraded decision
		// that began after it (one in flight at the kill does not count).
		waitUntilFor(t, itWait, "a degraded decision begun after the kill", func() bool { return r.lastDegraded.Load() >= killAt.UnixNano() })
		c.Takeover(replica)
		failedOverAt := time.Now()
		waitUntilFor(t, itFailoverWait, "decisions from the promoted replica for every key it serves", func() bool {
			if h.fb.State() != backend.BreakerClosed {
				return false
			}
			for _, k := range victimKeys {
				if !r.freshSince(k, failedOverAt) {
					return false
				}
			}
			return true
		}, func() string {
			return fmt.Sprintf("breaker %s; the primary's errors: %v", h.fb.State(), h.primary.errorCounts())
		})
		ds := r.finish()

		requireNoErrors(t, ds)
		admitted := make([][]int64, len(h.keys))
		var degraded, duringReshard int
		for _, d := range ds {
			if d.degraded {
				degraded++
				require.False(t, d.allowed, "FailClosed admitted a degraded request")
				if d.start.After(reshardAt) && d.end.Before(reshardEnd) {
					duringReshard++
				}
				continue
			}
			if d.allowed {
				admitted[d.key] = append(admitted[d.key], d.start.UnixMilli())
			}
		}

		// Lost admissions: those the victim acknowledged in the last window
		// before it died, minus what its replica holds of that window.
		from := killed.UnixMilli() - rule.Window.Milliseconds()
		lost := make(map[int]int64)
		var totalLost int64
		for _, k := range victimKeys {
			var acked int64
			for _, ms := range admitted[k] {
				if ms > from && ms <= killed.UnixMilli() {
					acked++
				}
			}
			lost[k] = max(0, acked-stored[k])
			totalLost += lost[k]
		}
		worst, over := 0, 0
		for k := range h.keys {
			most := mostInOneWindow(admitted[k], rule.Window.Milliseconds())
			worst = max(worst, most)
			if most > int(rule.Limit) {
				over += most - int(rule.Limit)
				t.Logf("%s: key %d admitted %d in one window (limit %d); the failover lost %d of its admissions", cl.name, k, most, rule.Limit, lost[k])
			}
			require.LessOrEqual(t, int64(most), rule.Limit+lost[k],
				"key %d admitted %d in one window: over the limit %d by more than the %d admissions the failover lost", k, most, rule.Limit, lost[k])
		}
		for _, k := range victimKeys {
			_, ok := firstSince(ds, failedOverAt, func(d loadDecision) bool { return d.key == k && !d.degraded })
			require.True(t, ok, "key %d: no decision from the cluster after the failover", k)
		}
		// With Redis' default cluster-require-full-coverage yes, every node
		// answers CLUSTERDOWN from the moment the master is marked failed
		// until its replica is promoted, so keys on the healthy masters are
		// decided by the policy then too, whatever the breakers.
		var healthyDuring, healthyDegraded int
		for _, d := range ds {
			if d.start.After(killed) && d.end.Before(failedOverAt) && !slices.Contains(victimKeys, d.key) {
				healthyDuring++
				if d.degraded {
					healthyDegraded++
				}
			}
		}
		// A call that outlived itCallTimeout on a loaded machine may have
		// opened a node's breaker in the load's last moments: every breaker
		// must close again once its node answers, within a bounded wait.
		require.Equal(t, backend.BreakerClosed, h.settleClosed(5*time.Second))
		firstDegraded, ok := firstSince(ds, killAt, func(d loadDecision) bool { return d.degraded })
		require.True(t, ok, "no degraded decision after the kill")
		fresh, ok := firstSince(ds, failedOverAt, func(d loadDecision) bool { return !d.degraded && slices.Contains(victimKeys, d.key) })
		require.True(t, ok)

		t.Logf("FIGURE %s cluster: reshard of %d slots took %v, %d degraded decisions during it (the primary's errors until then: %v); %d of %d keys on the killed master",
			cl.name, reshardSlots, reshardEnd.Sub(reshardAt), duringReshard, reshardErrs, len(victimKeys), len(h.keys))
		t.Logf("FIGURE %s cluster: first degraded decision %v after the kill; cluster ok again %v after the kill; first decision from the promoted replica on its keys %v after that",
			cl.name, firstDegraded.end.Sub(killAt), failedOverAt.Sub(killAt), fresh.end.Sub(failedOverAt))
		t.Logf("FIGURE %s cluster: between the kill and the failover, %d of %d decisions on keys of the healthy masters were degraded denials (cluster-require-full-coverage yes: CLUSTERDOWN everywhere until the promotion)",
			cl.name, healthyDegraded, healthyDuring)
		t.Logf("FIGURE %s cluster: most admissions of one key in one window %d (limit %d); over-admission %d; admissions lost by the failover %d; %d decisions, %d degraded (all denials)",
			cl.name, worst, rule.Limit, over, totalLost, len(ds), degraded)
	})
}

// clusterKeys returns moved keys whose slot is below reshardSlots
// (the ones the reshard moves), then other keys.
func clusterKeys(h *harness, rule algorithms.Rule, moved, others int) []backend.Key {
	prefix := fmt.Sprintf("fbit:%s:%d:", strings.ReplaceAll(h.t.Name(), "/", "."), time.Now().UnixNano())
	var low, rest []backend.Key
	for i := 0; len(low) < moved || len(rest) < others; i++ {
		key := backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(i)}
		if redistest.KeySlot(rediswire.Key(key, rule)) < reshardSlots {
			if len(low) < moved {
				low = append(low, key)
			}
		} else if len(rest) < others {
			rest = append(rest, key)
		}
	}
	return append(low, rest...)
}

// cliReshard moves n slots from src to dst with redis-cli, non-interactively.
func cliReshard(src, dst *redistest.Server, n int) (string, error) {
	from, err := src.Do("CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	to, err := dst.Do("CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), itFailoverWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", src.Addr(),
		"--cluster-from", from, "--cluster-to", to, "--cluster-slots", strconv.Itoa(n), "--cluster-yes")
	cmd.WaitDelay = time.Second
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// replicaOf returns the replica of master.
func replicaOf(t *testing.T, c *redistest.Cluster, master *redistest.Server) *redistest.Server {
	t.Helper()
	for _, r := range c.Replicas {
		info, err := r.Do("INFO", "replication")
		require.NoError(t, err)
		if strings.Contains(info, "master_port:"+strconv.Itoa(master.Port())+"\r") ||
			strings.Contains(info, "master_port:"+strconv.Itoa(master.Port())+"\n") {
			return r
		}
	}
	t.Fatalf("no replica of %s", master.Addr())
	return nil
}

// replicaCounts returns, per key, the entries the replica holds with a
// timestamp after fromMs.
func replicaCounts(t *testing.T, replica *redistest.Server, h *harness, keys []int, fromMs int64) map[int]int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	defer rc.Close()
	out := make(map[int]int64, len(keys))
	for _, k := range keys {
		n, err := rc.ZCount(t.Context(), rediswire.Key(h.keys[k], h.rule), "("+strconv.FormatInt(fromMs, 10), "+inf").Result()
		require.NoError(t, err)
		out[k] = n
	}
	return out
}

// mostInOneWindow returns the largest number of admissions, given by the
// times (ms) they were decided at, inside one sliding window (x-w, x].
func mostInOneWindow(admitted []int64, w int64) int {
	ms := slices.Sorted(slices.Values(admitted))
	most, lo := 0, 0
	for hi, x := range ms {
		for ms[lo] <= x-w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// TestClusterFailoverGoRedisDefaultReload: with go-redis' default
// ClusterStateReloadInterval (60 s), a ClusterClient keeps dialing a dead
// master long after its replica took over, because go-redis reloads its slot
// map after MOVED/ASK/READONLY but not after a connection error (go-redis
// issue #3979); the fallback store then stayed degraded (here: denying
// everything on those slots) for 56 s after the cluster was healthy again.
// goredisstore asks the client to reload on connection errors; decisions
// must be back on the cluster within 30 s of its failover.
func TestClusterFailoverGoRedisDefaultReload(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	client := redis.NewClusterClient(goredisClusterOptions(c))
	t.Cleanup(func() { _ = client.Close() })
	store, err := goredisstore.New(client)
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1000, Window: time.Minute}
	h := newHarness(t, store, rule, 0, fallback.WithPolicy(backend.FailClosed))
	victim := c.Masters[1]
	replica := replicaOf(t, c, victim)
	for i := 0; len(h.keys) == 0; i++ {
		key := backend.Key{Prefix: fmt.Sprintf("fbit:repro:%d:", time.Now().UnixNano()), ID: strconv.Itoa(i)}
		if c.MasterOf(redistest.KeySlot(rediswire.Key(key, rule))) == victim {
			h.keys = append(h.keys, key)
		}
	}
	take := func() backend.Result {
		res, err := h.fb.Take(t.Context(), backend.Request{Key: h.keys[0], Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
		return res
	}
	// Precondition: decisions served by the cluster. A fresh client's
	// first call dials and loads slots and the script, which may miss the
	// short deadline on a loaded machine; that is not what is tested.
	require.NoError(t, client.ForEachShard(t.Context(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	for start := time.Now(); take().Degraded; time.Sleep(50 * time.Millisecond) {
		require.Less(t, time.Since(start), 30*time.Second, "decisions never came from the healthy cluster")
	}
	victim.Kill()
	c.Takeover(replica)
	failedOverAt := time.Now()
	for time.Since(failedOverAt) < 120*time.Second {
		if res := take(); !res.Degraded {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	back := time.Since(failedOverAt)
	t.Logf("decisions back on the cluster %v after it failed over (last primary error: %v)", back, h.primary.lastError())
	require.Less(t, back, 30*time.Second, "the store stayed degraded after the cluster had failed over")
}
