package redisengine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// batcher sends concurrent calls of one kind together: Takes, Peeks or
// TakeAlls. A call that finds fewer than maxInFlight batches in flight
// sends at once, itself and whatever is queued (up to maxBatch requests),
// as one batch script (BatchScript, PeekBatchScript or GroupsScript),
// which decides the calls one after the other, exactly as separate
// scripts would. Otherwise it queues. When a batch returns and calls are
// queued, the first of them is woken to send the next batch. A lone caller
// therefore sends its own request at once, with no goroutine in between;
// under load, Redis parses one command and runs one script call for many
// decisions, and the client encodes, writes and reads one command for them.
type batcher struct {
	r           *Runner
	kind        batchKind
	maxBatch    int
	maxInFlight int
	// cluster: the batcher of one cluster node, whose batches declare only
	// their first key (see nodebatch.go).
	cluster bool

	mu       sync.Mutex
	queue    []*pendingTake
	inFlight int
}

// batchKind is what a batcher's calls are.
type batchKind uint8

const (
	kindTake   batchKind = iota // Take: rediswire.BatchScript
	kindPeek                    // Peek: rediswire.PeekBatchScript, read-only
	kindGroup                   // TakeAll: rediswire.GroupsScript
	kindNative                  // fixed windows' Takes and TakeAlls: native commands (native.go)
	kinds
)

// batchers holds one batcher per kind, for one Redis (or cluster node).
type batchers [kinds]*batcher

func newBatchers(r *Runner, cluster bool, inFlight int) *batchers {
	var bs batchers
	for k := range kinds {
		bs[k] = &batcher{r: r, kind: k, maxBatch: r.opts.Batch, maxInFlight: inFlight, cluster: cluster}
	}
	return &bs
}

// pendingTake is one call in a batcher: a Take or Peek (req, key) or a
// TakeAll (reqs, keys).
type pendingTake struct {
	req  backend.Request
	key  string
	reqs []backend.Request
	keys []string
	ctx  context.Context
	done chan struct{} // signalled when res and err are set, or lead is
	res  backend.Result
	each []backend.Result // a TakeAll's results, one per request; nil: not told
	err  error
	// lead, when set, is the batch this call must send (itself included).
	lead []*pendingTake
	// all: a native call (reqs, keys) is a TakeAll, decided all or
	// nothing, rather than one Take.
	all bool
}

// weight is how many requests c adds to a batch.
func (c *pendingTake) weight() int {
	return max(1, len(c.reqs))
}

var pendingPool = sync.Pool{New: func() any { return &pendingTake{done: make(chan struct{}, 1)} }}

// take decides req (a Take or a Peek, by the batcher's kind), in a batch.
// When ctx ends while the call is queued it is withdrawn; a call already
// sent is abandoned (a Take may still be counted), as any call whose
// deadline passes in flight. The call that sends a batch waits for its
// reply without watching its own context, unless its deadline is too near
// (see tight), when a goroutine sends the batch instead; so no call waits
// past its own deadline, and none fails by another's (the batch goes with
// the latest deadline of its calls, see batchContext).
//
// key is req's Redis key when the caller built it already, else "".
func (b *batcher) take(ctx context.Context, req *backend.Request, key string) (backend.Result, error) {
	if key == "" {
		key = b.r.stateKey(req)
	}
	c := pendingPool.Get().(*pendingTake)
	c.req, c.key, c.ctx = *req, key, ctx
	res, _, err := b.submit(ctx, c)
	return res, err
}

// takeAll decides reqs (keys: their Redis keys) all or nothing, in a batch
// of TakeAll calls, as take does a Take.
func (b *batcher) takeAll(ctx context.Context, reqs []backend.Request, keys []string) (backend.Result, []backend.Result, error) {
	c := pendingPool.Get().(*pendingTake)
	// Copies: a caller whose context ends may reuse its slice while the
	// batch is in flight.
	c.reqs, c.keys, c.ctx = append(c.reqs[:0], reqs...), append(c.keys[:0], keys...), ctx
	return b.submit(ctx, c)
}

// submit sends c at once with whatever is queued, or queues it.
func (b *batcher) submit(ctx context.Context, c *pendingTake) (backend.Result, []backend.Result, error) {
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
		// Another call sends it (one with a later deadline), or a goroutine.
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
func (b *batcher) wait(ctx context.Context, c *pendingTake) (backend.Result, []backend.Result, error) {
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
			return backend.Result{}, nil, fmt.Errorf("%s: %w", b.r.name, ctx.Err())
		}
	}
}

// batchMinWait is the least time a batch is given: the store's own bound,
// below which a Take's deadline does not cut a batch short. A connection a
// batch has to open first is dialled within it, and the client shares that
// dial's outcome with the calls that wait for the same connection.
const batchMinWait = 50 * time.Millisecond

// sendWithFirstTake makes batches go with the deadline of their first Take
// and no least wait, as before sender and batchMinWait: a control
// (export_test.go). It is atomic: batches sent by goroutines that outlive
// their callers read it while a test restores it.
var sendWithFirstTake atomic.Bool

// minWait is batchMinWait, or 0 under sendWithFirstTake.
func minWait() time.Duration {
	if sendWithFirstTake.Load() {
		return 0
	}
	return batchMinWait
}

// tight reports whether ctx ends before a batch sent now would: such a Take
// does not send a batch itself (it would wait past its deadline).
func tight(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < minWait()
}

// sender picks the Take of batch that sends it: the one whose context has
// the latest deadline, or none (the first such). The batch is sent with
// that deadline, so it bounds the call without cutting short any other
// Take's wait: a Take with a tight deadline never fails those behind it.
// Under sendWithFirstTake it is the first Take (the old choice).
func sender(batch []*pendingTake) *pendingTake {
	best := batch[0]
	if sendWithFirstTake.Load() {
		return best
	}
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
func (b *batcher) finish(c *pendingTake) (backend.Result, []backend.Result, error) {
	res, each, err := c.res, c.each, c.err
	clear(c.reqs)
	clear(c.keys)
	*c = pendingTake{done: c.done, reqs: c.reqs[:0], keys: c.keys[:0]}
	pendingPool.Put(c)
	return res, each, err
}

// next returns the next batch: first (when not nil), then queued calls
// while their requests number maxBatch in all (a call heavier than that
// goes alone). b.mu must be held.
func (b *batcher) next(first *pendingTake) []*pendingTake {
	batch := make([]*pendingTake, 0, min(len(b.queue)+1, b.maxBatch))
	w := 0
	if first != nil {
		batch, w = append(batch, first), first.weight()
	}
	n := 0
	for ; n < len(b.queue); n++ {
		cw := b.queue[n].weight()
		if len(batch) > 0 && w+cw > b.maxBatch {
			break
		}
		batch, w = append(batch, b.queue[n]), w+cw
	}
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

// send runs one batch and hands each call its decision. batch[0] is not
// necessarily its sender; the batch goes with the latest deadline of all.
func (b *batcher) send(batch []*pendingTake) {
	ctx, cancel := batchContext(sender(batch).ctx)
	defer cancel()
	if b.kind == kindNative {
		b.r.runNative(ctx, batch)
		return
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.put()
	b.buildCall(sc, batch)
	s, callKeys, callArgs := b.r.batchScript(b.cluster, b.kind), sc.keys, sc.args
	if b.cluster {
		callKeys, sc.call = rediswire.ClusterBatchCall(sc.call, sc.keys, sc.args)
		callArgs = sc.call
	}
	var vals []int64
	var errs []error
	cmd, err := b.r.send(s, b.kind != kindPeek, func(cmd Command, script string) error {
		var err error
		vals, errs, err = b.r.conn.EvalBatch(ctx, cmd, script, callKeys, callArgs)
		return err
	})
	if want := replyLen(batch); err == nil && len(vals) != want {
		err = fmt.Errorf("%w: %d values, want %d for %d calls", rediswire.ErrBadReply, len(vals), want, len(batch))
	}
	alone := b.hand(batch, cmd, vals, errs, err)
	for _, c := range alone {
		b.sendAlone(ctx, c)
		c.done <- struct{}{}
	}
}

// buildCall puts the batch's keys and ARGV in sc.keys and sc.args.
func (b *batcher) buildCall(sc *scratch, batch []*pendingTake) {
	keys, args, buf := sc.keys, sc.args, sc.buf
	switch {
	case b.kind == kindGroup:
		for _, c := range batch {
			keys = append(keys, c.keys...)
			args = append(args, strconv.Itoa(len(c.reqs)), strconv.FormatInt(b.r.now(&c.reqs[0]), 10))
			for i := range c.reqs {
				args = rediswire.MultiArgs(args, c.reqs[i].Rule, wireCost(&c.reqs[i]))
			}
		}
	case sharedArgs(batch):
		for _, c := range batch {
			keys = append(keys, c.key)
		}
		first := &batch[0].req
		args, buf = rediswire.SharedBatchArgs(args, buf, first.Rule, wireCost(first), len(batch), func(i int) int64 { return b.r.now(&batch[i].req) })
	default:
		for _, c := range batch {
			keys = append(keys, c.key)
			args, buf = rediswire.BatchArgs(args, buf, c.req.Rule, b.r.now(&c.req), wireCost(&c.req))
		}
	}
	sc.keys, sc.args, sc.buf = keys, args, buf
}

// hand gives each call of the batch its decision from the batch's reply
// (or its error), and returns the calls whose slot moved, which must go
// again alone.
func (b *batcher) hand(batch []*pendingTake, cmd Command, vals []int64, errs []error, err error) (alone []*pendingTake) {
	at := 0 // where c's reply starts
	for _, c := range batch {
		first, n := at, c.replyLen()
		at += n
		e := err
		if e == nil && errs != nil {
			e = errs[first]
			if b.cluster && retryNonLocal && nonLocal(e) {
				// Its slot moved: it wrote nothing (a peek never writes; a
				// take or a TakeAll's check is refused at its first access);
				// it goes again alone.
				alone = append(alone, c)
				continue
			}
		}
		if e == nil {
			c.res, c.each, c.err = b.decode(c, vals[first:first+n], cmd)
		} else {
			c.res, c.err = backend.Result{}, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.what(), e)
		}
		c.done <- struct{}{}
	}
	return alone
}

// sendAlone decides c in a call of its own.
func (b *batcher) sendAlone(ctx context.Context, c *pendingTake) {
	switch b.kind {
	case kindTake:
		c.res, _, c.err = b.r.take(ctx, &c.req)
	case kindPeek:
		c.res, _, c.err = b.r.single(ctx, &c.req, rediswire.ModePeek, b.r.now(&c.req), 0)
	default:
		c.res, c.each, c.err = b.r.takeAllAlone(ctx, c.reqs, c.keys)
	}
}

// sharedArgs reports whether a Take or Peek batch of more than one call
// can go with its rule's values once (SharedBatchArgs): every call sends
// the same algorithm, window, limit and cost. It is a variable so that a
// test can turn it off as a control.
var sharedArgs = func(batch []*pendingTake) bool {
	if len(batch) < 2 {
		return false
	}
	r := &batch[0].req
	for _, c := range batch[1:] {
		if wireCost(&c.req) != wireCost(r) || c.req.Rule.Algorithm != r.Rule.Algorithm ||
			c.req.Rule.Limit != r.Rule.Limit || c.req.Rule.Window.Milliseconds() != r.Rule.Window.Milliseconds() {
			return false
		}
	}
	return true
}

// replyLen is the length of c's part of a batch's reply.
func (c *pendingTake) replyLen() int {
	if len(c.reqs) > 0 {
		return 1 + rediswire.ReplyLen*len(c.reqs)
	}
	return rediswire.ReplyLen
}

// replyLen is the length of a batch's reply.
func replyLen(batch []*pendingTake) int {
	n := 0
	for _, c := range batch {
		n += c.replyLen()
	}
	return n
}

// what names c in errors.
func (c *pendingTake) what() string {
	if len(c.reqs) > 0 {
		return "multi"
	}
	return string(c.req.Rule.Algorithm)
}

// decode converts c's part of a batch's reply.
func (b *batcher) decode(c *pendingTake, vals []int64, cmd Command) (backend.Result, []backend.Result, error) {
	if len(c.reqs) > 0 {
		return b.r.decodeMulti(c.reqs, vals, cmd)
	}
	out, err := rediswire.Decode(c.req.Rule, vals)
	if err != nil {
		return backend.Result{}, nil, fmt.Errorf("%s: %s batch %s: %w", b.r.name, cmd, c.req.Rule.Algorithm, err)
	}
	return backend.ResultOf(c.req.Rule, out), nil, nil
}

// decodeMulti checks and combines the multi script's reply for reqs (as
// takeTogether does, without replica acknowledgement: batches go without
// it).
func (r *Runner) decodeMulti(reqs []backend.Request, reply []int64, cmd Command) (backend.Result, []backend.Result, error) {
	if want := 1 + rediswire.ReplyLen*len(reqs); len(reply) != want || reply[0] < 0 || reply[0] > 1 {
		return backend.Result{}, nil, fmt.Errorf("%s: %s multi: %w: %d integers, want %d", r.name, cmd, rediswire.ErrBadReply, len(reply), want)
	}
	results := make([]backend.Result, len(reqs))
	for i := range reqs {
		out, err := rediswire.Decode(reqs[i].Rule, reply[1+rediswire.ReplyLen*i:1+rediswire.ReplyLen*(i+1)])
		if err != nil {
			return backend.Result{}, nil, fmt.Errorf("%s: %s multi: request %d: %w", r.name, cmd, i, err)
		}
		if reply[0] == 1 && !out.Allowed {
			return backend.Result{}, nil, fmt.Errorf("%s: %s multi: %w: request %d denied in an admitted reply", r.name, cmd, rediswire.ErrBadReply, i)
		}
		results[i] = backend.ResultOf(reqs[i].Rule, out)
	}
	res, each := backend.CombineEach(results)
	return res, each, nil
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
		return context.WithDeadline(context.WithoutCancel(ctx), later(d, time.Now().Add(minWait())))
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
