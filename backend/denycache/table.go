package denycache

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// shards splits the table so concurrent callers rarely share a lock.
const shards = 64

type shard struct {
	mu sync.Mutex
	m  map[[2]uint64]entry
	// gen counts invalidations, so that a denial read from the store
	// before an invalidation arrived is not remembered after it.
	gen uint64
}

// entry is one remembered denial, times in ms since the Unix epoch.
type entry struct {
	algorithm algorithms.Name
	limit     int64
	window    time.Duration
	at        int64 // the time of the denial
	retryAt   int64 // when one unit is first admitted
	resetAt   int64 // when the key is back to its full allowance
	// group is what is known of the key's prefix; the entry holds while
	// the group's generation is still ggen (see sightings.go).
	group *group
	ggen  uint64
}

// lookup answers req at now from a remembered denial, if one holds. It
// returns the shard's generation, to pass to remember after asking the
// store.
func (s *Store) lookup(sh *shard, h [2]uint64, rule algorithms.Rule, now int64) (backend.Result, bool, uint64) {
	sh.mu.Lock()
	e, ok := sh.m[h]
	gen := sh.gen
	sh.mu.Unlock()
	if !ok || e.algorithm != rule.Algorithm || e.limit != rule.Limit || e.window != rule.Window ||
		now < e.at || now >= e.retryAt || !s.holds(&e) {
		return backend.Result{}, false, gen
	}
	s.hits.Add(1)
	return backend.Result{
		Limit:      e.limit,
		RetryAfter: time.Duration(e.retryAt-now) * time.Millisecond,
		ResetAfter: time.Duration(max(e.resetAt-now, 0)) * time.Millisecond,
		Cached:     true,
	}, true, gen
}

// remember stores e unless an invalidation reached the shard since gen was
// read (it may concern this key), the subscription dropped meanwhile, or
// the prefix's group no longer lets e's rule be cached. A full shard first
// loses an entry. It reports whether e was stored.
func (s *Store) remember(sh *shard, h [2]uint64, gen uint64, e entry) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen || !s.listening.Load() || !s.cacheable(e.group, e.ggen, ruleID{e.limit, e.window}) {
		return false
	}
	if _, ok := sh.m[h]; !ok && len(sh.m) >= s.perShrd {
		for k := range sh.m { // map order is random: a random victim
			delete(sh.m, k)
			break
		}
	}
	sh.m[h] = e
	s.stored.Add(1)
	return true
}

// invalidate drops key's entry on news from elsewhere (or a reset here),
// bumping the shard's generation.
func (s *Store) invalidate(key backend.Key, alg algorithms.Name) {
	h := s.hash(key, alg)
	sh := &s.shards[h[0]%shards]
	sh.mu.Lock()
	sh.gen++
	if _, ok := sh.m[h]; ok {
		delete(sh.m, h)
		s.dropped.Add(1)
	}
	sh.mu.Unlock()
}

// forget drops the entry h after this process wrote its key without a
// denial to remember. Unlike invalidate it leaves the shard's generation
// alone: the write is not news from elsewhere, and bumping the generation
// on every admission would keep concurrent denials in the shard from being
// remembered.
func (s *Store) forget(sh *shard, h [2]uint64) {
	sh.mu.Lock()
	if _, ok := sh.m[h]; ok {
		delete(sh.m, h)
		s.dropped.Add(1)
	}
	sh.mu.Unlock()
}

// flush drops every entry.
func (s *Store) flush() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.gen++
		clear(sh.m)
		sh.mu.Unlock()
	}
}

// entries counts the remembered denials.
func (s *Store) entries() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// hash identifies a key's state: two seeded 64-bit hashes.
func (s *Store) hash(key backend.Key, alg algorithms.Name) [2]uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	_, _ = h.WriteString(string(alg))
	_ = h.WriteByte(0)
	_, _ = h.WriteString(key.Prefix)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(key.ID)
	a := h.Sum64()
	_ = h.WriteByte(1)
	return [2]uint64{a, h.Sum64()}
}
