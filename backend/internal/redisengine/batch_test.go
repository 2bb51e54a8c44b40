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
	"github.com/limitkit/limitkit/internal/rediswire"
)

// gatedConn answers batch calls with an admission per request, and holds
// each call until the test lets it go.
type gatedConn struct {
	fakeConn
	gate    chan struct{}
	started chan []string // the keys of each batch call, as it starts
	reply   func(keys []string) ([]int64, []error, error)
}

func (g *gatedConn) EvalBatch(_ context.Context, _ Command, _ string, keys, _ []string) ([]int64, []error, error) {
	g.started <- append([]string(nil), keys...)
	<-g.gate
	if g.reply != nil {
		return g.reply(keys)
	}
	vals := make([]int64, 0, rediswire.ReplyLen*len(keys))
	for range keys {
		vals = append(vals, 1, 4, 0, 10_000, 1)
	}
	return vals, nil, nil
}

func newGated(t *testing.T, loops int) (*Runner, *gatedConn) {
	g := &gatedConn{gate: make(chan struct{}), started: make(chan []string, 16)}
	r, err := New(g, "test", Options{Batch: 8})
	require.NoError(t, err)
	require.NotNil(t, r.batcher)
	r.batcher.maxInFlight = loops
	return r, g
}

func requestFor(id string) backend.Request {
	req := request(1)
	req.Key.ID = id
	return req
}

type outcome struct {
	res backend.Result
	err error
}

func takeAsync(r *Runner, ctx context.Context, id string) chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := r.Take(ctx, requestFor(id))
		ch <- outcome{res, err}
	}()
	return ch
}

// waitQueued waits until n Takes wait in r's queue.
func waitQueued(t *testing.T, r *Runner, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		r.batcher.mu.Lock()
		defer r.batcher.mu.Unlock()
		return len(r.batcher.queue) == n
	}, 10*time.Second, time.Millisecond)
}

// TestBatchGathersWaitingTakes: while one batch is in flight, Takes queue;
// the next batch carries all of them, and each gets its own decision.
func TestBatchGathersWaitingTakes(t *testing.T) {
	r, g := newGated(t, 1)
	first := takeAsync(r, t.Context(), "a")
	require.Equal(t, []string{rediswire.Key(requestFor("a").Key, rule)}, <-g.started)
	rest := []chan outcome{takeAsync(r, t.Context(), "b"), takeAsync(r, t.Context(), "c"), takeAsync(r, t.Context(), "d")}
	waitQueued(t, r, 3)
	g.gate <- struct{}{}
	require.NoError(t, (<-first).err)
	require.Len(t, <-g.started, 3)
	g.gate <- struct{}{}
	for _, ch := range rest {
		o := <-ch
		require.NoError(t, o.err)
		require.True(t, o.res.Allowed)
		require.Equal(t, int64(4), o.res.Remaining)
	}
}

// TestBatchWithdrawsCanceledTakes: a Take whose context ends while it
// waits in the queue is withdrawn, never sent.
func TestBatchWithdrawsCanceledTakes(t *testing.T) {
	r, g := newGated(t, 1)
	first := takeAsync(r, t.Context(), "a")
	<-g.started
	ctx, cancel := context.WithCancel(t.Context())
	canceled := takeAsync(r, ctx, "gone")
	waitQueued(t, r, 1)
	kept := takeAsync(r, t.Context(), "kept")
	waitQueued(t, r, 2)
	cancel()
	o := <-canceled
	require.ErrorIs(t, o.err, context.Canceled)
	g.gate <- struct{}{}
	require.NoError(t, (<-first).err)
	require.Equal(t, []string{rediswire.Key(requestFor("kept").Key, rule)}, <-g.started)
	g.gate <- struct{}{}
	require.NoError(t, (<-kept).err)
}

// TestBatchFailures: an error for the whole call reaches every Take of the
// batch; an error in place of one request's reply reaches that one alone;
// a reply of the wrong length is ErrBadReply.
func TestBatchFailures(t *testing.T) {
	down := errors.New("connection refused")
	wrongType := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	for _, tc := range []struct {
		name  string
		reply func(keys []string) ([]int64, []error, error)
		check func(t *testing.T, i int, o outcome)
	}{
		{"call fails", func([]string) ([]int64, []error, error) { return nil, nil, down },
			func(t *testing.T, _ int, o outcome) { require.ErrorIs(t, o.err, down) }},
		{"one request fails", func(keys []string) ([]int64, []error, error) {
			vals := make([]int64, rediswire.ReplyLen*len(keys))
			errs := make([]error, len(vals))
			for i := range keys {
				copy(vals[i*rediswire.ReplyLen:], []int64{0, 0, 500, 10_000, 1})
			}
			errs[rediswire.ReplyLen] = wrongType
			return vals, errs, nil
		}, func(t *testing.T, i int, o outcome) {
			if i == 1 {
				require.ErrorIs(t, o.err, wrongType)
				return
			}
			require.NoError(t, o.err)
			require.False(t, o.res.Allowed)
			require.Equal(t, 500*time.Millisecond, o.res.RetryAfter)
		}},
		{"short reply", func([]string) ([]int64, []error, error) { return []int64{1, 4, 0, 10_000, 1}, nil, nil },
			func(t *testing.T, _ int, o outcome) { require.ErrorIs(t, o.err, rediswire.ErrBadReply) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, g := newGated(t, 1)
			first := takeAsync(r, t.Context(), "first")
			<-g.started
			var outs []chan outcome
			for i, id := range []string{"x", "y", "z"} {
				outs = append(outs, takeAsync(r, t.Context(), id))
				waitQueued(t, r, i+1)
			}
			g.gate <- struct{}{}
			<-first
			g.reply = tc.reply
			<-g.started
			g.gate <- struct{}{}
			for i, ch := range outs {
				tc.check(t, i, <-ch)
			}
		})
	}
}

// TestBatchContext: a batch is sent with the deadline of the Take sending
// it, and outlives that Take's cancellation (others wait on it).
func TestBatchContext(t *testing.T) {
	soon, cancelSoon := context.WithTimeout(t.Context(), time.Minute)
	defer cancelSoon()
	ctx, cancel := batchContext(soon)
	defer cancel()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	want, _ := soon.Deadline()
	require.Equal(t, want, d)
	cancelSoon()
	require.NoError(t, ctx.Err())

	ctx, cancel = batchContext(context.Background())
	defer cancel()
	_, ok = ctx.Deadline()
	require.False(t, ok)
}

// TestBatchSurvivesCancellations: many callers, a third of whose contexts
// end at random moments (queued, sending, or just woken to send a batch).
// Every other Take is decided, and every call returns.
func TestBatchSurvivesCancellations(t *testing.T) {
	g := &gatedConn{gate: make(chan struct{}), started: make(chan []string, 1024)}
	r, err := New(g, "test", Options{Batch: 4})
	require.NoError(t, err)
	r.batcher.maxInFlight = 2
	stop := make(chan struct{})
	go func() { // open the gate for every call, with pauses
		for {
			select {
			case <-stop:
				return
			case <-g.started:
				time.Sleep(50 * time.Microsecond)
				g.gate <- struct{}{}
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
				res, err := r.Take(ctx, requestFor("u"+strconv.Itoa(w)))
				switch {
				case err == nil:
					assert.True(t, res.Allowed)
					decided.Add(1)
				case errors.Is(err, context.Canceled):
					canceled.Add(1)
				default:
					t.Errorf("take: %v", err)
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

// TestBatchingIsOffWhereItCannotApply: replica acknowledgement and cluster
// clients send each Take alone, and a negative batch size is refused.
func TestBatchingIsOffWhereItCannotApply(t *testing.T) {
	r, err := New(&fakeConn{}, "test", Options{Batch: 8, Ack: Ack{Replicas: 1, Timeout: time.Second}})
	require.NoError(t, err)
	require.Nil(t, r.batcher)
	r, err = New(&fakeConn{cluster: true}, "test", Options{Batch: 8})
	require.NoError(t, err)
	require.Nil(t, r.batcher)
	r, err = New(&fakeConn{}, "test", Options{Batch: 1})
	require.NoError(t, err)
	require.Nil(t, r.batcher)
	_, err = New(&fakeConn{}, "test", Options{Batch: -1})
	require.ErrorContains(t, err, "batch size")
}

// TestBatchLeaderCanceledStillSends: a Take woken to send a batch whose
// context ends before it sees the wake-up still gets the batch sent, for
// the others in it.
func TestBatchLeaderCanceledStillSends(t *testing.T) {
	r, g := newGated(t, 1)
	first := takeAsync(r, t.Context(), "first")
	<-g.started
	ctx, cancel := context.WithCancel(t.Context())
	leader := takeAsync(r, ctx, "leader")
	waitQueued(t, r, 1)
	other := takeAsync(r, t.Context(), "other")
	waitQueued(t, r, 2)

	// Do what run does when a batch returns, but hold the wake-up back
	// until the leader's context has ended.
	b := r.batcher
	b.mu.Lock()
	b.inFlight++
	next := b.next(nil)
	next[0].lead = next
	b.mu.Unlock()
	cancel()
	require.ErrorIs(t, (<-leader).err, context.Canceled)
	next[0].done <- struct{}{}

	require.Equal(t, []string{rediswire.Key(requestFor("leader").Key, rule), rediswire.Key(requestFor("other").Key, rule)}, <-g.started)
	g.gate <- struct{}{} // both calls wait at the gate: let both go
	g.gate <- struct{}{}
	o := <-other
	require.NoError(t, o.err)
	require.True(t, o.res.Allowed)
	require.NoError(t, (<-first).err)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inFlight == 0
	}, 10*time.Second, time.Millisecond)
}
