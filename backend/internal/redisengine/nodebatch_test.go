package redisengine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// lyingConn is a go-redis cluster Conn whose NodeOf names one node for
// every key: each batch then goes to the master of its first key with keys
// of the other masters in it, as after a reshard or failover the client
// has not seen yet.
type lyingConn struct {
	c        *redis.ClusterClient
	nonLocal atomic.Int64 // requests a node refused as not local
}

func (l *lyingConn) NodeOf(string) string { return "everywhere" }
func (l *lyingConn) Cluster() bool        { return true }

func (l *lyingConn) do(ctx context.Context, cmd Command, script string, keys, args []string) *redis.Cmd {
	argv := []any{cmd.String(), script, len(keys)}
	for _, k := range keys {
		argv = append(argv, k)
	}
	for _, a := range args {
		argv = append(argv, a)
	}
	return l.c.Do(ctx, argv...)
}

func (l *lyingConn) Eval(ctx context.Context, cmd Command, script string, keys, args []string) ([]int64, error) {
	return l.do(ctx, cmd, script, keys, args).Int64Slice()
}

func (l *lyingConn) EvalBatch(ctx context.Context, cmd Command, script string, keys, args []string) ([]int64, []error, error) {
	arr, err := l.do(ctx, cmd, script, keys, args).Slice()
	if err != nil {
		return nil, nil, err
	}
	vals, errs := make([]int64, len(arr)), make([]error, len(arr))
	for i, v := range arr {
		switch v := v.(type) {
		case int64:
			vals[i] = v
		case error:
			errs[i] = v
			if nonLocal(v) {
				l.nonLocal.Add(1)
			}
		default:
			return nil, nil, fmt.Errorf("%w: %T", rediswire.ErrBadReply, v)
		}
	}
	return vals, errs, nil
}

func (l *lyingConn) EvalWait(context.Context, Command, string, []string, []string, int, time.Duration) ([]int64, int64, error) {
	return nil, 0, fmt.Errorf("not in this test")
}

func (l *lyingConn) Del(ctx context.Context, key string) error { return l.c.Del(ctx, key).Err() }
func (l *lyingConn) IsNoScript(err error) bool                 { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// TestClusterBatchNonLocalRetriedAlone: batches holding keys of other
// masters (a stale node map) decide every request exactly once: each
// request a master refuses as not local ("non local key", before it wrote
// anything) is sent again alone and the client routes it. 64 callers take
// from 24 keys over the three masters; each key admits exactly its limit.
// The control turns the retry off: those requests fail.
func TestClusterBatchNonLocalRetriedAlone(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 16})
	t.Cleanup(func() { _ = client.Close() })
	run := func(t *testing.T) (errs int, conn *lyingConn) {
		conn = &lyingConn{c: client}
		r, err := New(conn, "test", Options{Batch: DefaultBatch})
		require.NoError(t, err)
		require.NotNil(t, r.nodes)
		const keys, limit, callers, perCaller = 24, 30, 64, 30
		rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: time.Minute}
		prefix := fmt.Sprintf("nonlocal:%s:%d:", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
		now := time.Now()
		var mu sync.Mutex
		var other []error
		admitted := map[int]int{}
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := range perCaller {
					k := (g*5 + i) % keys
					res, err := r.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: "k" + strconv.Itoa(k)}, Rule: rule, Now: now, Cost: 1})
					mu.Lock()
					if err != nil {
						if !strings.Contains(err.Error(), "non local key") {
							other = append(other, err)
						}
						errs++
					} else if res.Allowed {
						admitted[k]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Empty(t, other, "errors other than a refused non-local key")
		if errs == 0 {
			for k := range keys {
				require.Equal(t, limit, admitted[k], "key %d", k)
			}
		}
		return errs, conn
	}
	t.Run("retried", func(t *testing.T) {
		errs, conn := run(t)
		require.Zero(t, errs)
		require.Positive(t, conn.nonLocal.Load(), "no batch held another master's key: the test proves nothing")
		t.Logf("%d requests refused as not local, each sent again alone", conn.nonLocal.Load())
	})
	t.Run("control_not_retried", func(t *testing.T) {
		retryNonLocal = false
		t.Cleanup(func() { retryNonLocal = true })
		errs, _ := run(t)
		require.Positive(t, errs, "without the retry, refused requests should fail")
	})
}

// TestClusterUndeclaredKeysLandInTheirSlot pins the Redis behaviour the
// cluster batches rely on (see nodebatch.go), so that a Redis upgrade that
// changes it fails here:
//
//   - a script without a shebang line may touch keys it did not declare, of
//     other slots its node serves (the permissive default kept for such
//     scripts by redis/redis#10615; redis/redis#10958 proposes to refuse
//     undeclared keys in a future major version);
//   - a key so written is filed under its own slot, not the declared key's
//     (CLUSTER COUNTKEYSINSLOT, GETKEYSINSLOT, and a read routed by its
//     slot see it): the bug redis/redis#12906 fixed in the development
//     line that brought a dictionary per slot (7.4); Redis 7.0 hashes each
//     key;
//   - a key of a slot the node does not serve is refused ("non local key")
//     before the script writes it;
//   - the control: with a shebang line (flags declared, none of them
//     allow-cross-slot-keys) the same script is refused, so the permission
//     comes from the missing shebang.
//
// Then the real cluster batch script decides Takes over keys of several
// slots of one master, and each key is filed under its own slot.
func TestClusterUndeclaredKeysLandInTheirSlot(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	prefix := fmt.Sprintf("undeclared:%d:", time.Now().UnixNano())
	// Keys of three different slots on the master of the first, and one of
	// another master.
	master := c.MasterOf(redistest.KeySlot(prefix + "{a}"))
	var local []string
	var remote string
	for i := 0; len(local) < 3 || remote == ""; i++ {
		k := prefix + "{" + strconv.Itoa(i) + "}"
		switch m := c.MasterOf(redistest.KeySlot(k)); {
		case m == master && !slicesContainSlot(local, k):
			local = append(local, k)
		case m != master && remote == "":
			remote = k
		}
	}
	count := func(key string) string {
		n, err := master.Do("CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(redistest.KeySlot(key)))
		require.NoError(t, err)
		return n
	}
	const body = "redis.call('ZADD', ARGV[1], 1, 'm') return redis.call('ZCARD', ARGV[1])"
	_, err := master.Do("EVAL", body, "1", local[0], local[1])
	require.NoError(t, err, "a script without flags may touch an undeclared key of its node")
	require.Equal(t, "1", count(local[1]), "the undeclared key is filed under its own slot")
	require.Equal(t, "0", count(local[0]), "and not under the declared key's")
	keys, err := master.Do("CLUSTER", "GETKEYSINSLOT", strconv.Itoa(redistest.KeySlot(local[1])), "10")
	require.NoError(t, err)
	require.Contains(t, keys, local[1])
	n, err := master.Do("ZCARD", local[1])
	require.NoError(t, err)
	require.Equal(t, "1", n)

	_, err = master.Do("EVAL", body, "1", local[0], remote)
	require.ErrorContains(t, err, "non local key")
	other := c.MasterOf(redistest.KeySlot(remote))
	n, err = other.Do("EXISTS", remote)
	require.NoError(t, err)
	require.Equal(t, "0", n, "a refused key is not written anywhere")

	_, err = master.Do("EVAL", "#!lua\n"+body, "1", local[0], local[2])
	require.ErrorContains(t, err, "same slot", "control: a script with flags may not touch another slot")

	// The cluster batch script itself, through a client, over the three
	// slots: each key holds its take, filed under its slot.
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	r, err := New(&lyingConn{c: client}, "test", Options{Batch: DefaultBatch})
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute}
	var wg sync.WaitGroup
	ids := make([]string, 0, 3)
	for i := 0; len(ids) < 3; i++ {
		id := "b" + strconv.Itoa(i)
		k := rediswire.Key(backend.Key{Prefix: prefix, ID: id}, rule)
		if c.MasterOf(redistest.KeySlot(k)) == master && !slicesContainSlot(ids2keys(prefix, ids, rule), k) {
			ids = append(ids, id)
		}
	}
	for range 8 {
		for _, id := range ids {
			wg.Go(func() {
				_, err := r.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: id}, Rule: rule, Now: time.Now(), Cost: 1})
				assert.NoError(t, err)
			})
		}
	}
	wg.Wait()
	for i, k := range ids2keys(prefix, ids, rule) {
		require.Equal(t, "1", count(k), "key %s", k)
		res, err := r.Peek(t.Context(), backend.Request{Key: backend.Key{Prefix: prefix, ID: ids[i]}, Rule: rule, Now: time.Now(), Cost: 1})
		require.NoError(t, err)
		require.Equal(t, int64(2), res.Remaining, "key %s: 8 of 10 taken", k)
	}
}

func ids2keys(prefix string, ids []string, rule algorithms.Rule) []string {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = rediswire.Key(backend.Key{Prefix: prefix, ID: id}, rule)
	}
	return keys
}

// slicesContainSlot reports whether a key of keys shares k's slot.
func slicesContainSlot(keys []string, k string) bool {
	for _, o := range keys {
		if redistest.KeySlot(o) == redistest.KeySlot(k) {
			return true
		}
	}
	return false
}
