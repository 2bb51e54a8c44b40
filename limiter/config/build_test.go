package config

import (
	"context"
	"crypto/sha1"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
	"github.com/limitkit/limitkit/limiter"
)

// start is aligned to every window of the policies, so fixed windows start
// with it.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// threePolicies is the file the behaviour tests build, on the backend
// given by the format arguments (URL, client).
const threePolicies = `
backend:
  url: %s
  client: %s
policies:
  login:
    algorithm: sliding_log
    limit: 5
    window: 15m
  api:
    algorithm: sliding_counter
    limit: 100
    window: 1m
    prefix: "test:api:"
  payment:
    algorithm: fixed_window
    limit: 3
    window: 1s
    guard:
      limit: 5
      window: 1h
`

func build(t *testing.T, url, client string) (*Set, *clock.Fake) {
	t.Helper()
	cfg, err := Parse(fmt.Appendf(nil, threePolicies, url, client), YAML)
	require.NoError(t, err)
	fake := clock.NewFake(start)
	set, err := cfg.Build(context.Background(), WithLimiterOptions(limiter.WithClock(fake)))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	return set, fake
}

// admitted counts how many of n requests for key lim admits.
func admitted(t *testing.T, lim *limiter.Limiter, key string, n int) (int, limiter.Decision) {
	t.Helper()
	count := 0
	var last limiter.Decision
	for range n {
		d, err := lim.Allow(context.Background(), key)
		require.NoError(t, err)
		if d.Allowed {
			count++
		}
		last = d
	}
	return count, last
}

// checkPolicies: each limiter of threePolicies behaves as configured.
func checkPolicies(t *testing.T, set *Set, fake *clock.Fake) {
	t.Helper()
	require.Equal(t, []string{"login", "api", "payment"}, set.Names())
	_, ok := set.Lookup("nope")
	require.False(t, ok)
	require.Nil(t, set.Limiter("nope"))

	login := set.Limiter("login")
	require.Equal(t, "limitkit:login:", login.Config().Prefix)
	n, last := admitted(t, login, "alice", 8)
	require.Equal(t, 5, n, "login admits exactly its limit")
	require.Equal(t, 15*time.Minute, last.RetryAfter)
	n, _ = admitted(t, login, "bob", 1)
	require.Equal(t, 1, n, "keys are independent")

	api := set.Limiter("api")
	require.Equal(t, "test:api:", api.Config().Prefix)
	n, _ = admitted(t, api, "tenant", 130)
	require.Equal(t, 100, n)

	payment := set.Limiter("payment")
	n, last = admitted(t, payment, "card", 4)
	require.Equal(t, 3, n, "3 per second")
	require.Equal(t, 0, last.Rule, "denied by the main limit")
	fake.Advance(time.Second)
	n, last = admitted(t, payment, "card", 3)
	require.Equal(t, 2, n, "the guard's 5 per hour leaves 2")
	require.Equal(t, limiter.GuardRule, last.Rule, "denied by the guard")
	fake.Advance(time.Second)
	n, _ = admitted(t, payment, "card", 1)
	require.Equal(t, 0, n, "the guard holds in the next second too")
}

func TestBuildMemory(t *testing.T) {
	set, fake := build(t, "memory://?max_keys=100", GoRedis)
	_, isMemory := set.Store().(*memorystore.Store)
	require.True(t, isMemory)
	require.Nil(t, set.Fallback())
	checkPolicies(t, set, fake)
}

// TestBuildRedis: the same file on a real redis-server, through each
// client, and the state is in Redis under the policies' prefixes.
func TestBuildRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			_, err := srv.Do("FLUSHALL")
			require.NoError(t, err)
			set, fake := build(t, "redis://"+srv.Addr()+"/0", client)
			checkPolicies(t, set, fake)
			for _, key := range []string{"limitkit:login:{alice}:sl", "test:api:{tenant}:sc"} {
				n, err := srv.Do("EXISTS", key)
				require.NoError(t, err)
				require.Equal(t, "1", n, key)
			}
			// A fixed window keeps a key per window: its key, ':' and the
			// window's start.
			for _, key := range []string{"limitkit:payment:{card}:fw", "limitkit:payment:guard:{card}:fw"} {
				keys, err := srv.Do("KEYS", key+":*")
				require.NoError(t, err)
				require.NotEmpty(t, strings.TrimSpace(keys), key)
			}
		})
	}
}

// TestBuildCluster: a redis+cluster:// URL naming every master builds a
// store that limits across the cluster's slots.
func TestBuildCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	addrs := cluster.Addrs()
	url := "redis+cluster://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			set, _ := build(t, url, client)
			login := set.Limiter("login")
			// Keys spread over the three masters; each admits exactly 5.
			for i := range 6 {
				key := client + "-user-" + fmt.Sprint(i)
				n, _ := admitted(t, login, key, 7)
				require.Equal(t, 5, n, key)
				full := "limitkit:login:{" + key + "}:sl"
				n2, err := cluster.MasterOf(redistest.KeySlot(full)).Do("EXISTS", full)
				require.NoError(t, err)
				require.Equal(t, "1", n2, full)
			}
		})
	}
}

// TestBuildSentinel: a redis+sentinel:// URL naming the sentinels and the
// master's name builds a store on the master they monitor.
func TestBuildSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	addrs := sn.SentinelAddrs()
	url := "redis+sentinel://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=") + "&master_name=" + sn.MasterName
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			set, _ := build(t, url, client)
			key := client + "-alice"
			n, _ := admitted(t, set.Limiter("login"), key, 7)
			require.Equal(t, 5, n)
			got, err := sn.Master.Do("EXISTS", "limitkit:login:{"+key+"}:sl")
			require.NoError(t, err)
			require.Equal(t, "1", got)
		})
	}
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestBuildFallback: the fallback section wraps the Redis store, and each
// policy's on_failure decides while Redis cannot be reached (it was up at
// Build, which checks it).
func TestBuildFallback(t *testing.T) {
	srv := redistest.Start(t)
	file := fmt.Sprintf(`
backend:
  url: redis://%s/0
  fallback:
    timeout: 200ms
    failure_threshold: 2
    open_timeout: 1h
    probes: 1
    on_failure: local:2
policies:
  login: {limit: 5, window: 1m, on_failure: fail_open}
  payment: {limit: 5, window: 1m, on_failure: fail_closed}
  search: {limit: 5, window: 1m}
`, srv.Addr())
	cfg, err := Parse([]byte(file), YAML)
	require.NoError(t, err)
	require.Equal(t, &Fallback{Timeout: 200 * time.Millisecond, FailureThreshold: 2, OpenTimeout: time.Hour, Probes: 1,
		OnFailure: backend.LocalPolicy(2)}, cfg.Backend.Fallback)
	var changes []backend.StateChange
	set, err := cfg.Build(context.Background(),
		WithFallbackOptions(fallback.WithStateHook(func(c backend.StateChange) { changes = append(changes, c) })))
	require.NoError(t, err)
	defer set.Close()
	require.NotNil(t, set.Fallback())
	require.Same(t, set.Fallback(), set.Store())
	srv.Kill()

	ctx := context.Background()
	for range 3 {
		d, err := set.Limiter("login").Allow(ctx, "alice")
		require.NoError(t, err)
		require.True(t, d.Allowed && d.Degraded, "login fails open")
		d, err = set.Limiter("payment").Allow(ctx, "alice")
		require.NoError(t, err)
		require.True(t, !d.Allowed && d.Degraded, "payment fails closed")
	}
	require.Equal(t, backend.BreakerOpen, set.Fallback().State(), "failure_threshold 2 opened the breaker")
	require.NotEmpty(t, changes, "the state hook passed by WithFallbackOptions ran")
	// search has no on_failure: the file's default local:2 gives this
	// instance ceil(5/2) = 3.
	n, _ := admitted(t, set.Limiter("search"), "alice", 5)
	require.Equal(t, 3, n)
}

// TestBuildRueidisUnreachable: rueidis connects in Build, so an
// unreachable server fails Build with an error saying so.
func TestBuildRueidisUnreachable(t *testing.T) {
	cfg, err := Parse(fmt.Appendf(nil, threePolicies, "redis://"+refusedAddr(t)+"/0", Rueidis), YAML)
	require.NoError(t, err)
	_, err = cfg.Build(context.Background())
	require.ErrorContains(t, err, "rueidis could not connect")
}

func TestBackendOpen(t *testing.T) {
	store, closeFn, err := Backend{URL: "memory://"}.Open(context.Background())
	require.NoError(t, err)
	require.NotNil(t, store)
	require.NoError(t, closeFn())
	_, _, err = Backend{URL: "memory://", Client: "jedis"}.Open(context.Background())
	require.EqualError(t, err, `backend.client: unknown client "jedis"; write "go-redis" or "rueidis"`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = Backend{URL: "memory://"}.Open(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

// TestBuildServerTime: with server_time the scripts read Redis' clock, so
// moving the limiter's (fake) clock an hour on frees nothing; without it,
// it does.
func TestBuildServerTime(t *testing.T) {
	srv := redistest.Start(t)
	for _, serverTime := range []bool{false, true} {
		for _, client := range []string{GoRedis, Rueidis} {
			t.Run(fmt.Sprint(client, " server_time=", serverTime), func(t *testing.T) {
				cfg, err := Parse(fmt.Appendf(nil, `
backend: {url: "redis://%s/0", client: %s, server_time: %v}
policies:
  login: {limit: 2, window: 15m, prefix: "st:%s:%v:"}
`, srv.Addr(), client, serverTime, client, serverTime), YAML)
				require.NoError(t, err)
				require.Equal(t, serverTime, cfg.Backend.ServerTime)
				fake := clock.NewFake(start)
				set, err := cfg.Build(context.Background(), WithLimiterOptions(limiter.WithClock(fake)))
				require.NoError(t, err)
				defer set.Close()
				n, _ := admitted(t, set.Limiter("login"), "alice", 3)
				require.Equal(t, 2, n)
				fake.Advance(time.Hour)
				n, _ = admitted(t, set.Limiter("login"), "alice", 1)
				require.Equal(t, !serverTime, n == 1)
			})
		}
	}
}

// TestBuildBatch: by default Takes go through the batch script; with
// batch: 1 each goes alone through its algorithm's script, and the batch
// script is never loaded.
func TestBuildBatch(t *testing.T) {
	batchSHA := fmt.Sprintf("%x", sha1.Sum([]byte(rediswire.BatchScript())))
	for _, client := range []string{GoRedis, Rueidis} {
		for _, batch := range []int{0, 1} {
			t.Run(fmt.Sprint(client, " batch=", batch), func(t *testing.T) {
				srv := redistest.Start(t)
				cfg, err := Parse(fmt.Appendf(nil, `
backend: {url: "redis://%s/0", client: %s, batch: %d}
policies:
  login: {limit: 2, window: 15m}
`, srv.Addr(), client, batch), YAML)
				require.NoError(t, err)
				set, err := cfg.Build(context.Background())
				require.NoError(t, err)
				defer set.Close()
				n, _ := admitted(t, set.Limiter("login"), "alice", 3)
				require.Equal(t, 2, n)
				loaded, err := srv.Do("SCRIPT", "EXISTS", batchSHA)
				require.NoError(t, err)
				want := "0"
				if batch == 0 {
					want = "1"
				}
				require.Equal(t, want, loaded, "SCRIPT EXISTS of the batch script")
			})
		}
	}
}

// TestBuildReplicaAck: a server without replicas never acknowledges, so
// with replica_ack and on_short deny every admission is refused, marked
// Unconfirmed.
func TestBuildReplicaAck(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			cfg, err := Parse(fmt.Appendf(nil, `
backend:
  url: redis://%s/0
  client: %s
  replica_ack: {replicas: 1, timeout: 10ms, on_short: deny}
policies:
  payment: {limit: 5, window: 1m, prefix: "ack:%s:"}
`, srv.Addr(), client, client), YAML)
			require.NoError(t, err)
			require.Equal(t, &ReplicaAck{Replicas: 1, Timeout: 10 * time.Millisecond, OnShort: "deny"}, cfg.Backend.ReplicaAck)
			set, err := cfg.Build(context.Background())
			require.NoError(t, err)
			defer set.Close()
			d, err := set.Limiter("payment").Allow(context.Background(), "card")
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.True(t, d.Unconfirmed)
		})
	}
}
