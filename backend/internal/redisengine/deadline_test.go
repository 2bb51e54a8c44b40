package redisengine_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// tightAndPatient runs 32 callers whose every Take has a deadline under a
// millisecond beside 32 whose Takes have 5 s, all on store (batching on,
// the default), for at most rounds Takes each and 3 s in all. It returns
// how many Takes of the patient callers failed, and how many they made.
func tightAndPatient(t *testing.T, store backend.Store, rounds int) (failed, made int64) {
	t.Helper()
	rule := algorithms.Rule{Algorithm: algorithms.SlidingLog, Limit: 1000, Window: time.Minute}
	var nFailed, nMade atomic.Int64
	var firstErr atomic.Pointer[error]
	// Dial first, as a service does before its traffic: rueidis dials a
	// missing connection on the context of the call that needs it and
	// shares the outcome with every call waiting for that connection, so a
	// dial under a sub-millisecond deadline (on a loaded machine) would
	// fail patient calls through the client, not through batching.
	_, err := store.Take(t.Context(), backend.Request{Key: backend.Key{Prefix: "dl:", ID: "warm"}, Rule: rule, Now: time.Now(), Cost: 1})
	require.NoError(t, err)
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for c := range 64 {
		tight := c%2 == 0
		wg.Go(func() {
			for i := range rounds {
				if time.Now().After(end) {
					return
				}
				timeout := 5 * time.Second
				if tight {
					timeout = time.Duration(100+i%800) * time.Microsecond
				}
				ctx, cancel := context.WithTimeout(t.Context(), timeout)
				_, err := store.Take(ctx, backend.Request{Key: backend.Key{Prefix: "dl:", ID: strconv.Itoa(c)},
					Rule: rule, Now: time.Now(), Cost: 1})
				cancel()
				if tight {
					continue
				}
				nMade.Add(1)
				if err != nil {
					nFailed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		t.Logf("first error of a 5 s caller: %v", *p)
	}
	return nFailed.Load(), nMade.Load()
}

// TestBatchTightDeadlinesFailOnlyThemselves: with batching, callers whose
// deadlines are under a millisecond share batches with callers that have
// 5 s; the 5 s callers see no error, with both clients on a real
// redis-server. The control sends each batch with the deadline of its first
// Take, as the runner used to: then the patient callers queued behind a
// tight one fail with its deadline.
func TestBatchTightDeadlinesFailOnlyThemselves(t *testing.T) {
	srv := redistest.Start(t)
	for i, store := range stores(t, srv, nil, nil)[:2] {
		name := []string{"goredis", "rueidis"}[i]
		t.Run(name, func(t *testing.T) {
			failed, made := tightAndPatient(t, store, 200)
			require.Positive(t, made)
			require.Zero(t, failed, "%d of %d Takes with a 5 s deadline failed", failed, made)
			t.Logf("%s: %d Takes with a 5 s deadline, none failed", name, made)

			undo := redisengine.SendWithFirstTake()
			defer undo()
			failed, made = tightAndPatient(t, store, 200)
			require.Positive(t, failed, "control: batches sent with their first Take's deadline, yet none of %d patient Takes failed", made)
			t.Logf("control %s: %d of %d Takes with a 5 s deadline failed", name, failed, made)
		})
	}
}
