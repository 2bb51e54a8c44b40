package algorithms

import "unsafe"

// ring is a circular buffer of timestamps in ascending order, kept in one
// allocation: a ringHead, then the slots. A ring is only a pointer to it, so
// that a State stays five words (a memory store slot, one cache line). Its
// capacity grows with use, up to what two windows hold (see fit). The zero
// ring is empty.
type ring struct{ h *ringHead }

// ringHead is a ring's header: the position of the oldest timestamp, the
// number of timestamps and the number of slots that follow it.
type ringHead struct{ pos, n, cap int64 }

// ringHeader is the size of a ringHead in int64s.
const ringHeader = int64(unsafe.Sizeof(ringHead{}) / 8)

// newRing returns an empty ring of capacity c >= 1.
func newRing(c int64) ring {
	buf := make([]int64, ringHeader+c)
	r := ring{(*ringHead)(unsafe.Pointer(&buf[0]))}
	r.h.cap = c
	return r
}

func (r ring) size() int64 {
	if r.h == nil {
		return 0
	}
	return r.h.n
}

func (r ring) capacity() int64 {
	if r.h == nil {
		return 0
	}
	return r.h.cap
}

// slots returns the ring's slots; r must not be empty.
func (r ring) slots() []int64 {
	return unsafe.Slice((*int64)(unsafe.Add(unsafe.Pointer(r.h), unsafe.Sizeof(ringHead{}))), r.h.cap)
}

// slot returns the position in slots of the i-th oldest timestamp.
func (r ring) slot(i int64) int64 {
	j := r.h.pos + i
	if j >= r.h.cap {
		j -= r.h.cap
	}
	return j
}

func (r ring) at(i int64) int64 { return r.slots()[r.slot(i)] }

// countUpTo returns how many timestamps are <= t.
func (r ring) countUpTo(t int64) int64 {
	lo, hi := int64(0), r.size()
	for lo < hi {
		mid := int64(uint64(lo+hi) >> 1)
		if r.at(mid) > t {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (r ring) dropOldest(n int64) {
	if n == 0 {
		return
	}
	r.h.pos = r.slot(n)
	r.h.n -= n
	if r.h.n == 0 {
		r.h.pos = 0
	}
}

// fit gives back a buffer much larger than the log needs after a limit was
// lowered (a log holds at most two windows' units, two limits' worth), or
// all of it when the log is empty, unless it is small: a key whose log
// empties between requests (a short window) would allocate a new one on
// every admission.
func (r *ring) fit(limit int64) {
	switch n := r.size(); {
	case n == 0 && r.capacity() > keptRing:
		*r = ring{}
	case n == 0:
		if r.h != nil {
			r.h.pos = 0
		}
	case r.capacity() > 2*limit && r.capacity() > 2*n:
		r.resize(max(n, 2*limit))
	}
}

// keptRing is the largest capacity fit keeps for an empty log: what
// insert gives a first one.
const keptRing = 4

// resize moves the timestamps into a new buffer of capacity c >= size.
func (r *ring) resize(c int64) {
	old := *r
	n := old.size()
	buf := newRing(c)
	s := buf.slots()
	for i := range n {
		s[i] = old.at(i)
	}
	buf.h.n = n
	*r = buf
}

// clone returns a copy of r that shares no memory with it.
func (r ring) clone() ring {
	if r.h == nil {
		return r
	}
	c := newRing(r.h.cap)
	*c.h = *r.h
	copy(c.slots(), r.slots())
	return c
}

// insert records cost copies of t, keeping the order. Entries later than t
// (recorded before the clock went back) stay after it. The buffer grows up
// to the limit (what one window holds), then to two limits (what two
// windows hold), or what the entries need when other limits put more in it.
func (r *ring) insert(t, cost, limit int64) {
	size := r.size()
	need := size + cost
	if need > r.capacity() {
		bound := max(2*limit, need)
		if need <= limit {
			bound = limit
		}
		r.resize(min(max(2*r.capacity(), need, 4), bound))
	}
	l := *r
	s := l.slots()
	later := int64(0)
	for later < size && l.at(size-1-later) > t {
		later++
	}
	for i := size - 1; i >= size-later; i-- {
		s[l.slot(i+cost)] = s[l.slot(i)]
	}
	for i := size - later; i < size-later+cost; i++ {
		s[l.slot(i)] = t
	}
	l.h.n = need
}

// dropNewest forgets the n newest entries (0 <= n <= size).
func (r ring) dropNewest(n int64) {
	if n <= 0 {
		return
	}
	r.h.n -= n
	if r.h.n == 0 {
		r.h.pos = 0
	}
}

// remove deletes up to n timestamps equal to t, keeping the order.
func (r ring) remove(t, n int64) {
	size := r.size()
	end := r.countUpTo(t)
	k := min(n, end-r.countUpTo(t-1))
	if k <= 0 {
		return
	}
	s := r.slots()
	for i := end; i < size; i++ {
		s[r.slot(i-k)] = s[r.slot(i)]
	}
	r.h.n -= k
	if r.h.n == 0 {
		r.h.pos = 0
	}
}

// removeAt deletes the k timestamps from the i-th oldest on (i+k <= size),
// keeping the order.
func (r ring) removeAt(i, k int64) {
	size := r.size()
	s := r.slots()
	for j := i + k; j < size; j++ {
		s[r.slot(j-k)] = s[r.slot(j)]
	}
	r.h.n -= k
	if r.h.n == 0 {
		r.h.pos = 0
	}
}
