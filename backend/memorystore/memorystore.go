// Package memorystore is an in-process backend.Store: it runs the algorithms'
// Go steps on state kept in memory.
//
// It is exact and fast (one map lookup under a per-shard lock), and limits
// only this process. Use it on its own for single-instance services, as the
// local store of the fallback package, and in tests of code that uses
// limitkit.
//
// Memory is bounded. The store holds at most MaxKeys keys (DefaultMaxKeys
// unless set), split across shards. A key expires one window and a second
// (algorithms.Rule.KeyTTL, as on Redis) after it is back to its full
// allowance (the extra window serves requests that arrive late); its memory
// is then reclaimed when a new key needs room.
// When a shard is full, a new key first takes the place of expired keys
// found among eight sampled keys or, failing that, by a sweep of the whole
// shard (at most once per capacity/8 new keys, so a flood of new keys costs
// a bounded amount of work per key). When no key has expired, it evicts the
// sampled key that would regain its full allowance soonest. Evicting
// a key that is still inside its window gives it its full allowance back, so
// Stats counts those evictions apart: a steady rise means MaxKeys is too low
// for the traffic (or someone is cycling keys to reopen allowances).
package memorystore

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/hotpath"
	"github.com/limitkit/limitkit/internal/option"
)

// DefaultMaxKeys is the number of keys a store holds unless WithMaxKeys says
// otherwise. A key takes a 64-byte slot in a table at most 3/4 full; a
// sliding log key adds 8 bytes per unit admitted in its last two windows (at
// most 8 × limit).
const DefaultMaxKeys = 1_000_000

// keysPerShard sets the shard count: enough shards to spread concurrent
// callers over independent locks, few enough that each shard's share of
// MaxKeys is large and evictions stay close to store-wide LRU-by-reset order.
const (
	keysPerShard = 1024
	maxShards    = 64
	evictSample  = 8
	sweepSample  = 2
)

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults New gives.
type options struct {
	maxKeys int
}

// WithMaxKeys bounds the number of keys the store holds (default
// DefaultMaxKeys). It must be at least 1.
func WithMaxKeys(n int) Option {
	return func(c *options) error {
		if n < 1 {
			return fmt.Errorf("WithMaxKeys: the maximum is %d; give 1 or more", n)
		}
		c.maxKeys = n
		return nil
	}
}

// Store is an in-memory backend.Store. It is safe for concurrent use.
type Store struct {
	seed1, seed2 maphash.Seed
	shards       []shard
	shardBits    uint

	// Keep the counters, written by inserts, off the line every decision
	// reads.
	_               [shardAlign]byte
	activeEvictions atomic.Uint64
	reclaimed       atomic.Uint64
}

var (
	_ backend.LeaseStore   = (*Store)(nil)
	_ backend.UnitRefunder = (*Store)(nil)
)

type shard struct {
	shardState
	// Give each shard lines of its own: a shard's lock and table header
	// share a line, which moves between cores once per decision, and no
	// neighbour's should move with it.
	_ [(shardAlign - unsafe.Sizeof(shardState{})%shardAlign) % shardAlign]byte
}

// shardAlign is a multiple of the cache line (two lines: the adjacent-line
// prefetcher fetches pairs).
const shardAlign = 128

type shardState struct {
	mu       sync.Mutex
	table    table
	capacity int
	// sinceSweep counts new keys since the last full sweep.
	sinceSweep int
}

// New returns an empty store. With no options it holds up to DefaultMaxKeys
// keys.
func New(opts ...Option) (*Store, error) {
	c := options{maxKeys: DefaultMaxKeys}
	if err := option.Apply(&c, opts); err != nil {
		return nil, fmt.Errorf("memorystore: %w", err)
	}
	bits := uint(0)
	for 1<<bits < maxShards && (2<<bits)*keysPerShard <= c.maxKeys {
		bits++
	}
	n := 1 << bits
	s := &Store{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), shards: make([]shard, n), shardBits: bits}
	for i := range s.shards {
		// Spread MaxKeys exactly: the first maxKeys%n shards take one more.
		capacity := c.maxKeys / n
		if i < c.maxKeys%n {
			capacity++
		}
		s.shards[i].shardState = shardState{table: newTable(maphash.String(s.seed1, strconv.Itoa(i))), capacity: capacity, sinceSweep: capacity}
	}
	return s, nil
}

// locate hashes a key twice, with independent seeds, and returns its shard.
// Two keys are confused only if both 64-bit hashes collide (a chance of
// about 2^-128 per pair, with seeds no caller can see).
// salt (the algorithm's) keeps the states of different algorithms for one
// key apart.
func (s *Store) locate(prefix, id string, salt uint64) (sh *shard, h1, h2 uint64) {
	// Hash prefix and id as one string, with the prefix length mixed in so
	// that ("ab", "c") and ("a", "bc") differ. Short keys are joined on the
	// stack; longer ones are streamed.
	if n := len(prefix) + len(id); n <= 64 {
		var buf [64]byte
		copy(buf[copy(buf[:], prefix):], id)
		h1 = maphash.Bytes(s.seed1, buf[:n])
		h2 = maphash.Bytes(s.seed2, buf[:n])
	} else {
		h1 = streamHash(s.seed1, prefix, id)
		h2 = streamHash(s.seed2, prefix, id)
	}
	salt ^= uint64(len(prefix)) * 0xff51afd7ed558ccd
	h1 ^= salt
	h2 ^= bits.RotateLeft64(salt, 29)
	if h1 == 0 {
		h1 = 1 // 0 marks an empty slot
	}
	return &s.shards[h1>>(64-s.shardBits)&(1<<s.shardBits-1)], h1, h2
}

func streamHash(seed maphash.Seed, prefix, id string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	_, _ = h.WriteString(prefix)
	_, _ = h.WriteString(id)
	return h.Sum64()
}

// Take implements backend.Store.
func (s *Store) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	return s.decide(req.Key.Prefix, req.Key.ID, &req.Rule, req.Millis(), req.Cost, req.Charge), nil
}

// take is Take of a request that is valid and no charge: what the limiter
// calls directly (see package internal/hotpath).
func (s *Store) take(prefix, id string, rule *algorithms.Rule, now, cost int64) backend.Result {
	return s.decide(prefix, id, rule, now, cost, false)
}

// decide runs a valid request's Take (with charge its Charge) on its key.
func (s *Store) decide(prefix, id string, rule *algorithms.Rule, now, cost int64, charge bool) backend.Result {
	a := rule.Descriptor()
	sh, h1, h2 := s.locate(prefix, id, a.Salt)
	sh.mu.Lock()
	res := s.takeLocked(sh, h1, h2, a, rule, now, cost, charge)
	sh.mu.Unlock()
	return res
}

func init() {
	hotpath.Register(func(store backend.Store) hotpath.Take {
		if s, ok := store.(*Store); ok && s != nil {
			return s.take
		}
		return nil
	})
}

// takeLocked runs a Take (or with charge a Charge) of rule (a is its
// algorithm) on its key in the locked shard sh.
func (s *Store) takeLocked(sh *shard, h1, h2 uint64, a *algorithms.Algorithm, rule *algorithms.Rule, now, cost int64, charge bool) backend.Result {
	e := sh.table.find(h1, h2)
	if e == nil {
		e = s.insert(sh, h1, h2, now)
	}
	var out algorithms.Outcome
	if charge {
		out = a.Charge(&e.state, now, rule.Window.Milliseconds(), rule.Limit, cost, true)
	} else {
		out = a.Take(&e.state, now, rule.Window.Milliseconds(), rule.Limit, cost)
	}
	// Kept as long as the scripts keep a Redis key (Rule.KeyTTL): a window
	// past its reset, for requests that arrive late.
	e.expires = now + rule.KeyTTL(out.ResetAfter)
	res := backend.ResultOf(*rule, out)
	if out.Allowed && a.HoldsLeases() {
		res.Lease = a.ChargedAt(&e.state, now)
	}
	return res
}

// peekLocked runs req's Peek (a is its algorithm) on its key in the locked
// shard sh.
func peekLocked(sh *shard, h1, h2 uint64, a *algorithms.Algorithm, req *backend.Request, now int64) algorithms.Outcome {
	w, limit := req.Rule.Window.Milliseconds(), req.Rule.Limit
	var empty algorithms.State
	st := &empty
	if e := sh.table.find(h1, h2); e != nil {
		st = &e.state
	}
	if req.Charge {
		return a.Charge(st, now, w, limit, req.Cost, false)
	}
	return a.Peek(st, now, w, limit, req.Cost)
}

// TakeAll implements backend.Store: TakeEach without each, its results
// on the stack.
func (s *Store) TakeAll(_ context.Context, reqs []backend.Request) (backend.Result, error) {
	var results [backend.MaxRequests]backend.Result
	if len(reqs) > len(results) {
		return backend.Result{}, backend.ValidateAll(reqs)
	}
	return s.takeAll(reqs, results[:len(reqs)])
}

// TakeEach implements backend.EachTaker.
func (s *Store) TakeEach(_ context.Context, reqs []backend.Request) (backend.Result, []backend.Result, error) {
	results := make([]backend.Result, len(reqs))
	res, err := s.takeAll(reqs, results)
	if err != nil || len(reqs) < 2 {
		return res, nil, err
	}
	return res, results, nil
}

// takeAll decides reqs into results (one per request). It locks the shards of every key (in
// shard order, so concurrent calls cannot deadlock), checks every request,
// and takes them all only when all are admitted: exact and atomic.
func (s *Store) takeAll(reqs []backend.Request, results []backend.Result) (backend.Result, error) {
	if err := backend.ValidateAll(reqs); err != nil {
		return backend.Result{}, err
	}
	now := reqs[0].Millis()
	type located struct {
		sh     *shard
		h1, h2 uint64
		a      *algorithms.Algorithm
	}
	var loc [backend.MaxRequests]located
	var locks [backend.MaxRequests]*shard
	n := 0
	for i := range reqs {
		a := reqs[i].Rule.Descriptor() // known: reqs are valid
		sh, h1, h2 := s.locate(reqs[i].Key.Prefix, reqs[i].Key.ID, a.Salt)
		loc[i] = located{sh, h1, h2, a}
		if !slices.Contains(locks[:n], sh) {
			locks[n] = sh
			n++
		}
	}
	slices.SortFunc(locks[:n], func(a, b *shard) int { return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b))) })
	for _, sh := range locks[:n] {
		sh.mu.Lock()
	}
	all := true
	for i := range reqs {
		out := peekLocked(loc[i].sh, loc[i].h1, loc[i].h2, loc[i].a, &reqs[i], now)
		results[i] = backend.ResultOf(reqs[i].Rule, out)
		all = all && out.Allowed
	}
	// Look each key up again: an insert may have moved slots. A charge
	// is taken whatever the others decided: its cost was incurred.
	for i := range reqs {
		if all || reqs[i].Charge {
			r := &reqs[i]
			results[i] = s.takeLocked(loc[i].sh, loc[i].h1, loc[i].h2, loc[i].a, &r.Rule, now, r.Cost, r.Charge)
		}
	}
	for _, sh := range locks[:n] {
		sh.mu.Unlock()
	}
	return backend.Combine(results), nil
}

// GiveBack implements backend.UnitRefunder: up to req.Cost of the newest
// units counted at req.Now (algorithms.Rule.GiveBack), then what a Peek of
// req reports.
func (s *Store) GiveBack(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	if err := req.Rule.CheckGiveBack(); err != nil {
		return backend.Result{}, err
	}
	now := req.Millis()
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.table.find(h1, h2)
	if e == nil {
		return backend.ResultOf(req.Rule, peekLocked(sh, h1, h2, a, &req, now)), nil
	}
	return backend.ResultOf(req.Rule, req.Rule.GiveBack(&e.state, now, req.Cost)), nil
}

// Release implements backend.LeaseStore.
func (s *Store) Release(_ context.Context, req backend.Request, lease int64) (bool, error) {
	if err := backend.ValidateLease(&req); err != nil {
		return false, err
	}
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.table.find(h1, h2)
	if e == nil {
		return false, nil
	}
	return req.Rule.Release(&e.state, req.Millis(), lease), nil
}

// Renew implements backend.LeaseStore.
func (s *Store) Renew(_ context.Context, req backend.Request, lease int64) (backend.Result, error) {
	if err := backend.ValidateLease(&req); err != nil {
		return backend.Result{}, err
	}
	now := req.Millis()
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.table.find(h1, h2)
	if e == nil {
		var empty algorithms.State
		return backend.ResultOf(req.Rule, req.Rule.Renew(&empty, now, lease, req.Cost)), nil
	}
	out := req.Rule.Renew(&e.state, now, lease, req.Cost)
	res := backend.ResultOf(req.Rule, out)
	if out.Allowed {
		res.Lease = req.Rule.ChargedAt(&e.state, now)
		e.expires = now + req.Rule.KeyTTL(out.ResetAfter)
	}
	return res, nil
}

// Peek implements backend.Store.
func (s *Store) Peek(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	a := req.Rule.Descriptor() // known: req is valid
	sh, h1, h2 := s.locate(req.Key.Prefix, req.Key.ID, a.Salt)
	sh.mu.Lock()
	out := peekLocked(sh, h1, h2, a, &req, req.Millis())
	sh.mu.Unlock()
	return backend.ResultOf(req.Rule, out), nil
}

// Reset implements backend.Store.
func (s *Store) Reset(_ context.Context, key backend.Key, rule algorithms.Rule, _ time.Time) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := rule.Validate(); err != nil {
		return err
	}
	sh, h1, h2 := s.locate(key.Prefix, key.ID, rule.Descriptor().Salt) // known: rule is valid
	sh.mu.Lock()
	sh.remove(h1, h2)
	sh.mu.Unlock()
	return nil
}

// remove deletes a key from a locked shard, if present.
func (sh *shard) remove(h1, h2 uint64) {
	if e := sh.table.find(h1, h2); e != nil {
		sh.table.deleteAt(uint64(e.index(sh.table.slots)))
	}
}

// index returns the position of s in slots.
func (s *slot) index(slots []slot) int {
	return int((uintptr(unsafe.Pointer(s)) - uintptr(unsafe.Pointer(&slots[0]))) / unsafe.Sizeof(*s))
}

// insert adds a key to a locked shard, making room first when it is full.
func (s *Store) insert(sh *shard, h1, h2 uint64, now int64) *slot {
	sh.sinceSweep++
	t := &sh.table
	if t.used < sh.capacity {
		_, _, _, n := t.sweep(now, sweepSample)
		s.addReclaimed(n)
		return t.add(h1, h2)
	}
	v1, v2, found, n := t.sweep(now, evictSample)
	if n == 0 && sh.sinceSweep >= sh.capacity/8 {
		sh.sinceSweep = 0
		_, _, _, n = t.sweep(now, t.used)
	}
	s.addReclaimed(n)
	if t.used >= sh.capacity && found {
		sh.remove(v1, v2)
		s.activeEvictions.Add(1)
	}
	return t.add(h1, h2)
}

// addReclaimed counts n reclaimed keys, writing the shared counter only
// when there are some.
func (s *Store) addReclaimed(n int) {
	if n > 0 {
		s.reclaimed.Add(uint64(n))
	}
}

// Stats describes a store's contents and evictions.
type Stats struct {
	// Keys is the number of keys held, expired ones not yet reclaimed
	// included.
	Keys int
	// Reclaimed counts expired keys whose memory was reused.
	Reclaimed uint64
	// ActiveEvictions counts keys evicted while still inside their window
	// to make room for new ones; each got its full allowance back.
	ActiveEvictions uint64
}

// ActiveEvictions returns Stats().ActiveEvictions without locking any
// shard, for watchers that poll it (backend/observe.WatchEvictions).
func (s *Store) ActiveEvictions() uint64 { return s.activeEvictions.Load() }

// Stats returns the current counts. It locks each shard in turn.
func (s *Store) Stats() Stats {
	st := Stats{Reclaimed: s.reclaimed.Load(), ActiveEvictions: s.activeEvictions.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.table.used
		sh.mu.Unlock()
	}
	return st
}
