package redisengine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
)

// kindCall is one batch call a kindConn saw.
type kindCall struct {
	cmd    Command
	script string
	keys   int
}

// kindConn answers batch calls of every kind with admissions, holding each
// until the test lets it go.
type kindConn struct {
	fakeConn
	gate   chan struct{}
	calls  chan kindCall
	groups string // the groups script's digest
}

func (k *kindConn) EvalBatch(_ context.Context, cmd Command, script string, keys, args []string) ([]int64, []error, error) {
	k.calls <- kindCall{cmd, script, len(keys)}
	<-k.gate
	var vals []int64
	if script != k.groups { // takes or peeks
		for range keys {
			vals = append(vals, 1, 4, 0, 10_000, 1)
		}
		return vals, nil, nil
	}
	for a := 0; a < len(args); { // TakeAlls: n, now, then 4 per request
		n, err := strconv.Atoi(args[a])
		if err != nil {
			return nil, nil, err
		}
		vals = append(vals, 1)
		for range n {
			vals = append(vals, 1, 4, 0, 10_000, 1)
		}
		a += 2 + 4*n
	}
	return vals, nil, nil
}

// TestBatchKinds: Peeks batch read-only (EVALSHA_RO of the peek batch
// script), TakeAlls batch with the groups script, and a batch of TakeAlls
// holds at most Batch requests: with Batch 8, of three queued TakeAlls of 3
// requests the next batch carries two (6 requests), the third goes after.
func TestBatchKinds(t *testing.T) {
	k := &kindConn{gate: make(chan struct{}), calls: make(chan kindCall, 16)}
	r, err := New(k, "test", Options{Batch: 8})
	require.NoError(t, err)
	k.groups = r.batchScript(false, kindGroup).sha
	for _, b := range r.local {
		b.maxInFlight = 1
	}
	peek := make(chan error, 1)
	go func() {
		_, err := r.Peek(t.Context(), requestFor("p"))
		peek <- err
	}()
	c := <-k.calls
	require.Equal(t, EvalSHARO, c.cmd)
	require.Equal(t, r.batchScript(false, kindPeek).sha, c.script)
	k.gate <- struct{}{}
	require.NoError(t, <-peek)

	three := func(id string) []backend.Request {
		reqs := make([]backend.Request, 3)
		for i := range reqs {
			reqs[i] = requestFor(id)
			reqs[i].Key.Prefix = "p" + strconv.Itoa(i) + ":"
		}
		return reqs
	}
	done := make(chan error, 4)
	takeAll := func(id string) {
		go func() {
			res, err := r.TakeAll(t.Context(), three(id))
			if err == nil && !res.Allowed {
				err = context.Canceled // any error: the test wants an admission
			}
			done <- err
		}()
	}
	takeAll("first")
	c = <-k.calls
	require.Equal(t, EvalSHA, c.cmd)
	require.Equal(t, r.batchScript(false, kindGroup).sha, c.script)
	require.Equal(t, 3, c.keys)
	g := r.local[kindGroup]
	for i, id := range []string{"a", "b", "c"} {
		takeAll(id)
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.queue) == i+1
		}, 10*time.Second, time.Millisecond)
	}
	k.gate <- struct{}{}
	require.Equal(t, 6, (<-k.calls).keys, "two TakeAlls of 3 requests fit a batch of 8")
	k.gate <- struct{}{}
	require.Equal(t, 3, (<-k.calls).keys)
	k.gate <- struct{}{}
	for range 4 {
		require.NoError(t, <-done)
	}
}

// TestBatchKindsSurviveCancellations: Peeks and TakeAlls from many callers,
// a third of whose contexts end at random moments (queued, sending, or just
// woken to send a batch): every other call is decided, and every call
// returns, as TestBatchSurvivesCancellations shows for Takes.
func TestBatchKindsSurviveCancellations(t *testing.T) {
	k := &kindConn{gate: make(chan struct{}), calls: make(chan kindCall, 1024)}
	r, err := New(k, "test", Options{Batch: 4})
	require.NoError(t, err)
	k.groups = r.batchScript(false, kindGroup).sha
	for _, b := range r.local {
		b.maxInFlight = 2
	}
	stop := make(chan struct{})
	go func() { // open the gate for every call, with pauses
		for {
			select {
			case <-stop:
				return
			case <-k.calls:
				time.Sleep(50 * time.Microsecond)
				k.gate <- struct{}{}
			}
		}
	}()
	defer close(stop)
	var wg sync.WaitGroup
	var decided, canceled atomic.Int64
	for w := range 32 {
		wg.Go(func() {
			for i := range 100 {
				ctx, cancel := context.WithCancel(t.Context())
				if (w+i)%3 == 0 {
					time.AfterFunc(time.Duration(i%7)*20*time.Microsecond, cancel)
				}
				req := requestFor("u" + strconv.Itoa(w))
				var res backend.Result
				var err error
				if w%2 == 0 {
					res, err = r.Peek(ctx, req)
				} else {
					other := req
					other.Key.Prefix = "other:"
					res, err = r.TakeAll(ctx, []backend.Request{req, other})
				}
				switch {
				case err == nil:
					assert.True(t, res.Allowed)
					decided.Add(1)
				case errors.Is(err, context.Canceled):
					canceled.Add(1)
				default:
					t.Errorf("call: %v", err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(3200), decided.Load()+canceled.Load())
	require.Greater(t, decided.Load(), int64(2000)) // two thirds were never canceled
	t.Logf("%d decided, %d canceled", decided.Load(), canceled.Load())
}
