package redisengine_test

// Tests of the tools for endpoints that move money, against real
// redis-server processes: the guard bounds what a lost primary log lets
// through, replica-acknowledged admission, and refunds of composite rules
// that cannot share a script.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
	"github.com/limitkit/limitkit/limiter"
)

// TestGuardHoldsWhenThePrimaryLogIsLost wipes a limiter's main log after
// its admissions, as a failover that lost them would: the main limit lets
// a second full window through, and the guard still holds the total to its
// own limit. The control, without a guard, admits both windows in full.
func TestGuardHoldsWhenThePrimaryLogIsLost(t *testing.T) {
	srv := redistest.Start(t)
	for i, store := range stores(t, srv, nil, nil) {
		for _, guarded := range []bool{true, false} {
			t.Run(fmt.Sprintf("store%d/guard=%v", i, guarded), func(t *testing.T) {
				cfg := limiter.Config{Limit: 10, Window: time.Minute, Prefix: fmt.Sprintf("pay%d:%v:", i, guarded)}
				if guarded {
					cfg.Guard = &limiter.Guard{Limit: 15, Window: 24 * time.Hour}
				}
				fake := clock.NewFake(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
				lim, err := limiter.New(store, cfg, limiter.WithClock(fake))
				require.NoError(t, err)
				ctx := t.Context()
				admitted := 0
				round := func() {
					for range 12 {
						d, err := lim.Allow(ctx, "acct-42")
						require.NoError(t, err)
						if d.Allowed {
							admitted++
						}
						fake.Advance(time.Second)
					}
				}
				round()
				require.Equal(t, 10, admitted)
				// The failover lost the main log; the guard's key was kept.
				mainKey := rediswire.Key(backend.Key{Prefix: cfg.Prefix, ID: "acct-42"},
					algorithms.Rule{Algorithm: algorithms.SlidingLog})
				_, err = srv.Do("DEL", mainKey)
				require.NoError(t, err)
				round()
				d, err := lim.Allow(ctx, "acct-42")
				require.NoError(t, err)
				if guarded {
					require.Equal(t, 15, admitted, "the guard must hold the total to its limit")
					require.False(t, d.Allowed)
					require.Equal(t, limiter.GuardRule, d.Rule)
				} else {
					require.Equal(t, 20, admitted, "control: without a guard, the lost log lets a second window through")
				}
			})
		}
	}
}

// ackStores returns a go-redis and a rueidis store on master with
// replica-acknowledged admission.
func ackStores(t *testing.T, master *redistest.Server, onShort backend.OnShortAck, wait time.Duration) map[string]backend.Store {
	t.Helper()
	gc := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc, goredisstore.WithReplicaAck(1, wait, onShort))
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr()}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	rs, err := rueidisstore.New(rc, rueidisstore.WithReplicaAck(1, wait, onShort))
	require.NoError(t, err)
	return map[string]backend.Store{"go-redis": gs, "rueidis": rs}
}

// entries counts the sliding-log entries srv holds for key.
func entries(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	n, err := srv.Do("ZCOUNT", key, "0", "+inf")
	require.NoError(t, err)
	v, err := strconv.Atoi(n)
	require.NoError(t, err)
	return v
}

// TestReplicaAcknowledgedAdmission runs a master and a replica. With the
// replica running, admissions are confirmed and the replica holds every
// admitted entry; with it stopped, they are not confirmed: denied and
// rolled back, or admitted and marked, per the policy.
func TestReplicaAcknowledgedAdmission(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	// Short waits where the replica is down; long ones where it is up, so a
	// busy machine cannot make a live replica miss the wait.
	deny := ackStores(t, master, backend.DenyUnconfirmed, 300*time.Millisecond)
	admit := ackStores(t, master, backend.AdmitUnconfirmed, 300*time.Millisecond)
	patientDeny := ackStores(t, master, backend.DenyUnconfirmed, 10*time.Second)
	patientAdmit := ackStores(t, master, backend.AdmitUnconfirmed, 10*time.Second)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 50, Window: time.Hour}
	guard := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 100, Window: 24 * time.Hour}
	now := time.Now()
	ctx := t.Context()
	req := func(client string) backend.Request {
		return backend.Request{Key: backend.Key{Prefix: "ack:", ID: client}, Rule: rule, Now: now, Cost: 1}
	}
	withGuard := func(client string) []backend.Request {
		g := req(client)
		g.Key.Prefix, g.Rule = "ack:guard:", guard
		return []backend.Request{req(client), g}
	}
	key := func(client string) string { return rediswire.Key(req(client).Key, rule) }

	// Replica up: every admission confirmed, and on the replica.
	for client, store := range patientDeny {
		for range 3 {
			res, err := store.Take(ctx, req(client))
			require.NoError(t, err)
			require.True(t, res.Allowed, "%s: %+v", client, res)
			require.False(t, res.Unconfirmed, client)
		}
		res, err := store.TakeAll(ctx, withGuard(client))
		require.NoError(t, err)
		require.True(t, res.Allowed && !res.Unconfirmed, "%s: %+v", client, res)
		require.Equal(t, 4, entries(t, replica, key(client)), "%s: the replica must hold every admitted entry", client)
	}

	replica.Stop()
	for client, store := range deny {
		res, err := store.Take(ctx, req(client))
		require.NoError(t, err)
		require.False(t, res.Allowed, client)
		require.True(t, res.Unconfirmed, client)
		require.Positive(t, res.RetryAfter)
		res, err = store.TakeAll(ctx, withGuard(client))
		require.NoError(t, err)
		require.False(t, res.Allowed, client)
		require.True(t, res.Unconfirmed, client)
		require.Equal(t, 4, entries(t, master, key(client)), "%s: denied admissions must be rolled back", client)
		peek, err := store.Peek(ctx, withGuard(client)[1])
		require.NoError(t, err)
		require.Equal(t, guard.Limit-1, peek.Remaining, "%s: the guard's unit must be rolled back too", client)
	}
	for client, store := range admit {
		res, err := store.Take(ctx, req(client))
		require.NoError(t, err)
		require.True(t, res.Allowed && res.Unconfirmed, "%s: %+v", client, res)
		require.Equal(t, 5, entries(t, master, key(client)), client)
	}

	replica.Restart()
	redistest.WaitInSync(t, master, replica)
	for client, store := range patientAdmit {
		res, err := store.Take(ctx, req(client))
		require.NoError(t, err)
		require.True(t, res.Allowed && !res.Unconfirmed, "%s: %+v", client, res)
		require.Equal(t, 6, entries(t, replica, key(client)), client)
	}
}

// TestReplicaAckRefusesClusterClients: WAIT cannot follow a script to its
// master through a cluster client, so the option is refused.
func TestReplicaAckRefusesClusterClients(t *testing.T) {
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = gc.Close() })
	_, err := goredisstore.New(gc, goredisstore.WithReplicaAck(1, time.Second, backend.DenyUnconfirmed))
	require.ErrorContains(t, err, "single-master")
	_, err = goredisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		goredisstore.WithReplicaAck(1, 0, backend.DenyUnconfirmed))
	require.ErrorContains(t, err, "timeout")
}

// slotConn is a go-redis Conn that claims to be a cluster client, so the
// runner takes keys of different slots one by one, and runs hook before
// each writing script.
type slotConn struct {
	c    *redis.Client
	hook func(cmd redisengine.Command, keys []string)
}

func (a *slotConn) Eval(ctx context.Context, cmd redisengine.Command, script string, keys, args []string) ([]int64, error) {
	if a.hook != nil && !cmd.ReadOnly() {
		a.hook(cmd, keys)
	}
	argv := []any{cmd.String(), script, len(keys)}
	for _, k := range keys {
		argv = append(argv, k)
	}
	for _, v := range args {
		argv = append(argv, v)
	}
	return a.c.Do(ctx, argv...).Int64Slice()
}

func (a *slotConn) EvalWait(context.Context, redisengine.Command, string, []string, []string, int, time.Duration) ([]int64, int64, error) {
	return nil, 0, errors.New("not used")
}

func (a *slotConn) EvalBatch(context.Context, redisengine.Command, string, []string, []string) ([]int64, []error, error) {
	return nil, nil, errors.New("not used")
}

func (a *slotConn) Del(ctx context.Context, key string) error { return a.c.Del(ctx, key).Err() }
func (a *slotConn) IsNoScript(err error) bool                 { return redis.HasErrorPrefix(err, "NOSCRIPT") }
func (a *slotConn) Cluster() bool                             { return true }

// TestCompositeRefunds: three rules on keys of three slots. Another caller
// fills the last rule between the check and the take, so the last rule
// denies after the first two took their units: those are refunded, and
// every counter is back where it was.
func TestCompositeRefunds(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	other, err := redisengine.New(&slotConn{c: client}, "other", redisengine.Options{})
	require.NoError(t, err)

	now := time.Now()
	reqs := []backend.Request{
		{Key: backend.Key{Prefix: "user:", ID: "u1"}, Rule: algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 5, Window: time.Minute}},
		{Key: backend.Key{Prefix: "tenant:", ID: "t1"}, Rule: algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 5, Window: time.Minute}},
		{Key: backend.Key{Prefix: "global:", ID: "all"}, Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute}},
	}
	for i := range reqs {
		reqs[i].Now, reqs[i].Cost = now, 1
	}
	keys := make([]string, len(reqs))
	for i := range reqs {
		keys[i] = rediswire.StateKey(&reqs[i]) // a fixed window's: its window's
	}
	require.NotEqual(t, redistest.KeySlot(keys[0]), redistest.KeySlot(keys[2]))

	// The first call admits; its units stay.
	var interloped atomic.Int32
	conn := &slotConn{c: client}
	runner, err := redisengine.New(conn, "test", redisengine.Options{})
	require.NoError(t, err)
	res, err := runner.TakeAll(t.Context(), reqs)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	remaining := func() []int64 {
		out := make([]int64, len(reqs))
		for i := range reqs {
			p, err := runner.Peek(t.Context(), reqs[i])
			require.NoError(t, err)
			out[i] = p.Remaining
		}
		return out
	}
	before := remaining()
	require.Equal(t, []int64{4, 4, 2}, before)

	// Between the check and the take of the last rule, another caller
	// takes the global key's last two units.
	conn.hook = func(_ redisengine.Command, k []string) {
		if k[0] == keys[2] && interloped.Add(1) == 1 {
			fill := reqs[2]
			fill.Cost = 2
			r, err := other.Take(context.Background(), fill)
			if err != nil || !r.Allowed {
				panic(fmt.Sprintf("interloper: %+v %v", r, err))
			}
		}
	}
	res, err = runner.TakeAll(t.Context(), reqs)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, 2, res.Rule, "the global rule denied")
	require.EqualValues(t, 1, interloped.Load())
	require.Equal(t, []int64{4, 4, 0}, remaining(), "the user and tenant units must be refunded")
	require.Equal(t, 1, entries(t, srv, keys[0]), "the user's sliding log holds only the first admission")
}
