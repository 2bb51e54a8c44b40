package redisscript

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// batcher sends concurrent Takes together: each Take joins a queue, and up
// to maxLoops goroutines each take what is queued (up to maxBatch Takes)
// and send it as one batch script (algorithms.LuaBatchScript), which decides
// the takes one after the other, exactly as separate scripts would. A
// lone caller waits for nothing: its Take is sent at once, as a batch of
// one. Under load, callers queue while the loops' batches are in flight,
// so Redis parses one command and runs one script call for many decisions,
// and the client encodes, writes and reads one command for them.
//
// Loops are started on demand and end when the queue is empty, so an idle
// store holds no goroutine.
type batcher struct {
	r        *Runner
	maxBatch int
	maxLoops int

	mu    sync.Mutex
	queue []*pendingTake
	loops int
}

// pendingTake is one Take waiting in a batcher.
type pendingTake struct {
	req  backend.Request
	key  string
	ctx  context.Context
	done chan struct{} // receives once res and err are set
	res  backend.Result
	err  error
}

var pendingPool = sync.Pool{New: func() any { return &pendingTake{done: make(chan struct{}, 1)} }}

// take queues req and returns its decision. When ctx ends first, the Take
// is withdrawn if it was not sent yet; a Take already sent is abandoned (it
// may still be counted), as any call whose deadline passes in flight.
func (b *batcher) take(ctx context.Context, req *backend.Request) (backend.Result, error) {
	c := pendingPool.Get().(*pendingTake)
	c.req, c.key, c.ctx = *req, Key(req.Key, req.Rule), ctx
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.loops < b.maxLoops {
		b.loops++
		go b.loop()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		res, err := c.res, c.err
		*c = pendingTake{done: c.done}
		pendingPool.Put(c)
		return res, err
	case <-ctx.Done():
		b.mu.Lock()
		i := slices.Index(b.queue, c)
		if i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		b.mu.Unlock()
		// A Take in flight still gets its reply written; it is left to the
		// garbage collector rather than reused.
		return backend.Result{}, fmt.Errorf("%s: %w", b.r.name, ctx.Err())
	}
}

// loop sends batches until the queue is empty.
func (b *batcher) loop() {
	var batch []*pendingTake
	var keys, args []string
	var buf []byte
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.loops--
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		keys, args, buf = b.send(batch, keys[:0], args[:0], buf[:0])
	}
}

// send runs one batch and hands each Take its decision. It returns its
// scratch slices for the next batch.
func (b *batcher) send(batch []*pendingTake, keys, args []string, buf []byte) ([]string, []string, []byte) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	for _, c := range batch {
		keys = append(keys, c.key)
		args, buf = c.req.Rule.LuaBatchArgs(args, buf, b.r.now(&c.req), c.req.Cost)
	}
	var vals []int64
	var errs []error
	cmd, err := b.r.send(&b.r.batch, true, func(cmd Command, sc string) error {
		var err error
		vals, errs, err = b.r.conn.EvalBatch(ctx, cmd, sc, keys, args)
		return err
	})
	if err == nil && len(vals) != algorithms.LuaReplyLen*len(batch) {
		err = fmt.Errorf("%w: %d values for %d requests", ErrBadReply, len(vals), len(batch))
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.res, c.err = backend.Result{}, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.req.Rule.Algorithm, err)
		case errs != nil && errs[i*algorithms.LuaReplyLen] != nil:
			c.res, c.err = backend.Result{}, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.req.Rule.Algorithm, errs[i*algorithms.LuaReplyLen])
		default:
			out, derr := Decode(c.req.Rule, vals[i*algorithms.LuaReplyLen:(i+1)*algorithms.LuaReplyLen])
			if derr != nil {
				c.res, c.err = backend.Result{}, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.req.Rule.Algorithm, derr)
			} else {
				c.res, c.err = backend.ResultOf(c.req.Rule, out), nil
			}
		}
		c.done <- struct{}{}
	}
	clear(keys)
	clear(args)
	return keys, args, buf
}

// batchContext is the context a batch is sent with: not canceled by any one
// caller leaving (the others still wait for the reply), and bounded by the
// latest of the callers' deadlines, or unbounded when one of them has none.
func batchContext(batch []*pendingTake) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
