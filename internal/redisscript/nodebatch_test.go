package redisscript

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
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/testing/redistest"
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
			return nil, nil, fmt.Errorf("%w: %T", ErrBadReply, v)
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
