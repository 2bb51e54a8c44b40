package fallback

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Baselines: what the primary last said about each key.
//
// While the primary answers, every answer (Take, Peek, GiveBack, each
// request of a TakeAll) is recorded for its key and rule: the time it was
// decided at, the units left, and when the key is to be full again
// (ResetAfter). While it does not, a request whose policy is local is
// decided on the local store as before, and also within a cap: the share
// of what the primary last said was left, as time frees it, less what this
// process admitted locally (and sent in calls that missed their deadline)
// since. A key the primary last reported spent stays refused until its
// reset; one with r left admits at most floor(r/n) under LocalPolicy(n)
// (floor, so that n instances that saw the same answer admit at most r
// between them). A key with no baseline, or past its reset, is decided by
// the local store alone, at the policy's share ceil(limit/n), as without
// baselines.

// DefaultBaselines is how many keys a store remembers the primary's last
// answer for, unless WithBaselines says otherwise.
const DefaultBaselines = 100_000

// baselineShards spreads the baselines over locks: recording an answer
// takes one shard's lock, so callers on different keys rarely contend.
const baselineShards = 64

// baselines remembers, per key and algorithm, the primary's last answer,
// in at most capacity entries over all shards (a shard's least recently
// used is forgotten first). The count is shared, not split per shard: a
// split forgets keys of a full shard while others have room (issue 43).
type baselines struct {
	seed     maphash.Seed
	capacity int64
	held     atomic.Int64
	// outages counts the breaker's openings: an answer recorded before
	// the last one may count what the primary has lost since (hold.go).
	outages atomic.Uint64
	shards  [baselineShards]baselineShard
}

// baselineShard is one lock's share of the baselines: a map and a list
// from the most recently used (head) to the least (tail).
type baselineShard struct {
	mu         sync.Mutex
	m          map[baselineKey]*baseline
	head, tail *baseline
	_          [40]byte // keep shards on separate cache lines
}

// baselineKey names a key's state on the primary: its prefix, id and
// algorithm (the stores keep one state per key and algorithm).
type baselineKey struct {
	prefix, id string
	alg        algorithms.Name
}

// baseline is the primary's last answer for one key, and what this process
// counted for it since. Times are in ms since the Unix epoch.
type baseline struct {
	key        baselineKey
	prev, next *baseline
	// limit and window (ms) are the rule of the answer: a request of
	// another rule does not use it.
	limit, window int64
	// at is the time the answer was decided at, remaining its units left,
	// resetAt when its key was to be full again (at + ResetAfter).
	at, remaining, resetAt int64
	// spent counts the units admitted locally, or sent to the primary in
	// calls that missed their deadline, while the answer bound; spentUntil
	// is when every one of them is out of its window.
	spent, spentUntil int64
	// via is the part of spent a held answer counted of Takes the primary
	// admitted (hold.go); told is the part the caller was last told is
	// gone: a held key's answer is what the hold leaves, so a credit
	// of those units would count them back twice.
	via, told int64
	// epoch is outages when the answer was recorded.
	epoch uint64
	// newest is the primary's newest answer while the answer is held: the
	// key's answer once the hold ends (hold.go).
	newest nextAnswer
}

// newBaselines returns a table of about n entries (nil when n is 0).
func newBaselines(n int) *baselines {
	if n <= 0 {
		return nil
	}
	t := &baselines{seed: maphash.MakeSeed(), capacity: int64(n)}
	for i := range t.shards {
		t.shards[i].m = make(map[baselineKey]*baseline)
	}
	return t
}

func keyOf(req *backend.Request) baselineKey {
	return baselineKey{prefix: req.Key.Prefix, id: req.Key.ID, alg: req.Rule.Algorithm}
}

func (t *baselines) shardOf(k baselineKey) int {
	return int(maphash.Comparable(t.seed, k) % baselineShards)
}

// record remembers res, the primary's answer to req. It is the only work
// baselines add to a decision the primary answers: a hash, one shard lock
// and a few stores.
func (t *baselines) record(req *backend.Request, res *backend.Result) {
	if t == nil {
		return
	}
	k := keyOf(req)
	sh := &t.shards[t.shardOf(k)]
	now := req.Millis()
	epoch := t.outages.Load()
	sh.mu.Lock()
	e := sh.m[k]
	if e == nil {
		e = t.insert(sh, k)
	} else {
		sh.touch(e)
		e.settle(now)
	}
	if t.holding() && e.holds(req, now, epoch) { // a held answer stays (hold.go)
		e.lower(res, now)
		e.keepNext(res, now, epoch)
		e.told = e.spent
	} else {
		e.update(req, res, now)
		e.epoch = epoch
	}
	sh.mu.Unlock()
}

// update makes res, at now, e's answer. An answer decided before the one
// e holds is older news and changes nothing; of two decided in the same
// millisecond the lower count left is kept. What this process counted
// while the previous answer bound stays counted while it is in its window
// (the primary does not know of it): a new answer is a new baseline, not a
// reset of the local count.
func (e *baseline) update(req *backend.Request, res *backend.Result, now int64) {
	limit, window := req.Rule.Limit, req.Rule.Window.Milliseconds()
	if e.limit != limit || e.window != window {
		*e = baseline{key: e.key, prev: e.prev, next: e.next, limit: limit, window: window}
	} else if now < e.at || (now == e.at && res.Remaining >= e.remaining) {
		return
	}
	e.at, e.remaining = now, res.Remaining
	e.resetAt = now + res.ResetAfter.Milliseconds()
	e.newest, e.told = nextAnswer{}, 0
	if now >= e.spentUntil {
		e.spent, e.via, e.told = 0, 0, 0
	}
}

// insert adds an empty entry for k at the head of sh, forgetting a least
// recently used entry when the table holds its capacity: sh's own, or
// when sh is empty another shard's that is not locked (an entry more
// than the capacity, at most one per shard, when every other is). The
// caller holds sh.mu.
func (t *baselines) insert(sh *baselineShard, k baselineKey) *baseline {
	var e *baseline
	if t.held.Load() >= t.capacity {
		if sh.tail != nil {
			e = sh.evict()
		} else {
			t.evictOther(sh)
		}
	}
	if e == nil {
		e = new(baseline)
		t.held.Add(1)
	}
	e.key = k
	sh.m[k] = e
	sh.pushFront(e)
	return e
}

// evictOther forgets the least recently used entry of the first other
// shard it can lock without waiting that has one.
func (t *baselines) evictOther(sh *baselineShard) {
	for i := range t.shards {
		o := &t.shards[i]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		found := o.tail != nil
		if found {
			o.evict()
			t.held.Add(-1)
		}
		o.mu.Unlock()
		if found {
			return
		}
	}
}

// evict unlinks and forgets sh's least recently used entry and returns it
// cleared. The caller holds sh.mu.
func (sh *baselineShard) evict() *baseline {
	e := sh.tail
	sh.unlink(e)
	delete(sh.m, e.key)
	*e = baseline{}
	return e
}

func (sh *baselineShard) touch(e *baseline) {
	if sh.head != e {
		sh.unlink(e)
		sh.pushFront(e)
	}
}

func (sh *baselineShard) pushFront(e *baseline) {
	e.prev, e.next = nil, sh.head
	if sh.head != nil {
		sh.head.prev = e
	}
	sh.head = e
	if sh.tail == nil {
		sh.tail = e
	}
}

func (sh *baselineShard) unlink(e *baseline) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// bound is a locked view of the baseline of one degraded request: nil
// entry when the key has none that applies.
type bound struct {
	e *baseline
	// n is the policy's number of instances.
	n int64
}

// lockAll locks the shards of reqs (each once, in shard order, so that
// concurrent callers cannot deadlock) and returns the unlock.
func (t *baselines) lockAll(reqs []backend.Request) func() {
	var idx [backend.MaxRequests]int
	ids := idx[:0]
	for i := range reqs {
		ids = append(ids, t.shardOf(keyOf(&reqs[i])))
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for _, i := range ids {
		t.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range ids {
			t.shards[i].mu.Unlock()
		}
	}
}

// lock locks the shard of req's key and returns the unlock.
func (t *baselines) lock(req *backend.Request) func() {
	sh := &t.shards[t.shardOf(keyOf(req))]
	sh.mu.Lock()
	return sh.mu.Unlock
}

// boundOf returns the baseline that binds req at its time under a policy
// of n instances; the caller holds the shard's lock. rule is req's rule as
// the caller gave it (before scaling to a share).
func (t *baselines) boundOf(req *backend.Request, rule algorithms.Rule, n int64) bound {
	if t == nil {
		return bound{}
	}
	k := baselineKey{prefix: req.Key.Prefix, id: req.Key.ID, alg: rule.Algorithm}
	e := t.shards[t.shardOf(k)].m[k]
	if e == nil || e.limit != rule.Limit || e.window != rule.Window.Milliseconds() {
		return bound{}
	}
	now := req.Millis()
	e.settle(now)
	if now >= e.resetAt {
		return bound{} // the key is full on the primary: the local store decides
	}
	if now >= e.spentUntil {
		e.spent, e.via, e.told = 0, 0, 0
	}
	return bound{e: e, n: n}
}

// avail is what the primary would have left for the key at now had
// nothing else reached it: the answer's remaining, and for a bucket (gcra)
// what it refilled since (at least floor(elapsed*limit/window) units).
func (b bound) avail(now int64) int64 {
	e := b.e
	r := e.remaining
	if refills(e.key.alg) && now > e.at {
		r = min(e.limit, r+(now-e.at)*e.limit/e.window)
	}
	return max(r, 0)
}

// left is what this instance may still admit under the baseline at now:
// floor(avail/n) less what it counted since.
func (b bound) left(now int64) int64 {
	if b.e == nil {
		return -1
	}
	return max(b.avail(now)/b.n-b.e.spent, 0)
}

// allows reports whether the baseline lets a request of cost through at
// now (always, when none binds).
func (b bound) allows(now, cost int64) bool {
	return b.e == nil || b.left(now) >= cost
}

// retryAfter is how long until the baseline lets cost through: its reset,
// or for a bucket (gcra) when the refill covers it, if sooner.
func (b bound) retryAfter(now, cost int64) int64 {
	e := b.e
	wait := e.resetAt - now
	if refills(e.key.alg) {
		// floor(avail/n) >= spent+cost once the refill brought need
		// units; avail stops at the limit.
		need := b.n*(e.spent+cost) - e.remaining
		if b.n*(e.spent+cost) <= e.limit {
			wait = min(wait, max(e.at+ceilDiv(need*e.window, e.limit)-now, 1))
		}
	}
	return max(wait, 1)
}

// spend counts cost units admitted (or sent) at now.
func (b bound) spend(now, cost int64) {
	e := b.e
	e.spent += cost
	// When every unit counted is out of its window (Rule.CountedUntil).
	rule := algorithms.Rule{Algorithm: e.key.alg, Window: time.Duration(e.window) * time.Millisecond}
	e.spentUntil = max(e.spentUntil, rule.CountedUntil(now))
}

// credit takes cost units given back (or a local lease released) off
// what was counted, but not the units the primary admitted under a hold
// (via: the primary still counts them, and a held answer lowered by the
// primary's counts them as left, lower) nor those the caller was told
// are gone (told).
func (b bound) credit(cost int64) {
	floor := max(b.e.via, b.e.told)
	if skipKeepVia {
		floor = 0
	}
	b.e.spent = max(b.e.spent-cost, floor, 0)
}

// refills reports whether alg is a bucket (algorithms.Algorithm.Refills:
// gcra), whose allowance comes back as time passes after an answer.
func refills(alg algorithms.Name) bool {
	a := algorithms.Lookup(alg)
	return a != nil && a.Refills
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// denial is the Result of a request the baseline refuses, for a local
// limit of share.
func (b bound) denial(now, cost, share int64) backend.Result {
	return backend.Result{
		Limit:      share,
		Remaining:  b.left(now),
		RetryAfter: millisDuration(b.retryAfter(now, cost)),
		ResetAfter: millisDuration(max(b.e.resetAt-now, 1)),
		Degraded:   true,
	}
}

// millisDuration converts ms to a Duration.
func millisDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// released notes that the primary released a lease req held: its key has
// req.Cost more units free than its baseline says.
func (t *baselines) released(req *backend.Request) {
	if t == nil {
		return
	}
	defer t.lock(req)()
	k := keyOf(req)
	e := t.shards[t.shardOf(k)].m[k]
	if e == nil || e.limit != req.Rule.Limit || e.window != req.Rule.Window.Milliseconds() {
		return
	}
	e.settle(req.Millis())
	if req.Millis() >= e.at {
		e.remaining = min(e.remaining+req.Cost, e.limit)
	}
	if e.newest.set && req.Millis() >= e.newest.at {
		e.newest.remaining = min(e.newest.remaining+req.Cost, e.limit)
	}
}

// forget drops the baseline of key under alg (a Reset).
func (t *baselines) forget(key backend.Key, alg algorithms.Name) {
	if t == nil {
		return
	}
	k := baselineKey{prefix: key.Prefix, id: key.ID, alg: alg}
	sh := &t.shards[t.shardOf(k)]
	sh.mu.Lock()
	if e := sh.m[k]; e != nil {
		sh.unlink(e)
		delete(sh.m, k)
		t.held.Add(-1)
	}
	sh.mu.Unlock()
}
