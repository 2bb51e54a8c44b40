package memorystore

import (
	"unsafe"

	"github.com/limitkit/limitkit/algorithms"
)

// slot holds one key's state in a table. Keys are identified by two
// independent 64-bit hashes of (prefix, id, algorithm) rather than by their
// bytes: a slot's size does not depend on the id's, and a lookup touches one
// cache line instead of following pointers to a map entry and its strings.
type slot struct {
	// Fill the cache line: tables are powers of two of 64-byte slots, so
	// every slot is one line and a lookup touches one. (First: a
	// zero-sized last field would be padded.)
	_ [slotSize - 24 - unsafe.Sizeof(algorithms.State{})]byte
	// h1 chooses the slot (0 marks an empty slot); h1 and h2 together
	// identify the key.
	h1, h2 uint64
	// expires is when the state becomes empty again, in milliseconds.
	expires int64
	state   algorithms.State
}

const slotSize = 64

// A slot must be exactly slotSize bytes (this fails to compile otherwise).
var _ [0]byte = [unsafe.Sizeof(slot{}) - slotSize]byte{}

// table is an open-addressing hash table with linear probing, grown by
// doubling up to room for its capacity at a load factor of 3/4.
type table struct {
	slots []slot
	mask  uint64
	used  int
	// rnd drives the choice of where sampling starts (xorshift64).
	rnd uint64
}

func newTable(seed uint64) table {
	return table{slots: make([]slot, 16), mask: 15, rnd: seed | 1}
}

// find returns the slot of a key, or nil.
func (t *table) find(h1, h2 uint64) *slot {
	for i := h1 & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.h1 == h1 && s.h2 == h2 {
			return s
		}
		if s.h1 == 0 {
			return nil
		}
	}
}

// add inserts a key known to be absent and returns its slot. The caller
// keeps used within the capacity the table may grow to.
func (t *table) add(h1, h2 uint64) *slot {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i := h1 & t.mask
	for t.slots[i].h1 != 0 {
		i = (i + 1) & t.mask
	}
	t.used++
	t.slots[i] = slot{h1: h1, h2: h2}
	return &t.slots[i]
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, 2*len(old))
	t.mask = uint64(len(t.slots) - 1)
	for i := range old {
		if s := &old[i]; s.h1 != 0 {
			j := s.h1 & t.mask
			for t.slots[j].h1 != 0 {
				j = (j + 1) & t.mask
			}
			t.slots[j] = *s
		}
	}
}

// deleteAt empties slot i and shifts later slots of its probe run back, so
// that every key stays reachable from its home slot without tombstones.
func (t *table) deleteAt(i uint64) {
	for j := i; ; {
		j = (j + 1) & t.mask
		s := &t.slots[j]
		if s.h1 == 0 {
			break
		}
		// The key in j may move to i unless its home lies cyclically in (i, j].
		home := s.h1 & t.mask
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.used--
}

// sweep looks at up to n keys from a random slot on, deletes those expired at
// now, and returns the hashes of the live key that would regain its
// allowance soonest (found is false when it saw no live key). It returns
// how many keys it deleted.
func (t *table) sweep(now int64, n int) (victimH1, victimH2 uint64, found bool, deleted int) {
	t.rnd ^= t.rnd << 13
	t.rnd ^= t.rnd >> 7
	t.rnd ^= t.rnd << 17
	i := t.rnd & t.mask
	victimExpires := int64(0)
	// Bound the slots passed, empty ones included. A deletion passes none:
	// charging it would end a whole-table sweep short of the table's end.
	for left := len(t.slots); n > 0 && left > 0; {
		s := &t.slots[i]
		switch {
		case s.h1 == 0:
		case s.expires <= now:
			t.deleteAt(i)
			deleted++
			n--
			continue // slot i now holds a later key of the run, if any
		default:
			if !found || s.expires < victimExpires {
				victimH1, victimH2, victimExpires, found = s.h1, s.h2, s.expires, true
			}
			n--
		}
		i = (i + 1) & t.mask
		left--
	}
	return victimH1, victimH2, found, deleted
}
