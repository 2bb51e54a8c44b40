package redisengine_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// commandCalls returns the calls of each command since the last CONFIG
// RESETSTAT, by INFO commandstats.
func commandCalls(t *testing.T, srv *redistest.Server) map[string]int {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// takeAllGets counts the GETs of one admitted and one denied TakeAll of
// three counters (fixed_window, sliding_counter, gcra), batched (the groups
// script) and alone (the multi script).
func takeAllGets(t *testing.T, srv *redistest.Server) (admitted, denied []int) {
	rules := []algorithms.Rule{
		{Algorithm: algorithms.FixedWindow, Limit: 2, Window: time.Minute},
		{Algorithm: algorithms.SlidingCounter, Limit: 2, Window: time.Minute},
		{Algorithm: algorithms.GCRA, Limit: 1, Window: time.Minute},
	}
	now := time.UnixMilli(1_800_000_000_000)
	for _, batch := range []int{16, 1} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		s, err := goredisstore.New(c, goredisstore.WithBatching(batch))
		require.NoError(t, err)
		reqs := make([]backend.Request, len(rules))
		for i, r := range rules {
			reqs[i] = backend.Request{Key: backend.Key{Prefix: "memo" + strconv.Itoa(batch) + ":" + strconv.Itoa(i) + ":", ID: "u"}, Rule: r, Now: now, Cost: 1}
		}
		for _, want := range []bool{true, false} {
			_, err := srv.Do("CONFIG", "RESETSTAT")
			require.NoError(t, err)
			res, each, err := s.TakeEach(t.Context(), reqs)
			require.NoError(t, err)
			require.Equal(t, want, res.Allowed, "batch %d", batch)
			require.Len(t, each, len(reqs))
			calls := commandCalls(t, srv)
			if want {
				admitted = append(admitted, calls["get"])
				// The fixed window counts with INCRBY, the others SET.
				require.Equal(t, len(rules)-1, calls["set"], "batch %d: SETs of an admission", batch)
				require.Equal(t, 1, calls["incrby"], "batch %d: INCRBYs of an admission", batch)
			} else {
				denied = append(denied, calls["get"])
			}
		}
	}
	return admitted, denied
}

// A TakeAll's take pass reads no counter again: one GET per key, both in
// the batched and the lone script; a denial reads each once too.
func TestTakeAllReadsEachCounterOnce(t *testing.T) {
	srv := redistest.Start(t)
	admitted, denied := takeAllGets(t, srv)
	require.Equal(t, []int{3, 3}, admitted, "GETs of an admitted TakeAll of 3 counters (batched, alone)")
	require.Equal(t, []int{3, 3}, denied, "GETs of a denied TakeAll of 3 counters (batched, alone)")
}

// The control: without the memo the take pass reads every key again.
func TestTakeAllReadsEachCounterOnceControl(t *testing.T) {
	defer rediswire.WithoutMemo()()
	srv := redistest.Start(t)
	admitted, _ := takeAllGets(t, srv)
	require.Equal(t, []int{6, 6}, admitted, "GETs without the memo (batched, alone)")
}

// logTakeAllRanges counts the GETRANGEs of an admitted TakeAll of three
// compact logs, batched (the groups script) and alone (the multi script).
func logTakeAllRanges(t *testing.T, srv *redistest.Server) []int {
	rule := algorithms.Rule{Algorithm: algorithms.CompactLog, Limit: 5, Window: time.Minute}
	now := time.UnixMilli(1_800_000_000_000)
	var ranges []int
	for _, batch := range []int{16, 1} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		s, err := goredisstore.New(c, goredisstore.WithBatching(batch))
		require.NoError(t, err)
		reqs := make([]backend.Request, 3)
		for i := range reqs {
			reqs[i] = backend.Request{Key: backend.Key{Prefix: "logmemo" + strconv.Itoa(batch) + ":" + strconv.Itoa(i) + ":", ID: "u"}, Rule: rule, Now: now, Cost: 1}
		}
		// The first TakeAll creates the logs; the second reads them.
		for range 2 {
			_, err := srv.Do("CONFIG", "RESETSTAT")
			require.NoError(t, err)
			res, err := s.TakeAll(t.Context(), reqs)
			require.NoError(t, err)
			require.True(t, res.Allowed, "batch %d", batch)
		}
		calls := commandCalls(t, srv)
		require.Equal(t, len(reqs), calls["set"], "batch %d: SETs of an admission", batch)
		ranges = append(ranges, calls["getrange"])
	}
	return ranges
}

// A TakeAll of compact logs reads each log's first bytes once: the take
// pass is answered by the memo.
func TestTakeAllReadsEachLogOnce(t *testing.T) {
	srv := redistest.Start(t)
	require.Equal(t, []int{3, 3}, logTakeAllRanges(t, srv), "GETRANGEs of an admitted TakeAll of 3 logs (batched, alone)")
}

// The control: without the memo the take pass reads every log again.
func TestTakeAllReadsEachLogOnceControl(t *testing.T) {
	defer rediswire.WithoutMemo()()
	srv := redistest.Start(t)
	require.Equal(t, []int{6, 6}, logTakeAllRanges(t, srv), "GETRANGEs without the memo (batched, alone)")
}
