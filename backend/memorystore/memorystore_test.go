package memorystore_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func req(id string, rule algorithms.Rule, now time.Time) backend.Request {
	return backend.Request{Key: backend.Key{Prefix: "t:", ID: id}, Rule: rule, Now: now, Cost: 1}
}

func TestWithMaxKeysRejectsNonPositive(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := memorystore.New(memorystore.WithMaxKeys(n))
		require.ErrorContains(t, err, "memorystore: WithMaxKeys: ")
		require.ErrorContains(t, err, "give 1 or more")
	}
}

func TestNilOptionIgnored(t *testing.T) {
	s, err := memorystore.New(nil, memorystore.WithMaxKeys(5), nil)
	require.NoError(t, err)
	require.NotNil(t, s)
}

func TestNoArguments(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Second}
	res, err := s.Take(t.Context(), req("a", rule, t0))
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, 1, s.Stats().Keys)
}

// TestEvictingAnActiveKeyIsCounted shows the cost of a full store: the evicted
// key gets its allowance back, and the counter says so.
func TestEvictingAnActiveKeyIsCounted(t *testing.T) {
	s, err := memorystore.New(memorystore.WithMaxKeys(1))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Minute}
	ctx := t.Context()

	res, err := s.Take(ctx, req("a", rule, t0))
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = s.Take(ctx, req("a", rule, t0))
	require.NoError(t, err)
	require.False(t, res.Allowed)

	_, err = s.Take(ctx, req("b", rule, t0)) // evicts a, still inside its window
	require.NoError(t, err)
	require.Equal(t, memorystore.Stats{Keys: 1, ActiveEvictions: 1}, s.Stats())

	res, err = s.Take(ctx, req("a", rule, t0))
	require.NoError(t, err)
	require.True(t, res.Allowed, "an evicted key starts over")
	require.Equal(t, uint64(2), s.Stats().ActiveEvictions)
}

// TestExpiredKeysAreReclaimed: keys whose window passed make room without
// counting as active evictions.
func TestExpiredKeysAreReclaimed(t *testing.T) {
	const n = 500
	s, err := memorystore.New(memorystore.WithMaxKeys(n))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Second}
	ctx := t.Context()
	for i := range n {
		_, err := s.Take(ctx, req("old"+strconv.Itoa(i), rule, t0))
		require.NoError(t, err)
	}
	require.Equal(t, n, s.Stats().Keys)
	later := t0.Add(time.Minute)
	for i := range n {
		_, err := s.Take(ctx, req("new"+strconv.Itoa(i), rule, later))
		require.NoError(t, err)
	}
	st := s.Stats()
	require.Equal(t, n, st.Keys)
	require.Zero(t, st.ActiveEvictions)
	require.GreaterOrEqual(t, st.Reclaimed, uint64(n))
}

// TestFloodOfDistinctKeys pushes a million distinct keys through a store
// bounded at 100,000: the key count and the live heap stay bounded, and the
// eviction counter counts every evicted key that was inside its window.
func TestFloodOfDistinctKeys(t *testing.T) {
	const maxKeys, flood = 100_000, 1_000_000
	s, err := memorystore.New(memorystore.WithMaxKeys(maxKeys))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Hour}
	ctx := t.Context()
	base := liveHeap()
	peak := uint64(0)
	buf := make([]byte, 0, 32)
	for i := range flood {
		buf = strconv.AppendInt(append(buf[:0], "10.0."...), int64(i), 10)
		_, err := s.Take(ctx, req(string(buf), rule, t0))
		if err != nil {
			require.NoError(t, err)
		}
		if i%100_000 == 99_999 {
			peak = max(peak, liveHeap()-min(base, liveHeap()))
		}
	}
	st := s.Stats()
	require.Equal(t, maxKeys, st.Keys)
	require.Equal(t, uint64(flood-maxKeys), st.ActiveEvictions, "every key was inside its window when evicted")
	perKey := peak / maxKeys
	t.Logf("peak live heap above start: %d MB for %d keys (%d bytes per key)", peak>>20, maxKeys, perKey)
	// A key here holds its map entry, strings, state and a 4-slot log:
	// about 200 bytes. An unbounded store would hold ten times the keys.
	require.Less(t, perKey, uint64(600))
	runtime.KeepAlive(s)
}

// liveHeap returns the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSlidingLogMemoryIsPerLimitNotPerRequest: after many requests per key,
// each key holds at most its limit of timestamps.
func TestSlidingLogMemoryIsPerLimitNotPerRequest(t *testing.T) {
	const keys, limit = 1000, 100
	s, err := memorystore.New()
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: limit, Window: time.Hour}
	ctx := t.Context()
	base := liveHeap()
	for i := range keys {
		id := fmt.Sprintf("user-%d", i)
		for j := range 10 * limit { // 10x the limit: 900 of them denied
			_, err := s.Take(ctx, req(id, rule, t0.Add(time.Duration(j)*time.Millisecond)))
			if err != nil {
				require.NoError(t, err)
			}
		}
	}
	used := liveHeap() - min(base, liveHeap())
	perKey := used / keys
	t.Logf("sliding log, limit %d: %d bytes per key", limit, perKey)
	require.Less(t, perKey, uint64(limit*8+400), "more than the limit's timestamps per key")
	runtime.KeepAlive(s)
}

// TestManyKeysConcurrently runs callers over overlapping keys; every key must
// admit exactly its limit.
func TestManyKeysConcurrently(t *testing.T) {
	s, err := memorystore.New(memorystore.WithMaxKeys(10_000))
	require.NoError(t, err)
	rule := algorithms.Rule{Algorithm: algorithms.SlidingCounter, Limit: 10, Window: time.Minute}
	const keys, callers = 200, 8
	admitted := make([]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys * 3 {
				k := (i + c*7) % keys
				res, err := s.Take(t.Context(), req(strconv.Itoa(k), rule, t0))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					mu.Lock()
					admitted[k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for k, n := range admitted {
		require.Equal(t, 10, n, "key %d", k)
	}
}
