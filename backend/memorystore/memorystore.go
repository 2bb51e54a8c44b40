// Package memorystore is an in-process backend.Store: it runs the algorithms'
// Go steps on state kept in memory.
//
// It is exact and fast (one map lookup under a per-shard lock), and limits
// only this process. Use it on its own for single-instance services, as the
// local store of the fallback package, and in tests of code that uses
// limitkit.
//
// Memory is bounded. The store holds at most MaxKeys keys (DefaultMaxKeys
// unless set), split across shards. A key whose window has passed is expired:
// it behaves as new and its memory is reclaimed when a new key needs room.
// When a shard is full, a new key first takes the place of an expired one
// among eight sampled keys; when none of those has expired, it evicts the
// sampled key that would have regained its full allowance soonest. Evicting
// a key that is still inside its window gives it its full allowance back, so
// Stats counts those evictions apart: a steady rise means MaxKeys is too low
// for the traffic (or someone is cycling keys to reopen allowances).
package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// DefaultMaxKeys is the number of keys a store holds unless WithMaxKeys says
// otherwise. A key of a counter algorithm takes about 150 bytes; a sliding log
// key adds 8 bytes per admitted unit still in its window.
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

// Option configures a Store.
type Option func(*config) error

type config struct {
	maxKeys int
}

// WithMaxKeys bounds the number of keys the store holds (default
// DefaultMaxKeys). It must be at least 1.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("memorystore: max keys is %d; it must be at least 1", n)
		}
		c.maxKeys = n
		return nil
	}
}

// Store is an in-memory backend.Store. It is safe for concurrent use.
type Store struct {
	seed   maphash.Seed
	shards []shard
	mask   uint64

	activeEvictions atomic.Uint64
	reclaimed       atomic.Uint64
}

var _ backend.Store = (*Store)(nil)

// mapKey identifies a key's state for one algorithm.
type mapKey struct {
	prefix, id string
	algorithm  algorithms.Name
}

type entry struct {
	state algorithms.State
	// expires is when the state becomes empty again, in milliseconds.
	expires int64
}

type shard struct {
	mu       sync.Mutex
	entries  map[mapKey]*entry
	capacity int
	// Keep neighbouring shards' locks on separate cache lines.
	_ [40]byte
}

// New returns an empty store. With no options it holds up to DefaultMaxKeys
// keys.
func New(opts ...Option) (*Store, error) {
	c := config{maxKeys: DefaultMaxKeys}
	for _, opt := range opts {
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	n := 1
	for n < maxShards && n*2*keysPerShard <= c.maxKeys {
		n *= 2
	}
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range s.shards {
		// Spread MaxKeys exactly: the first maxKeys%n shards take one more.
		capacity := c.maxKeys / n
		if i < c.maxKeys%n {
			capacity++
		}
		s.shards[i] = shard{entries: make(map[mapKey]*entry), capacity: capacity}
	}
	return s, nil
}

func (s *Store) shard(id string) *shard {
	return &s.shards[maphash.String(s.seed, id)&s.mask]
}

// Take implements backend.Store.
func (s *Store) Take(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	now := req.Millis()
	k := mapKey{req.Key.Prefix, req.Key.ID, req.Rule.Algorithm}
	sh := s.shard(k.id)
	sh.mu.Lock()
	e := sh.entries[k]
	if e == nil {
		e = s.insert(sh, k, now)
	}
	out := req.Rule.Take(&e.state, now, req.Cost)
	e.expires = now + out.ResetAfter
	sh.mu.Unlock()
	return backend.ResultOf(req.Rule, out), nil
}

// Peek implements backend.Store.
func (s *Store) Peek(_ context.Context, req backend.Request) (backend.Result, error) {
	if err := req.Validate(); err != nil {
		return backend.Result{}, err
	}
	now := req.Millis()
	k := mapKey{req.Key.Prefix, req.Key.ID, req.Rule.Algorithm}
	var empty algorithms.State
	sh := s.shard(k.id)
	sh.mu.Lock()
	st := &empty
	if e := sh.entries[k]; e != nil {
		st = &e.state
	}
	out := req.Rule.Peek(st, now, req.Cost)
	sh.mu.Unlock()
	return backend.ResultOf(req.Rule, out), nil
}

// Reset implements backend.Store.
func (s *Store) Reset(_ context.Context, key backend.Key, rule algorithms.Rule) error {
	if err := key.Validate(); err != nil {
		return err
	}
	sh := s.shard(key.ID)
	sh.mu.Lock()
	delete(sh.entries, mapKey{key.Prefix, key.ID, rule.Algorithm})
	sh.mu.Unlock()
	return nil
}

// insert adds a key to a locked shard, making room first when it is full.
func (s *Store) insert(sh *shard, k mapKey, now int64) *entry {
	if len(sh.entries) >= sh.capacity {
		s.makeRoom(sh, now, evictSample, true)
	} else {
		s.makeRoom(sh, now, sweepSample, false)
	}
	// Copy the strings into one allocation: the caller's may be slices of
	// a larger buffer (a request line) that the store should not pin.
	buf := make([]byte, len(k.prefix)+len(k.id))
	copy(buf[copy(buf, k.prefix):], k.id)
	all := string(buf)
	k.prefix, k.id = all[:len(k.prefix)], all[len(k.prefix):]
	e := &entry{}
	sh.entries[k] = e
	return e
}

// makeRoom looks at up to sample keys of a locked shard, deletes those that
// expired and, when must is set and none had, evicts the one that would
// regain its allowance soonest.
func (s *Store) makeRoom(sh *shard, now int64, sample int, must bool) {
	var victim mapKey
	var victimExpires int64
	found, freed := false, false
	for k, e := range sh.entries {
		if e.expires <= now {
			delete(sh.entries, k)
			freed = true
			s.reclaimed.Add(1)
		} else if !found || e.expires < victimExpires {
			victim, victimExpires, found = k, e.expires, true
		}
		if sample--; sample == 0 {
			break
		}
	}
	if must && !freed && found {
		delete(sh.entries, victim)
		s.activeEvictions.Add(1)
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

// Stats returns the current counts. It locks each shard in turn.
func (s *Store) Stats() Stats {
	st := Stats{Reclaimed: s.reclaimed.Load(), ActiveEvictions: s.activeEvictions.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.entries)
		sh.mu.Unlock()
	}
	return st
}
