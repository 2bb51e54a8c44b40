package scripttest

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// Args returns the ARGV of one call of rule's script (rediswire.Args),
// failing t on a bad mode.
func Args(t testing.TB, rule algorithms.Rule, now, cost int64, mode rediswire.Mode) []string {
	t.Helper()
	args, err := rediswire.Args(rule, now, cost, mode)
	require.NoError(t, err)
	return args
}

// SHA1 returns the digest EVALSHA takes for alg's script.
func SHA1(t testing.TB, alg algorithms.Name) string {
	sum := sha1.Sum([]byte(Source(t, alg)))
	return hex.EncodeToString(sum[:])
}

// Source returns alg's script.
func Source(t testing.TB, alg algorithms.Name) string {
	src, err := rediswire.Script(alg)
	require.NoError(t, err)
	return src
}

// Count returns the number of units a sliding-log key holds (members scored
// >= 0: the bookkeeping member is scored below 0).
func Count(t testing.TB, srv *redistest.Server, key string) int64 {
	out, err := srv.Do("ZCOUNT", key, "0", "+inf")
	require.NoError(t, err)
	n, err := strconv.ParseInt(out, 10, 64)
	require.NoError(t, err)
	return n
}

// WaitCount polls Count until done accepts it and it has stayed the same
// for a few polls (commands a paused server still had to run have run), at
// most 10 s, and returns it.
func WaitCount(t testing.TB, srv *redistest.Server, key string, done func(int64) bool) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last, stable := int64(-1), 0
	for time.Now().Before(deadline) {
		n := Count(t, srv, key)
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
		if done(n) && stable >= 5 {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("key %s: count %d after 10 s", key, last)
	return last
}

// ServerTime checks a store made WithServerTime: requests' Now, wildly
// different, must not matter, since every decision is made at the server's
// time.
func ServerTime(t *testing.T, store backend.Store) {
	t.Helper()
	prefix := fmt.Sprintf("servertime:%d:", time.Now().UnixNano())
	nows := []time.Time{time.UnixMilli(0), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, alg := range algorithms.Names() {
		rule := algorithms.Rule{Algorithm: alg, Limit: 3, Window: time.Hour}
		req := backend.Request{Key: backend.Key{Prefix: prefix, ID: "k"}, Rule: rule, Cost: 1}
		for i, now := range nows {
			req.Now = now
			res, err := store.Take(t.Context(), req)
			require.NoError(t, err)
			require.True(t, res.Allowed, "%s take %d", alg, i)
			require.Equal(t, int64(2-i), res.Remaining, "%s take %d", alg, i)
		}
		req.Now = nows[1]
		res, err := store.Take(t.Context(), req)
		require.NoError(t, err)
		require.False(t, res.Allowed, alg)
		// Decided at the server's real time: the window is an hour long.
		require.Greater(t, res.RetryAfter, time.Duration(0), alg)
		require.LessOrEqual(t, res.RetryAfter, 2*time.Hour, alg)
		require.LessOrEqual(t, res.ResetAfter, 2*time.Hour, alg)
		req.Now = nows[0]
		res, err = store.Peek(t.Context(), req)
		require.NoError(t, err)
		require.False(t, res.Allowed, alg)
		require.Zero(t, res.Remaining, alg)
	}
}

// PeekIsReadOnly checks that Peek runs read-only scripts: with writes
// refused (min-replicas-to-write on a server without replicas), Peek still
// works and Take fails, and the server counted EVALSHA_RO calls.
func PeekIsReadOnly(t *testing.T, store backend.Store, srv *redistest.Server) {
	t.Helper()
	prefix := fmt.Sprintf("peekro:%d:", time.Now().UnixNano())
	for _, alg := range algorithms.Names() {
		req := backend.Request{Key: backend.Key{Prefix: prefix, ID: "k"},
			Rule: algorithms.Rule{Algorithm: alg, Limit: 3, Window: time.Minute}, Now: time.Now(), Cost: 1}
		_, err := store.Take(t.Context(), req)
		require.NoError(t, err)
		_, err = srv.Do("CONFIG", "SET", "min-replicas-to-write", "1")
		require.NoError(t, err)
		res, err := store.Peek(t.Context(), req)
		require.NoError(t, err, alg)
		require.Equal(t, int64(2), res.Remaining, alg)
		_, err = store.Take(t.Context(), req)
		require.Error(t, err, "%s: Take must write", alg)
		_, err = srv.Do("CONFIG", "SET", "min-replicas-to-write", "0")
		require.NoError(t, err)
	}
	stats, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	require.Contains(t, stats, "cmdstat_evalsha_ro:")
}

// HostileIDsSpread takes with every hostile id and algorithm on a cluster
// and checks that the keys of one id share a slot, sit on the master that
// serves it, and that different ids spread over the masters.
func HostileIDsSpread(t *testing.T, store backend.Store, c *redistest.Cluster) {
	t.Helper()
	prefix := fmt.Sprintf("spread:%d:", time.Now().UnixNano())
	masters := map[string]bool{}
	ids := append(storetest.HostileIDs(), "a", "b", "c", "d", "e", "f", "#x", "user:1", "user:2")
	for _, id := range ids {
		key := backend.Key{Prefix: prefix, ID: id}
		slot := -1
		for _, alg := range algorithms.Names() {
			rule := algorithms.Rule{Algorithm: alg, Limit: 3, Window: time.Minute}
			req := backend.Request{Key: key, Rule: rule, Now: time.Now(), Cost: 1}
			res, err := store.Take(t.Context(), req)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			name := rediswire.StateKey(&req)
			if alg == algorithms.FixedWindow {
				name, _, _ = rediswire.NativeKey(&req) // a key per window
			}
			require.LessOrEqual(t, len(name), len(prefix)+70)
			s := redistest.KeySlot(name)
			if slot >= 0 {
				require.Equal(t, slot, s, "id %.20q: keys in different slots", id)
			}
			slot = s
			m := c.MasterOf(s)
			out, err := m.Do("EXISTS", name)
			require.NoError(t, err)
			require.Equal(t, "1", out, "key %q not on the master of slot %d", name, s)
			masters[m.Addr()] = true
		}
	}
	require.Greater(t, len(masters), 1, "every id landed on one master")
}

// BenchmarkTake measures Take for each algorithm with 64 concurrent callers
// over 10,000 keys (limit 100 per minute, so nearly every request is
// admitted), reporting decisions/s.
//
// The ceiling to compare with is the server running the same script as fast
// as a pipelining load generator can feed it, on the same machine:
//
//	sha=$(redis-cli -p PORT -x SCRIPT LOAD < algorithms/sliding_log.lua)
//	redis-benchmark -p PORT -c 64 -P 16 -n 200000 -r 10000 -q \
//	  EVALSHA $sha 1 'bench:{__rand_int__}:sl' $(date +%s%3N) 60000 100 1 1
//
// (the same ARGV as rediswire.Args: now, window, limit, cost, take; suffix
// :sc or :fw with the other scripts; FLUSHALL between runs so each starts
// from empty keys, as each benchmark here uses a new prefix).
func BenchmarkTake(b *testing.B, store backend.Store) {
	for _, alg := range algorithms.Names() {
		b.Run(string(alg), func(b *testing.B) {
			rule := algorithms.Rule{Algorithm: alg, Limit: 100, Window: time.Minute}
			prefix := fmt.Sprintf("bench:%d:", time.Now().UnixNano())
			var failed atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				req := backend.Request{Key: backend.Key{Prefix: prefix}, Rule: rule, Cost: 1}
				for pb.Next() {
					req.Key.ID = strconv.Itoa(rng.IntN(10_000))
					req.Now = time.Now()
					if _, err := store.Take(b.Context(), req); err != nil {
						failed.Add(1)
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d Takes failed", n, b.N)
			}
		})
	}
}

// MemoryUsage returns MEMORY USAGE (all samples) and OBJECT ENCODING of a
// key.
func MemoryUsage(t testing.TB, srv *redistest.Server, key string) (int64, string) {
	out, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err)
	enc, err := srv.Do("OBJECT", "ENCODING", key)
	require.NoError(t, err)
	return n, enc
}

// BenchmarkLeases measures the life of a concurrency lease for each
// algorithm that holds leases: an acquire (Take) and, when admitted, its
// Release, from 64 concurrent callers over 10,000 keys (limit 10 held at
// once, a minute's timeout, so nearly every acquire is admitted),
// reporting acquires/s and store calls/s (acquires plus releases).
func BenchmarkLeases(b *testing.B, store backend.LeaseStore) {
	for _, a := range algorithms.Algorithms() {
		if !a.HoldsLeases() {
			continue
		}
		b.Run(string(a.Name), func(b *testing.B) {
			rule := algorithms.Rule{Algorithm: a.Name, Limit: 10, Window: time.Minute}
			prefix := fmt.Sprintf("benchlease:%d:", time.Now().UnixNano())
			var failed, calls atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 2))
				req := backend.Request{Key: backend.Key{Prefix: prefix}, Rule: rule, Cost: 1}
				for pb.Next() {
					req.Key.ID = strconv.Itoa(rng.IntN(10_000))
					req.Now = time.Now()
					res, err := store.Take(b.Context(), req)
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						continue
					}
					if res.Allowed {
						req.Now = time.Now()
						if _, err := store.Release(b.Context(), req, res.Lease); err != nil {
							failed.Add(1)
						}
						calls.Add(1)
					}
				}
			})
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/secs, "acquires/s")
			b.ReportMetric(float64(calls.Load())/secs, "calls/s")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d store calls failed", n, calls.Load())
			}
		})
	}
}
