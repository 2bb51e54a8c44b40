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

// batcher sends concurrent Takes together. A Take that finds fewer than
// maxInFlight batches in flight sends at once, itself and whatever is
// queued (up to maxBatch Takes), as one batch script
// (BatchScript), which decides the takes one after the other,
// exactly as separate scripts would. Otherwise it queues. When a batch
// returns and Takes are queued, the first of them is woken to send the next
// batch. A lone caller therefore sends its own request at once, with no
// goroutine in between; under load, Redis parses one command and runs one
// script call for many decisions, and the client encodes, writes and reads
// one command for them.
type batcher struct {
	r           *Runner
	maxBatch    int
	maxInFlight int
	// cluster: the batcher of one cluster node, whose batches declare only
	// their first key (see nodebatch.go).
	cluster bool

	mu       sync.Mutex
	queue    []*pendingTake
	inFlight int
}

// pendingTake is one Take in a batcher.
type pendingTake struct {
	req  backend.Request
	key  string
	ctx  context.Context
	done chan struct{} // signalled when res and err are set, or lead is
	res  backend.Result
	err  error
	// lead, when set, is the batch this Take must send (itself included).
	lead []*pendingTake
}

var pendingPool = sync.Pool{New: func() any { return &pendingTake{done: make(chan struct{}, 1)} }}

// take decides req, in a batch. When ctx ends while the Take is queued it
// is withdrawn; a Take already sent is abandoned (it may still be counted),
// as any call whose deadline passes in flight. The Take that sends a batch
// waits for its reply without watching its own context, unless its deadline
// is too near (see tight), when a goroutine sends the batch instead; so no
// Take waits past its own deadline, and none fails by another's (the batch
// goes with the latest deadline of its Takes, see batchContext).
func (b *batcher) take(ctx context.Context, req *backend.Request) (backend.Result, error) {
	c := pendingPool.Get().(*pendingTake)
	c.req, c.key, c.ctx = *req, Key(req.Key, req.Rule), ctx
	b.mu.Lock()
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		batch := b.next(c)
		s := sender(batch)
		if s == c && !tight(ctx) {
			b.mu.Unlock()
			b.run(batch)
			<-c.done
			return b.finish(c)
		}
		// Another Take sends it (one with a later deadline), or a goroutine.
		s.lead = batch
		b.mu.Unlock()
		s.done <- struct{}{}
		return b.wait(ctx, c)
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	return b.wait(ctx, c)
}

// wait waits for c's decision, or for ctx to end. When c is woken to send a
// batch, it sends it, and waits for the reply, unless its deadline is near;
// then a goroutine sends it and c waits on its own context.
func (b *batcher) wait(ctx context.Context, c *pendingTake) (backend.Result, error) {
	for {
		select {
		case <-c.done:
			lead := c.lead
			if lead == nil {
				return b.finish(c)
			}
			c.lead = nil
			if tight(ctx) {
				go b.run(lead)
				continue
			}
			b.run(lead)
			<-c.done
			return b.finish(c)
		case <-ctx.Done():
			b.mu.Lock()
			if i := slices.Index(b.queue, c); i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
			}
			lead := c.lead
			b.mu.Unlock()
			if lead != nil {
				// Woken to send a batch others wait on: send it anyway.
				go func() {
					<-c.done
					b.run(lead)
				}()
			}
			// A Take in flight still gets its reply written: it is left to
			// the garbage collector rather than reused.
			return backend.Result{}, fmt.Errorf("%s: %w", b.r.name, ctx.Err())
		}
	}
}

// batchMinWait is the least time a batch is given: the store's own bound,
// below which a Take's deadline does not cut a batch short. A connection a
// batch has to open first is dialled within it, and the client shares that
// dial's outcome with the calls that wait for the same connection.
var batchMinWait = 50 * time.Millisecond

// tight reports whether ctx ends before a batch sent now would: such a Take
// does not send a batch itself (it would wait past its deadline).
func tight(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < batchMinWait
}

// sender picks the Take of batch that sends it: the one whose context has
// the latest deadline, or none (the first such). The batch is sent with
// that deadline, so it bounds the call without cutting short any other
// Take's wait: a Take with a tight deadline never fails those behind it.
// It is a variable so that a test can restore the old choice (the first
// Take) as a control.
var sender = func(batch []*pendingTake) *pendingTake {
	best := batch[0]
	bestDeadline, bounded := best.ctx.Deadline()
	if !bounded {
		return best
	}
	for _, c := range batch[1:] {
		d, ok := c.ctx.Deadline()
		if !ok {
			return c
		}
		if d.After(bestDeadline) {
			best, bestDeadline = c, d
		}
	}
	return best
}

// finish returns c's decision and recycles c.
func (b *batcher) finish(c *pendingTake) (backend.Result, error) {
	res, err := c.res, c.err
	*c = pendingTake{done: c.done}
	pendingPool.Put(c)
	return res, err
}

// next returns the next batch: first (when not nil), then queued Takes up
// to maxBatch in all. b.mu must be held.
func (b *batcher) next(first *pendingTake) []*pendingTake {
	n := min(len(b.queue), b.maxBatch)
	if first != nil {
		n = min(len(b.queue), b.maxBatch-1)
	}
	batch := make([]*pendingTake, 0, n+1)
	if first != nil {
		batch = append(batch, first)
	}
	batch = append(batch, b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// run sends batch, then wakes the first queued Take to send the next one,
// or marks one batch fewer in flight.
func (b *batcher) run(batch []*pendingTake) {
	b.send(batch)
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	next := b.next(nil)
	s := sender(next)
	s.lead = next
	b.mu.Unlock()
	s.done <- struct{}{}
}

// send runs one batch and hands each Take its decision. batch[0] is not
// necessarily its sender; the batch goes with the latest deadline of all.
func (b *batcher) send(batch []*pendingTake) {
	ctx, cancel := batchContext(sender(batch).ctx)
	defer cancel()
	sc := scratchPool.Get().(*scratch)
	defer sc.put()
	keys, args, buf := sc.keys, sc.args, sc.buf
	for _, c := range batch {
		keys = append(keys, c.key)
		args, buf = BatchArgs(args, buf, c.req.Rule, b.r.now(&c.req), c.req.Cost)
	}
	sc.keys, sc.args, sc.buf = keys, args, buf
	s, callKeys, callArgs := &b.r.batch, keys, args
	if b.cluster {
		s = &b.r.clusterBatch
		callKeys, sc.call = clusterBatchCall(sc.call, keys, args)
		callArgs = sc.call
	}
	var vals []int64
	var errs []error
	cmd, err := b.r.send(s, true, func(cmd Command, script string) error {
		var err error
		vals, errs, err = b.r.conn.EvalBatch(ctx, cmd, script, callKeys, callArgs)
		return err
	})
	if err == nil && len(vals) != ReplyLen*len(batch) {
		err = fmt.Errorf("%w: %d values for %d requests", ErrBadReply, len(vals), len(batch))
	}
	var alone []*pendingTake
	for i, c := range batch {
		e := err
		if e == nil && errs != nil {
			e = errs[i*ReplyLen]
			if b.cluster && retryNonLocal && nonLocal(e) {
				// Its slot moved: it wrote nothing; it goes again alone.
				alone = append(alone, c)
				continue
			}
		}
		var out algorithms.Outcome
		if e == nil {
			out, e = Decode(c.req.Rule, vals[i*ReplyLen:(i+1)*ReplyLen])
		}
		if e != nil {
			c.res, c.err = backend.Result{}, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.req.Rule.Algorithm, e)
		} else {
			c.res, c.err = backend.ResultOf(c.req.Rule, out), nil
		}
		c.done <- struct{}{}
	}
	for _, c := range alone {
		c.res, _, c.err = b.r.take(ctx, &c.req)
		c.done <- struct{}{}
	}
}

// scratch holds the slices one batch call is built in, reused across
// batches.
type scratch struct {
	keys, args, call []string
	buf              []byte
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// put empties s and returns it to the pool.
func (s *scratch) put() {
	clear(s.keys)
	clear(s.args)
	clear(s.call)
	s.keys, s.args, s.call, s.buf = s.keys[:0], s.args[:0], s.call[:0], s.buf[:0]
	scratchPool.Put(s)
}

// batchContext is the context a batch is sent with: that of its sender
// (the Take with the latest deadline), without its cancellation (the others
// still wait for the reply), with its deadline but at least batchMinWait
// from now. Every other Take waits on its own context, and stops waiting
// when it ends.
func batchContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), later(d, time.Now().Add(batchMinWait)))
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
