package scripttest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// The load of BatchedPeeksAndTakeAlls: 64 callers, 25 calls each, over 4
// groups of 4 users. A call takes from its user (20 a minute) and its group
// (60 a minute) all or nothing; the groups bind (4 users could take 80).
const (
	kindsCallers   = 64
	kindsPerCaller = 25
	kindsGroups    = 4
	kindsUsers     = 4
	kindsUserLimit = 20
	kindsGrpLimit  = 60
)

// BatchedPeeksAndTakeAlls checks Peek and TakeAll batching through a
// store, on the servers holding its keys (nodes; nodeOf names the one
// holding a key on a cluster, nil on one server):
//
//   - batched (a store with batching on): 1,600 TakeAlls from 64 callers
//     admit exactly each group's limit, every key's state holds exactly the
//     units admitted (all or nothing), then 1,600 Peeks change nothing; the
//     servers ran fewer than half as many script calls as calls, for each;
//   - control_unbatched (batching off): one script call or more per call;
//   - control_not_all_or_nothing: the same load with each TakeAll sent as
//     separate Takes: the key check finds units taken by denied calls, so it
//     would catch a batch that does not decide each TakeAll whole.
//
// On a cluster each user's key is on its group's node but, the ids being
// different, in another slot: one batch script decides the TakeAll there.
func BatchedPeeksAndTakeAlls(t *testing.T, batched, unbatched backend.Store, nodes []*redistest.Server, nodeOf func(key string) *redistest.Server) {
	t.Helper()
	t.Run("batched", func(t *testing.T) {
		r := runKinds(t, batched, nodes, nodeOf, false)
		require.Empty(t, r.wrong, "keys whose state does not match the admissions")
		t.Logf("FIGURE batched: %.3f script calls per TakeAll, %.3f per Peek", r.perTakeAll, r.perPeek)
		require.Less(t, r.perTakeAll, 0.5, "TakeAll batches did not form")
		require.Less(t, r.perPeek, 0.5, "Peek batches did not form")
	})
	t.Run("control_unbatched", func(t *testing.T) {
		r := runKinds(t, unbatched, nodes, nodeOf, false)
		require.Empty(t, r.wrong)
		t.Logf("FIGURE unbatched: %.3f script calls per TakeAll, %.3f per Peek", r.perTakeAll, r.perPeek)
		require.GreaterOrEqual(t, r.perTakeAll, 0.99)
		require.GreaterOrEqual(t, r.perPeek, 0.99)
	})
	t.Run("control_not_all_or_nothing", func(t *testing.T) {
		r := runKinds(t, batched, nodes, nodeOf, true)
		require.NotEmpty(t, r.wrong, "separate Takes should leave units taken by denied calls")
		t.Logf("the check caught: %v", r.wrong[0])
	})
}

type kindsReport struct {
	perTakeAll, perPeek float64
	wrong               []string
}

// scriptCalls sums the script calls of every kind the servers ran.
func scriptCalls(t testing.TB, nodes []*redistest.Server) int {
	n := 0
	for _, s := range nodes {
		for _, cmd := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro"} {
			n += CommandCalls(t, s, cmd)
		}
	}
	return n
}

func runKinds(t *testing.T, s backend.Store, nodes []*redistest.Server, nodeOf func(string) *redistest.Server, separate bool) kindsReport {
	user := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: kindsUserLimit, Window: time.Minute}
	group := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: kindsGrpLimit, Window: time.Minute}
	prefix := fmt.Sprintf("kinds:%d:", time.Now().UnixNano())
	userKey := func(id string) backend.Key { return backend.Key{Prefix: prefix + "u:", ID: id} }
	groupKey := func(g int) backend.Key { return backend.Key{Prefix: prefix + "g:", ID: "g" + strconv.Itoa(g)} }
	// Users of each group: ids whose key is on the group's node.
	users := make([][]string, kindsGroups)
	for g := range kindsGroups {
		gk := rediswire.Key(groupKey(g), group)
		for i := 0; len(users[g]) < kindsUsers; i++ {
			id := "g" + strconv.Itoa(g) + "u" + strconv.Itoa(i)
			uk := rediswire.Key(userKey(id), user)
			if nodeOf == nil || nodeOf(uk) == nodeOf(gk) && redistest.KeySlot(uk) != redistest.KeySlot(gk) {
				users[g] = append(users[g], id)
			}
		}
	}
	now := time.Now()
	reqs := func(g int, id string) []backend.Request {
		return []backend.Request{
			{Key: userKey(id), Rule: user, Now: now, Cost: 1},
			{Key: groupKey(g), Rule: group, Now: now, Cost: 1},
		}
	}
	// Warm every node's script cache, so that the counts are of calls.
	for g := range kindsGroups {
		_, err := s.TakeAll(t.Context(), []backend.Request{{Key: backend.Key{Prefix: prefix + "warm:", ID: users[g][0]}, Rule: user, Now: now, Cost: 1},
			{Key: backend.Key{Prefix: prefix + "warm:", ID: "g" + strconv.Itoa(g)}, Rule: group, Now: now, Cost: 1}})
		require.NoError(t, err)
		_, err = s.Peek(t.Context(), reqs(g, users[g][0])[0])
		require.NoError(t, err)
	}
	var mu sync.Mutex
	admitted := map[string]int64{}
	load := func(do func(ctx context.Context, g int, id string) error) {
		var wg sync.WaitGroup
		for c := range kindsCallers {
			wg.Go(func() {
				for i := range kindsPerCaller {
					g := (c + i) % kindsGroups
					id := users[g][(c/kindsGroups+i)%kindsUsers]
					if !assert.NoError(t, do(t.Context(), g, id)) {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	before := scriptCalls(t, nodes)
	load(func(ctx context.Context, g int, id string) error {
		rs := reqs(g, id)
		allowed := true
		if separate {
			for _, r := range rs {
				res, err := s.Take(ctx, r)
				if err != nil {
					return err
				}
				allowed = allowed && res.Allowed
			}
		} else {
			res, err := s.TakeAll(ctx, rs)
			if err != nil {
				return err
			}
			allowed = res.Allowed
		}
		if allowed {
			mu.Lock()
			admitted[id]++
			admitted["g"+strconv.Itoa(g)]++
			mu.Unlock()
		}
		return nil
	})
	mid := scriptCalls(t, nodes)
	load(func(ctx context.Context, g int, id string) error {
		_, err := s.Peek(ctx, reqs(g, id)[0])
		return err
	})
	after := scriptCalls(t, nodes)
	require.False(t, t.Failed())
	calls := float64(kindsCallers * kindsPerCaller)
	rep := kindsReport{perTakeAll: float64(mid-before) / calls, perPeek: float64(after-mid) / calls}
	check := func(name string, req backend.Request, n int64) {
		res, err := s.Peek(t.Context(), req)
		require.NoError(t, err)
		if n > req.Rule.Limit || res.Remaining != req.Rule.Limit-n {
			rep.wrong = append(rep.wrong, fmt.Sprintf("%s: %d admitted, %d left of %d", name, n, res.Remaining, req.Rule.Limit))
		}
	}
	for g := range kindsGroups {
		gid := "g" + strconv.Itoa(g)
		if !separate {
			require.Equal(t, int64(kindsGrpLimit), admitted[gid], "group %d: the group limit binds", g)
		}
		check(gid, reqs(g, users[g][0])[1], admitted[gid])
		for _, id := range users[g] {
			check(id, reqs(g, id)[0], admitted[id])
		}
	}
	return rep
}
