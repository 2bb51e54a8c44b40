package fallback_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// TestClusterReshardPeeksAndTakeAlls moves 200 slots from one master to
// another under a load of batched TakeAlls and Peeks, both clients. Each
// TakeAll takes from a user and the user's group (keys of different slots
// of the first master; some of them in the slots that move), all or
// nothing; the keys change every 100 ms (an epoch), so admissions go on all
// through the reshard. No caller sees an error, and afterwards every key
// holds exactly the units of the TakeAlls it admitted, within its limit: a
// TakeAll refused by a node whose slot moved wrote nothing before it was
// sent again. (scripttest.BatchedPeeksAndTakeAlls has the control that
// shows the check catches partial TakeAlls.)
func TestClusterReshardPeeksAndTakeAlls(t *testing.T) {
	t.Parallel() // mostly the cluster's start and the reshard; a cluster of its own
	c := redistest.StartCluster(t, 3, 0)
	from, to := c.Masters[0], c.Masters[1]
	for _, client := range []string{"goredis", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			reshardKinds(t, c, clusterStore(t, client, c, 0), from, to)
			from, to = to, from // the next client moves them back
		})
	}
}

const (
	kindsEpoch     = 100 * time.Millisecond
	kindsUserLimit = 5
	kindsGrpLimit  = 12
)

// kindsKeys are one epoch's keys: two groups, one in a slot that moves,
// each with 4 users, half of them in slots that move.
type kindsKeys struct {
	groups [2]string
	users  [2][4]string
}

func reshardKinds(t *testing.T, c *redistest.Cluster, s backend.Store, from, to *redistest.Server) {
	user := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: kindsUserLimit, Window: time.Minute}
	group := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: kindsGrpLimit, Window: time.Minute}
	prefix := fmt.Sprintf("reshardkinds:%d:", time.Now().UnixNano())
	userKey := func(id string) backend.Key { return backend.Key{Prefix: prefix + "u:", ID: id} }
	groupKey := func(id string) backend.Key { return backend.Key{Prefix: prefix + "g:", ID: id} }
	// Who serves each slot now, and the slots that move: redis-cli moves
	// the source's lowest ones.
	owner := slotOwners(t, c)
	var moving []int
	for slot := 0; len(moving) < reshardSlots; slot++ {
		if owner[slot] == from {
			moving = append(moving, slot)
		}
	}
	moves := func(key string) bool {
		slot := redistest.KeySlot(key)
		return slot >= moving[0] && slot <= moving[len(moving)-1]
	}
	// find returns an id for key under rule on from, moving or not.
	find := func(base string, key func(string) backend.Key, rule algorithms.Rule, move bool) string {
		for i := 0; ; i++ {
			id := base + strconv.Itoa(i)
			k := rediswire.Key(key(id), rule)
			if owner[redistest.KeySlot(k)] == from && moves(k) == move {
				return id
			}
		}
	}
	var epochsMu sync.Mutex
	epochs := map[int]*kindsKeys{}
	keysOf := func(e int) *kindsKeys {
		epochsMu.Lock()
		defer epochsMu.Unlock()
		if k := epochs[e]; k != nil {
			return k
		}
		k := &kindsKeys{}
		for g := range 2 {
			k.groups[g] = find(fmt.Sprintf("e%dg%d-", e, g), groupKey, group, g == 0)
			for u := range 4 {
				k.users[g][u] = find(fmt.Sprintf("e%dg%du%d-", e, g, u), userKey, user, u%2 == 0)
			}
		}
		epochs[e] = k
		return k
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		admitted = map[string]int64{}
		errs     []error
		during   atomic.Int64 // TakeAlls decided while slots moved
		moving2  atomic.Bool
		stop     atomic.Bool
	)
	var wg sync.WaitGroup
	for caller := range 64 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				e := int(time.Since(start) / kindsEpoch)
				k := keysOf(e)
				g, u := caller%2, (caller/2+i)%4
				now := start.Add(time.Duration(e) * kindsEpoch)
				reqs := []backend.Request{
					{Key: userKey(k.users[g][u]), Rule: user, Now: now, Cost: 1},
					{Key: groupKey(k.groups[g]), Rule: group, Now: now, Cost: 1},
				}
				res, err := s.TakeAll(t.Context(), reqs)
				if err == nil && i%4 == 0 {
					_, err = s.Peek(t.Context(), reqs[0])
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Allowed {
					admitted["u:"+k.users[g][u]]++
					admitted["g:"+k.groups[g]]++
				}
				mu.Unlock()
				if moving2.Load() {
					during.Add(1)
				}
				if err != nil {
					return
				}
			}
		})
	}
	time.Sleep(time.Second)
	moving2.Store(true)
	out, err := cliReshard(from, to, reshardSlots)
	moving2.Store(false)
	require.NoError(t, err, "redis-cli --cluster reshard:\n%s", out)
	c.WaitOK()
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	require.Empty(t, errs, "errors to callers")
	require.Positive(t, during.Load(), "no TakeAll ran while the slots moved")
	k0 := keysOf(0)
	require.Same(t, to, c.MasterOf(redistest.KeySlot(rediswire.Key(groupKey(k0.groups[0]), group))), "the moving group did not move")

	epochsMu.Lock()
	defer epochsMu.Unlock()
	checked, full := 0, 0
	for _, k := range epochs {
		for g := range 2 {
			check := func(name string, req backend.Request) {
				res, err := s.Peek(t.Context(), req)
				require.NoError(t, err)
				n := admitted[name]
				assert.LessOrEqual(t, n, req.Rule.Limit, name)
				assert.Equal(t, req.Rule.Limit-n, res.Remaining, "%s: %d admitted", name, n)
				checked++
				if n == req.Rule.Limit {
					full++
				}
			}
			check("g:"+k.groups[g], backend.Request{Key: groupKey(k.groups[g]), Rule: group, Now: time.Now(), Cost: 1})
			for _, id := range k.users[g] {
				check("u:"+id, backend.Request{Key: userKey(id), Rule: user, Now: time.Now(), Cost: 1})
			}
		}
	}
	t.Logf("%d epochs, %d TakeAlls while %d slots moved; %d keys checked, %d of them full", len(epochs), during.Load(), reshardSlots, checked, full)
	require.Positive(t, full, "no key reached its limit: the check proves little")
}

// slotOwners returns the master serving each slot, from one CLUSTER SLOTS.
func slotOwners(t *testing.T, c *redistest.Cluster) []*redistest.Server {
	t.Helper()
	v, err := c.Masters[0].DoValue(t.Context(), "CLUSTER", "SLOTS")
	require.NoError(t, err)
	byPort := map[int64]*redistest.Server{}
	for _, m := range c.Masters {
		byPort[int64(m.Port())] = m
	}
	owner := make([]*redistest.Server, redistest.NumSlots)
	ranges, ok := v.([]any)
	require.True(t, ok, "CLUSTER SLOTS: %T", v)
	for _, r := range ranges {
		f, ok := r.([]any)
		require.True(t, ok && len(f) >= 3, "CLUSTER SLOTS range: %v", r)
		node, ok := f[2].([]any)
		require.True(t, ok && len(node) >= 2, "CLUSTER SLOTS node: %v", f[2])
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		port, _ := node[1].(int64)
		m := byPort[port]
		require.NotNil(t, m, "CLUSTER SLOTS names port %d", port)
		for slot := lo; slot <= hi; slot++ {
			owner[slot] = m
		}
	}
	return owner
}
