package scripttest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// EvalCalls returns how many EVAL (not EVALSHA) calls srv ran: the NOSCRIPT
// fallbacks of the runner.
func EvalCalls(t testing.TB, srv *redistest.Server) int { return CommandCalls(t, srv, "eval") }

// CommandCalls returns how many calls of the named command (lower case, as
// INFO commandstats spells it) srv ran.
func CommandCalls(t testing.TB, srv *redistest.Server, name string) int {
	t.Helper()
	stats, err := srv.Do("INFO", "commandstats")
	require.NoError(t, err)
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// BatchedTakesStayExact sends 1,600 Takes from 64 goroutines over 4 keys
// (limit 100 per minute each) through a store made with batching on srv:
// exactly 400 are admitted, 100 per key, and they reached Redis in fewer
// script calls than decisions, so batches did form.
func BatchedTakesStayExact(t *testing.T, s backend.Store, srv *redistest.Server) {
	t.Helper()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 100, Window: time.Minute}
	now := time.Now()
	before := CommandCalls(t, srv, "evalsha")
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 25 {
				id := "user" + strconv.Itoa((g+i)%4)
				res, err := s.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: "batched:", ID: id}, Rule: rule, Now: now, Cost: 1})
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed {
					mu.Lock()
					admitted[id]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"user0": 100, "user1": 100, "user2": 100, "user3": 100}, admitted)
	calls := CommandCalls(t, srv, "evalsha") - before
	t.Logf("1600 decisions in %d script calls", calls)
	require.Less(t, calls, 1600, "no batch formed")
}

// ServerTimeProbe checks a store's TIME probe: it reads a clock near ours
// (same machine), an offset clock built on it is within a round trip of
// ours, and a cancelled context is an error.
func ServerTimeProbe(t *testing.T, probe func(context.Context) (time.Time, error)) {
	t.Helper()
	st, err := probe(t.Context())
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), st, time.Minute)
	o, err := clock.NewOffset(t.Context(), nil, probe, time.Hour)
	require.NoError(t, err)
	defer o.Close()
	// Same machine: the server's clock is ours, give or take the round trip.
	require.Less(t, o.Offset().Abs(), 5*time.Second)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = probe(ctx)
	require.Error(t, err)
}
